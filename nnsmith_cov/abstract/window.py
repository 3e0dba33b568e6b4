"""Meta-classes for layers: fixed-rank parameter inputs and sliding windows.

`Layer` covers ops whose data input has the output's rank and whose other
inputs (weights, biases, statistics) each take one fixed rank. `Window` adds
per-spatial-dim symbolic attributes (named `stride0`, `stride1`, ...) over an
(N, C, *spatial) input, and the sliding-window size rule that convolution and
pooling share; a concrete spec then only says its dimensionality, its
attributes and how the channel dim and the window extent are found.
"""

from __future__ import annotations

from typing import ClassVar

import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.op import AttrKind, Attrs, OpSpec
from nnsmith_cov.abstract.symbols import context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor, Dim


def as_z3(v: Dim) -> z3.ArithRef:
    """A Z3 term for a dim that may be a plain int."""
    return v if isinstance(v, z3.ExprRef) else z3.IntVal(v, context())


def any_of(terms: list[z3.BoolRef | bool]) -> z3.BoolRef | bool:
    """Disjunction that also takes plain bools (comparisons of concrete dims)."""
    if any(t is True for t in terms):
        return True
    terms = [t for t in terms if t is not False]
    return z3.Or(terms) if terms else False


def spatial(a: Attrs, name: str, n: int) -> tuple[int, ...]:
    """The concrete per-dim attribute `name` as a tuple, for torch calls."""
    return tuple(a[f"{name}{i}"] for i in range(n))


def multiple(op: OpSpec, tag: str, whole: Dim, part: Dim) -> tuple[z3.ArithRef, z3.BoolRef]:
    """(q, whole == part * q) with q a fresh symbol: divisibility without Z3's div/mod, which solve slowly."""
    q = int_sym(f"{op!r}.{tag}")
    return q, whole == part * q


def slide(out: z3.ArithRef, length: Dim, span: Dim, stride: Dim, pad: Dim, ceil: bool = False) -> z3.BoolRef:
    """`out` is the number of positions of a window of extent `span` moved by `stride`
    over `length` padded by `pad` each side: floor (or ceil) of room / stride, plus one."""
    room = as_z3(length) + 2 * pad - span
    if ceil:
        return z3.And(stride * (out - 2) < room, room <= stride * (out - 1))
    return z3.And(stride * (out - 1) <= room, room < stride * out)


class Layer(OpSpec):
    """Input 0 has the output's rank; every other input has the one rank its `in_ranks` entry lists."""

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [out_rank] + [r[0] for r in self.in_ranks[1:]]


class Window(Layer):
    """Sliding-window ops on an (N, C, *spatial) input with `ndim` spatial dims.

    `per_dim` attributes get one symbol per spatial dim. Subclasses give
    `extent` (the window size in dim i, dilation included), `channels_out`,
    and the `ceil` flag for pooling's ceil_mode.
    """

    ndim: ClassVar[int]
    per_dim: ClassVar[dict[str, AttrKind]] = {}

    def __init__(self, uid: int) -> None:
        super().__init__(uid)
        for name, kind in self.per_dim.items():
            for i in range(self.ndim):
                self.new_attr(f"{name}{i}", kind)

    def at(self, name: str, i: int) -> z3.ArithRef:
        return self.sym[f"{name}{i}"]

    def extent(self, x: list[AbsTensor], i: int) -> Dim:
        raise NotImplementedError

    def channels_out(self, x: list[AbsTensor]) -> Dim:
        return x[0].shape[1]

    def out_size(self, x: list[AbsTensor], i: int) -> Dim:
        return int_sym(f"{self!r}.out{i}")

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        cons = []
        for i in range(self.ndim):
            length, span, pad, stride = (
                x[0].shape[2 + i],
                self.extent(x, i),
                self.at("padding", i),
                self.at("stride", i),
            )
            out = self.out_size(x, i)
            cons += [length + 2 * pad >= span, slide(out, length, span, stride, pad, self.params.get("ceil", False))]
            # Padding beyond the input length adds nothing but border windows,
            # and unbounded it lets Z3 pick padded inputs of millions of
            # elements (PyTorch's float16 CPU conv then segfaults). The bound
            # also caps the window extent at 3 * length.
            cons.append(pad <= length)
            if self.params.get("ceil"):
                # PyTorch drops a last window that would start in the right
                # padding; keep such windows out so every ceil rule agrees.
                cons.append((out - 1) * stride < length + pad)
        return cons

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = [x[0].shape[0], self.channels_out(x)] + [self.out_size(x, i) for i in range(self.ndim)]
        return [AbsTensor(shape, self.out_dtypes([t.dtype for t in x])[0])]
