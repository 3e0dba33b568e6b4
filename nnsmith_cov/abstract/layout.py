"""Building blocks shared by the layout specs (ops/shape.py) and the reductions.

`RankChanging` is the base of specs whose output rank differs from their
input rank: backward insertion picks the input ranks with `in_ranks_for` and
leaves the wanted output rank in `self.out_rank` for `setup` to honour.

`lowered` runs a torch function but exports it as a single ONNX node whose
integer arguments are 1-D int64 constants. The TorchScript exporter turns the
integer arguments of `aten::slice`, `aten::constant_pad_nd`/`reflection_pad`,
`aten::expand`, `aten::repeat` and `aten::topk` into small subgraphs (Unsqueeze
or Reshape of scalar constants, Where over ConstantOfShape, ...). With constant
folding off, ONNX shape inference cannot see through those (its data
propagation starts only at Shape nodes), so the exported output shapes would be
unknown although the models are valid. The specs that need it say so. Outside
an export `lowered` is plain torch, so autograd (the value search) works.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.abstract.tensor import AbsTensor

INT64_MAX = 2**63 - 1


class RankChanging(OpSpec):
    """Specs whose backward insertion must choose input ranks for a given output rank."""

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        raise NotImplementedError


def mixed_ranks(x: list[AbsTensor]) -> bool:
    """Inputs of different ranks: forward insertion picks each input on its own,
    so specs needing equal ranks reject the pick in `requires`."""
    return len({t.rank for t in x}) > 1


class _Lowered(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fn: Callable, op_type: str, consts: tuple, attrs: dict, n_out: int):
        out = fn(x)
        if isinstance(out, tuple):
            ctx.mark_non_differentiable(*[o for o in out if not o.is_floating_point()])
        return out

    @staticmethod
    def symbolic(g: Any, x: Any, fn: Callable, op_type: str, consts: tuple, attrs: dict, n_out: int):
        extra = [g.op("Constant", value_t=c if isinstance(c, torch.Tensor) else torch.tensor(c)) for c in consts]
        return g.op(op_type, x, *extra, outputs=n_out, **attrs)


def lowered(
    x: torch.Tensor,
    fn: Callable[[torch.Tensor], Any],
    op_type: str,
    consts: Sequence[Any],
    attrs: dict[str, Any] | None = None,
    n_out: int = 1,
) -> Any:
    """`fn(x)` in torch; one ONNX `op_type` node with constant extra inputs on export.

    `consts` are tensors or int lists (made int64 tensors); `attrs` use the
    exporter's suffixed names (`axis_i`, `mode_s`).
    """
    if not torch.onnx.is_in_onnx_export():
        return fn(x)  # plain torch, with autograd (the value search differentiates through it)
    consts = tuple(torch.tensor(c, dtype=torch.int64) if isinstance(c, list) else c for c in consts)
    return _Lowered.apply(x, fn, op_type, consts, attrs or {}, n_out)
