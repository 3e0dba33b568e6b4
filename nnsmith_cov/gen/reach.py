"""Reach of ops the graph has no input for: fixed-rank ops (Conv2d wants rank 4) get a
Reshape bridge to their rank, ops of dtypes no value has (BitShift wants uint8) a Cast
bridge from their dtype; and which placeholders backward insertion may give an op."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import MAX_RANK, OpSpec
from nnsmith_cov.abstract.window import Layer

# The op a rank bridge inserts: any rank to any rank, with the same element count.
BRIDGE_OP = "Reshape"
# Seeds of the scratch draws that probe an op's `in_ranks_for` (some draw before deciding).
_PROBES = 8


@dataclass(frozen=True)
class Bridge:
    """The try after an op (`then`) failed for want of an input: insert `op` first.

    A rank bridge (`rank` set) reshapes a value of one of `dtypes` to `rank`, forward; a
    Cast bridge (`rank` None) goes backward onto a placeholder of one of `ranks`, its
    input a new placeholder of `dtype` (one `then` takes). `then` follows, forward."""

    op: type[OpSpec]
    then: type[OpSpec]
    dtypes: frozenset[DType]
    rank: int | None = None
    dtype: DType | None = None
    ranks: frozenset[int] | None = None

    @property
    def forward(self) -> bool:
        return self.rank is not None


def backward_ranks(op: type[OpSpec]) -> frozenset[int] | None:
    """The output ranks backward insertion can give `op` (None: any). A fixed-rank op
    (Conv2d, pools, PixelShuffle, Addmm) then picks among the placeholders it fits: drawn
    among all, it mostly picked one of another rank and failed."""
    if op.in_ranks_for is OpSpec.in_ranks_for:  # every input takes the output's rank
        return frozenset(op.in_ranks[0]).intersection(*op.in_ranks[1:])
    if op.in_ranks_for is Layer.in_ranks_for:  # input 0 takes it, the others are fixed
        return frozenset(op.in_ranks[0])
    ranks = _probed_ranks(op)
    return None if len(ranks) > MAX_RANK else ranks


@functools.cache
def _probed_ranks(op: type[OpSpec]) -> frozenset[int]:
    """Output ranks for which the op's own `in_ranks_for` gives input ranks it takes, under
    any of a few scratch draws (whether it answers depends on the rank alone in every spec;
    the draws only pick among answers). No instance is made: no Z3 symbols, no context; a
    spec whose `in_ranks_for` needs one is taken to answer for every rank."""
    probe = object.__new__(op)
    ranks = set()
    for r in range(MAX_RANK + 1):
        for seed in range(_PROBES):
            try:
                got = op.in_ranks_for(probe, ChoiceSource(seed), r)
            except (AttributeError, KeyError, TypeError):
                return frozenset(range(MAX_RANK + 1))
            if got is not None and all(k in allowed for k, allowed in zip(got, op.in_ranks)):
                ranks.add(r)
                break
    return frozenset(ranks)


def _forward_ranks(cls: type[OpSpec]) -> frozenset[int] | None:
    """Ranks a bridge may give the value the op takes as its first input, forward (None: it
    is a weight): those that every data input takes where there are such (one value then
    feeds them all: Addmm's c and a), else those of the first."""
    if cls.in_ranks_for in (OpSpec.in_ranks_for, Layer.in_ranks_for):  # the output's rank, too
        return backward_ranks(cls)
    if 0 in cls.param_inputs:
        return None
    data = [frozenset(r) for i, r in enumerate(cls.in_ranks) if i not in cls.param_inputs]
    return frozenset.intersection(*data) or data[0]


def bridge_for(
    cls: type[OpSpec],
    value_dtypes: Iterable[DType],
    placeholders: Sequence[tuple[DType, int]],
    ops: Sequence[type[OpSpec]],
    opset: int,
    prob: float,
    draw: ChoiceSource,
    backward: bool = True,
) -> Bridge | None:
    """After `cls` failed for want of any value or placeholder it takes: with probability
    `prob`, a bridge for it (None where none applies; draws only where one does).

    Where the graph holds values of a dtype its first input takes but of no rank it takes
    (among at most two), a Reshape (in `ops`) to such a rank: without it such ops reach only
    graphs that happen to hold their rank, a tenth of their fair share. Where it holds no
    value of such a dtype (uint8 for BitShift, in float graphs), a Cast (in `ops`) from one
    of them backward onto a placeholder (`placeholders`: dtype and rank of each) of a rank
    it takes: only ops whose dtype an earlier backward insertion happened to bring in
    reached such graphs. `backward` False: no Cast bridge (forward insertion only)."""
    if cls.name() == BRIDGE_OP or getattr(cls, "target", None) is not None:
        return None
    ranks = _forward_ranks(cls)
    dtypes = cls.export_dtypes(opset)
    if not dtypes.isdisjoint(value_dtypes):
        reshape = next((o for o in ops if o.name() == BRIDGE_OP), None)
        if reshape is None or ranks is None or len(ranks) > 2:
            return None
        if prob < 1.0 and not draw.coin("bridge", prob):
            return None
        return Bridge(reshape, cls, dtypes, rank=draw.choice("bridge.rank", sorted(ranks)))
    casts = _casts(ops, dtypes, opset) if backward else {}
    targets = sorted(
        {dt for dt, r in placeholders if dt in casts and (ranks is None or r in ranks)}, key=lambda d: d.value
    )
    if not targets:
        return None
    if prob < 1.0 and not draw.coin("bridge", prob):
        return None
    target = draw.choice("bridge.cast_to", targets)
    cast, sources = casts[target]
    dtype = draw.choice("bridge.cast_from", sorted(sources, key=lambda d: d.value))
    return Bridge(cast, cls, dtypes, dtype=dtype, ranks=ranks)


def _casts(
    ops: Sequence[type[OpSpec]], dtypes: frozenset[DType], opset: int
) -> dict[DType, tuple[type[OpSpec], frozenset[DType]]]:
    """The Cast specs in `ops` by target dtype, each with the dtypes among `dtypes` it
    converts from at `opset` (only those with any). Names starting with Cast are the Cast
    specs, as to the range analysis; each has its `target`."""
    found = {}
    for o in ops:
        target = getattr(o, "target", None)
        if not o.name().startswith("Cast") or not isinstance(target, DType):
            continue
        sources = dtypes & o.export_dtypes(opset)
        if sources:
            found[target] = (o, sources)
    return found
