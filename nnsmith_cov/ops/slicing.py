"""Cutting and joining: Concat, Split, Slice and the pads."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.bins import draw_bin
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, NUMERIC, DType
from nnsmith_cov.abstract.layout import INT64_MAX, lowered, mixed_ranks
from nnsmith_cov.abstract.op import NONSCALAR, AttrKind, Attrs, OpSpec, Slot, same
from nnsmith_cov.abstract.op_facts import Elements, Monotone
from nnsmith_cov.abstract.symbols import context
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.ops.shape import MATRIX

# -- concat / split -------------------------------------------------------------------


class Concat(OpSpec):
    """torch.cat along a drawn axis; the other dims agree. Arity from `in_ranks`."""

    monotone = Monotone.MOVES

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["axis"] = draw.integer("concat.axis", 0, ins[0][1] - 1)

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        if mixed_ranks(x):
            return [z3.BoolVal(False, context())]
        ax, first = self.params["axis"], x[0].shape
        return [t.shape[i] == first[i] for t in x[1:] for i in range(len(first)) if i != ax]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = list(x[0].shape)
        if not mixed_ranks(x):
            ax = self.params["axis"]
            shape[ax] = sum((t.shape[ax] for t in x[1:]), x[0].shape[ax])
        return [AbsTensor(shape, x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, a.axis)


class Concat2(Concat):
    sigs = same(ALL, 2)
    in_ranks = (NONSCALAR,) * 2


class Concat3(Concat):
    sigs = same(ALL, 3)
    in_ranks = (NONSCALAR,) * 3


class Concat4(Concat):
    sigs = same(ALL, 4)
    in_ranks = (NONSCALAR,) * 4


class Split(OpSpec):
    """torch.split into symbolic chunk sizes along a drawn axis (one output per chunk)."""

    elements = Elements.SOME
    monotone = Monotone.MOVES
    in_ranks = (NONSCALAR,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["axis"] = draw.integer("split.axis", 0, ins[0][1] - 1)
        for i in range(self.n_outputs()):
            self.new_attr(f"c{i}")

    def _chunks(self) -> list[z3.ArithRef]:
        return [self.sym[f"c{i}"] for i in range(self.n_outputs())]

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [z3.Sum(self._chunks()) == x[0].shape[self.params["axis"]]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        outs = []
        for c in self._chunks():
            shape = list(x[0].shape)
            shape[self.params["axis"]] = c
            outs.append(AbsTensor(shape, x[0].dtype))
        return outs

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(x, [a[f"c{i}"] for i in range(cls.n_outputs())], a.axis)


class Split2(Split):
    sigs = same(ALL, 1, 2)


class Split3(Split):
    sigs = same(ALL, 1, 3)


# -- slicing ------------------------------------------------------------------------


class Slice(OpSpec):
    """x[..., start:end:step, ...] on up to three drawn axes.

    Per axis, the start is written from the front (0 <= start < d) or the back
    (-d <= start < 0); the end from the front, the back, past the end (clamped)
    or left open; the step is drawn from a small set so the length stays a
    linear term. Starts and ends are FREE attributes: `bin_constraints` bins the
    start offset and the length instead of their raw values.

    Exported as one ONNX Slice with constant starts/ends/axes/steps: torch's
    lowering passes each bound through Unsqueeze of a scalar constant, which
    ONNX shape inference cannot read.
    """

    elements = Elements.SOME
    monotone = Monotone.MOVES
    sigs = same(ALL)
    in_ranks = (NONSCALAR,)
    _STEPS = (1, 2, 3, 4)
    _STEP_WEIGHTS = (3, 2, 1, 1)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        axes = sorted(draw.sample("slice.axes", range(n), draw.integer("slice.n_axes", 1, min(n, 3))))
        starts = [draw.choice("slice.start_from", ("front", "back")) for _ in axes]
        ends = [draw.choice("slice.end_from", ("front", "back", "past", "open")) for _ in axes]
        steps = [draw.choice("slice.step", self._STEPS, self._STEP_WEIGHTS) for _ in axes]
        for j in range(len(axes)):
            self.new_attr(f"start{j}", AttrKind.FREE)
            if ends[j] != "open":
                self.new_attr(f"end{j}", AttrKind.FREE)
        self.params.update(axes=axes, start_from=starts, end_from=ends, steps=steps)

    def _bounds(self, j: int, d: Dim) -> tuple[Dim, Dim, list[z3.BoolRef]]:
        """(effective start, effective end, constraints) on axis j of size d."""
        s = self.sym[f"start{j}"]
        if self.params["start_from"][j] == "front":
            s_eff, cons = s, [s >= 0, s < d]
        else:
            s_eff, cons = s + d, [s >= -d, s < 0]
        mode = self.params["end_from"][j]
        if mode == "open":
            return s_eff, d, cons
        e = self.sym[f"end{j}"]
        if mode == "front":
            return s_eff, e, cons + [e > s_eff, e <= d]
        if mode == "back":
            return s_eff, e + d, cons + [e + d > s_eff, e < 0]
        return s_eff, d, cons + [e > d]  # past the end: clamped to d

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [c for j, ax in enumerate(self.params["axes"]) for c in self._bounds(j, x[0].shape[ax])[2]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = list(x[0].shape)
        for j, ax in enumerate(self.params["axes"]):
            s_eff, e_eff, _ = self._bounds(j, shape[ax])
            step = self.params["steps"][j]
            shape[ax] = (e_eff - s_eff + (step - 1)) / step if step > 1 else e_eff - s_eff
        return [AbsTensor(shape, x[0].dtype)]

    def bin_constraints(self, draw: ChoiceSource, x: list[AbsTensor], k: int) -> list[z3.BoolRef]:
        cons = []
        for j, ax in enumerate(self.params["axes"]):
            d = x[0].shape[ax]
            s_eff, e_eff, _ = self._bounds(j, d)
            # the offset from the end the start is written from, then the length or the overshoot
            off = s_eff if self.params["start_from"][j] == "front" else -self.sym[f"start{j}"]
            kind = AttrKind.PAD if self.params["start_from"][j] == "front" else AttrKind.SIZE
            cons.append(draw_bin(draw, off, kind, k, None)[1])
            mode = self.params["end_from"][j]
            if mode in ("front", "back"):
                cons.append(draw_bin(draw, e_eff - s_eff, AttrKind.SIZE, k, None)[1])
            elif mode == "past":
                cons.append(draw_bin(draw, self.sym[f"end{j}"] - d, AttrKind.SIZE, k, None)[1])
        return cons

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        index: list[slice] = [slice(None)] * x.dim()
        starts, ends = [], []
        for j, ax in enumerate(a.axes):
            start, end = a[f"start{j}"], a.get(f"end{j}")
            index[ax] = slice(start, end, a.steps[j])
            starts.append(start)
            ends.append(INT64_MAX if end is None else end)
        return lowered(x, lambda t: t[tuple(index)], "Slice", [starts, ends, list(a.axes), list(a.steps)])


# -- padding -------------------------------------------------------------------------


class Pad(OpSpec):
    """F.pad on the k trailing dims; pads may be negative (cropping).

    Pads are SIGNED. The constraints make "crop, then pad" well defined (what
    ONNX Pad does) so it equals torch's "pad, then crop": a dim cropped on one
    side keeps at least one element; reflect pads stay below the cropped size.
    Exported as one ONNX Pad with constant pads: torch's lowering computes the
    pads with a Shape/ConstantOfShape/Transpose subgraph that ONNX shape
    inference cannot read.
    """

    monotone = Monotone.MOVES
    mode: ClassVar[str]
    onnx_mode: ClassVar[str]

    def n_dims_choices(self, rank: int) -> list[int]:
        return list(range(1, rank + 1))

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        k = draw.choice("pad.n_dims", self.n_dims_choices(ins[0][1]))
        for i in range(k):
            self.new_attr(f"l{i}", AttrKind.SIGNED)
            self.new_attr(f"r{i}", AttrKind.SIGNED)
        self.params["k"] = k

    def _pads(self, i: int) -> tuple[z3.ArithRef, z3.ArithRef]:
        return self.sym[f"l{i}"], self.sym[f"r{i}"]

    def side_constraints(self, d: Dim, lo: z3.ArithRef, hi: z3.ArithRef) -> list[z3.BoolRef]:
        return [z3.Or(lo >= 0, d + lo >= 1), z3.Or(hi >= 0, d + hi >= 1)]

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        s = x[0].shape
        return [c for i in range(self.params["k"]) for c in self.side_constraints(s[-1 - i], *self._pads(i))]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = list(x[0].shape)
        for i in range(self.params["k"]):
            lo, hi = self._pads(i)
            shape[-1 - i] = shape[-1 - i] + lo + hi
        return [AbsTensor(shape, x[0].dtype)]

    @classmethod
    def pad_value(cls, a: Attrs, x: torch.Tensor) -> list[torch.Tensor]:
        return []

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        flat = [a[f"{side}{i}"] for i in range(a.k) for side in "lr"]  # last dim first, as F.pad wants
        n = x.dim()
        begins, ends = [0] * n, [0] * n
        for i in range(a.k):
            begins[n - 1 - i], ends[n - 1 - i] = a[f"l{i}"], a[f"r{i}"]
        value = cls.pad_value(a, x)
        kwargs = {"value": value[0].item()} if value else {}
        return lowered(
            x,
            lambda t: F.pad(t, flat, mode=cls.mode, **kwargs),
            "Pad",
            [begins + ends, *value],
            {"mode_s": cls.onnx_mode},
        )


class PadConstant(Pad):
    sigs = same(ALL)
    in_ranks = (NONSCALAR,)
    min_opset_for = {DType.bool: 13}
    mode, onnx_mode = "constant", "constant"

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        super().setup(draw, ins)
        self.params["value"] = draw.choice("pad.value", (0, 1, 2))

    @classmethod
    def pad_value(cls, a: Attrs, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.tensor(a.value, dtype=x.dtype)]


class _EdgePad(Pad):
    # torch pads 1 trailing dim of 2-D/3-D inputs, 2 of 3-D/4-D, 3 of 4-D/5-D.
    sigs = same(NUMERIC)
    in_ranks = (MATRIX,)

    def n_dims_choices(self, rank: int) -> list[int]:
        return [k for k in (1, 2, 3) if rank in (k + 1, k + 2)]


class PadReflect(_EdgePad):
    mode, onnx_mode = "reflect", "reflect"

    def side_constraints(self, d: Dim, lo: z3.ArithRef, hi: z3.ArithRef) -> list[z3.BoolRef]:
        # a positive pad reflects within what the other side leaves
        return super().side_constraints(d, lo, hi) + [
            z3.And(lo < d, z3.Or(hi >= 0, lo < d + hi)),
            z3.And(hi < d, z3.Or(lo >= 0, hi < d + lo)),
        ]


class PadReplicate(_EdgePad):
    mode, onnx_mode = "replicate", "edge"


OPS = (Concat2, Concat3, Concat4, Split2, Split3, Slice, PadConstant, PadReflect, PadReplicate)
