"""Reach of fixed-rank ops (Conv2d wants rank 4): which placeholders backward insertion may
give them, and the Reshape bridge that makes their rank when no value has it."""

from __future__ import annotations

from collections.abc import Iterable

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.abstract.window import Layer

# The op a bridge inserts: any rank to any rank, with the same element count.
BRIDGE_OP = "Reshape"


def backward_ranks(op: type[OpSpec]) -> frozenset[int] | None:
    """The output ranks backward insertion can give `op`, where they follow from its class
    alone (None: its `in_ranks_for` decides, maybe by a draw). A fixed-rank op (Conv2d,
    pools, PixelShuffle) then picks among the placeholders it fits: drawn among all, it
    mostly picked one of another rank and failed."""
    if op.in_ranks_for is OpSpec.in_ranks_for:  # every input takes the output's rank
        return frozenset(op.in_ranks[0]).intersection(*op.in_ranks[1:])
    if op.in_ranks_for is Layer.in_ranks_for:  # input 0 takes it, the others are fixed
        return frozenset(op.in_ranks[0])
    return None


def bridge_for(
    cls: type[OpSpec], value_dtypes: Iterable[DType], opset: int, prob: float, draw: ChoiceSource
) -> tuple[type[OpSpec], frozenset[DType], int] | None:
    """After a fixed-rank op failed for want of any value or placeholder of its rank: with
    probability `prob`, the next try is a Reshape of a value of a dtype the op takes (among
    `value_dtypes`, the graph's) to a rank it takes, and the op itself follows. Without it
    such ops reach only graphs that happen to hold their rank, a tenth of their fair share.
    Returns (op, its first input's dtypes, the rank), or None where no bridge applies;
    draws only where one applies."""
    ranks = backward_ranks(cls)
    if ranks is None and 0 not in cls.param_inputs:  # what its first input takes, forward
        ranks = frozenset(cls.in_ranks[0])
    if ranks is None or len(ranks) > 2 or cls.name() == BRIDGE_OP:
        return None
    dtypes = frozenset(sig[0][0] for sig in cls.sigs if cls.opset_floor(sig[0][0]) <= opset)
    if dtypes.isdisjoint(value_dtypes):
        return None
    if prob < 1.0 and not draw.coin("bridge", prob):
        return None
    return cls, dtypes, draw.choice("bridge.rank", sorted(ranks))
