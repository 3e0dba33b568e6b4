"""Helpers the operator modules share: exporting a torch computation as one chosen ONNX node,
and keeping positions and integer operands well-formed in every execution.

Some ONNX operators have an exact PyTorch counterpart that the TorchScript
exporter never emits: it has no symbolic for the aten op (asinh, integer
bitwise or/xor/not), decomposes it (mish, hardshrink, local_response_norm,
lp_pool) or refuses its arguments (threshold with a non-zero threshold). Specs
of those compute in torch as usual and, in an export, become one node of the
ONNX type with the same semantics, so the backends' converters for it are
reached. `as_node` is `abstract.layout.lowered` for any number of tensor inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


class _Node(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, fn: Callable, op_type: str, consts: tuple, attrs: dict, n_out: int, since: int, *xs):
        out = fn(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
        return out

    @staticmethod
    def symbolic(g: Any, fn: Callable, op_type: str, consts: tuple, attrs: dict, n_out: int, since: int, *xs: Any):
        if g.opset < since:
            raise ValueError(f"{op_type} with {sorted(attrs)} is ONNX opset {since}, exporting at {g.opset}")
        extra = [g.op("Constant", value_t=c) for c in consts]
        return g.op(op_type, *xs, *extra, outputs=n_out, **attrs)


def as_node(
    fn: Callable[..., Any],
    op_type: str,
    xs: Sequence[torch.Tensor],
    consts: Sequence[Any] = (),
    attrs: dict[str, Any] | None = None,
    n_out: int = 1,
    since: int = 1,
) -> Any:
    """`fn(*xs)` in torch; in an export, one ONNX `op_type` node on `xs` followed by
    constant inputs `consts` (tensors, or int lists made int64 tensors). `attrs` use the
    exporter's suffixed names (`alpha_f`, `blocksize_i`). Exporting below opset `since`
    fails: for a form of the op (an attribute value) newer than the op, which the ONNX
    checker does not notice."""
    if not torch.onnx.is_in_onnx_export():
        return fn(*xs)  # plain torch, with autograd (the value search differentiates through it)
    consts = tuple(c if isinstance(c, torch.Tensor) else torch.tensor(c, dtype=torch.int64) for c in consts)
    return _Node.apply(fn, op_type, consts, attrs or {}, n_out, since, *xs)


def positions(index: torch.Tensor, size: int | Sequence[int]) -> torch.Tensor:
    """`index` wrapped into [0, size) (floor modulo, exported as Mod): index values come
    from the graph (any int64), so the op is valid by construction. `size` may be one
    bound per position along the last dim (GatherND's columns).

    The value search reruns integer ops on float shadows of their inputs to carry
    gradients; positions carry none, so a shadow is turned back into integers here."""
    bound = size if isinstance(size, int) else torch.tensor(list(size), dtype=torch.int64)
    wrapped = torch.remainder(index, bound)
    return wrapped.long() if wrapped.is_floating_point() else wrapped


def integers(*xs: torch.Tensor) -> list[torch.Tensor]:
    """Integer operands as given; float shadows of them (see `positions`) rounded to int64,
    for the integer-only torch kernels (bitwise ops) that would refuse them."""
    return [x.round().long() if x.is_floating_point() else x for x in xs]
