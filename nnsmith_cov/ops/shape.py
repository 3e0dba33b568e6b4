"""Layout operators: reshape-like, concat/split, slicing, padding, tiling, triangles, scans, top-k."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, NUMERIC, DType
from nnsmith_cov.abstract.layout import INT64_MAX, RankChanging, lowered, mixed_ranks
from nnsmith_cov.abstract.op import MAX_RANK, NONSCALAR, AttrKind, Attrs, Elementwise, OpSpec, Slot, same
from nnsmith_cov.abstract.symbols import context
from nnsmith_cov.abstract.tensor import AbsTensor, Dim, nelement
from nnsmith_cov.gen.binning import draw_bin

MATRIX = (2, 3, 4, 5)  # ranks with at least two dims


def _eq(a: Dim, b: Dim) -> z3.BoolRef:
    return z3.BoolVal(a == b, context()) if isinstance(a, int) and isinstance(b, int) else a == b


# -- reshape-like ------------------------------------------------------------------


class Reshape(RankChanging):
    """A target shape with the same element count; one target dim may be passed as -1.

    The dims are cut into consecutive groups, input group j becoming output
    group j with the same product: a group of one output dim is the product of
    its inputs (a merge, no unknowns), a group of several output dims gets
    symbolic sizes `s<pos>` whose product must equal the inputs' (a split, or
    the general case when both sides have several dims). One group is the
    unrestricted reshape; more groups give Z3 small products instead of one
    product equation over up to ten unknowns, which it often cannot decide
    within the budget. A side of rank 0 maps to all 1s on the other side.
    """

    sigs = same(ALL)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int]:
        return [draw.integer("reshape.in_rank", 0, MAX_RANK)]

    @staticmethod
    def _cut(draw: ChoiceSource, label: str, n: int, g: int) -> list[int]:
        """n dims split into g consecutive non-empty groups: the group sizes."""
        cuts = [0, *sorted(draw.sample(label, range(1, n), g - 1)), n]
        return [b - a for a, b in zip(cuts, cuts[1:])]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        m = draw.integer("reshape.rank", 0, MAX_RANK) if self.out_rank is None else self.out_rank
        if n and m:
            g = draw.integer("reshape.groups", 1, min(n, m))
            groups = [
                list(p)
                for p in zip(self._cut(draw, "reshape.in_cuts", n, g), self._cut(draw, "reshape.out_cuts", m, g))
            ]
        else:
            groups = []
        pos = 0
        for _, b in groups:
            if b > 1:
                for i in range(pos, pos + b):
                    self.new_attr(f"s{i}")
            pos += b
        # No -1 for a rank-0 input: the exporter then loses the static size of
        # that dim, and shape-dependent lowerings after it (Squeeze) become Ifs.
        infer = m and n and draw.coin("reshape.neg1", 0.3)
        self.params.update(rank=m, groups=groups, infer=draw.integer("reshape.infer", 0, m - 1) if infer else None)

    def _plan(self, x: AbsTensor) -> tuple[list[Dim], list[z3.BoolRef]]:
        """(output shape, constraints)."""
        if not self.params["groups"]:  # a rank-0 side: everything on the other side is 1
            return [1] * self.params["rank"], [_eq(d, 1) for d in x.shape]
        shape: list[Dim] = []
        cons = []
        i = 0
        for a, b in self.params["groups"]:
            prod = nelement(x.shape[i : i + a])
            if b == 1:
                shape.append(prod)
            else:
                outs = [self.sym[f"s{k}"] for k in range(len(shape), len(shape) + b)]
                cons.append(_eq(prod, nelement(outs)))
                shape += outs
            i += a
        return shape, cons

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return self._plan(x[0])[1]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(self._plan(x[0])[0], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        shape = list(a.out_types[0].shape)
        if a.infer is not None:
            shape[a.infer] = -1
        return torch.reshape(x, shape)


class Flatten(RankChanging):
    """torch.flatten(x, start, end).

    Not on rank 0: the exporter's Reshape for a 0-d input loses the static
    output size, so a Squeeze after it becomes an If (exporter imprecision).
    """

    sigs = same(ALL)
    in_ranks = (NONSCALAR,)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [draw.integer("flatten.in_rank", out_rank, MAX_RANK)] if out_rank else None

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        if self.out_rank is None:
            start, end = sorted((draw.integer("flatten.start", 0, n - 1), draw.integer("flatten.end", 0, n - 1)))
        else:
            span = n - self.out_rank
            start = draw.integer("flatten.start", 0, n - 1 - span)
            end = start + span
        self.params.update(start=start, end=end)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        s, lo, hi = x[0].shape, self.params["start"], self.params["end"]
        return [AbsTensor(s[:lo] + [nelement(s[lo : hi + 1])] + s[hi + 1 :], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, a.start, a.end)


class Transpose(OpSpec):
    """Swap two dims."""

    sigs = same(ALL)
    in_ranks = (MATRIX,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["dims"] = draw.sample("transpose.dims", range(ins[0][1]), 2)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        i, j = self.params["dims"]
        shape = list(x[0].shape)
        shape[i], shape[j] = shape[j], shape[i]
        return [AbsTensor(shape, x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.transpose(x, *a.dims)


class Permute(OpSpec):
    """A full permutation of the dims."""

    sigs = same(ALL)
    in_ranks = (MATRIX,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["perm"] = draw.permutation("permute.perm", ins[0][1])

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([x[0].shape[p] for p in self.params["perm"]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*a.perm)


class Squeeze(RankChanging):
    """Drop drawn size-1 dims, one Squeeze each.

    Never x.squeeze() without dims: when its input is a weight (or made from
    weights by shape ops) the exporter declares the output unsqueezed, and the
    ONNX model fails its own shape check, an exporter defect.
    """

    sigs = same(ALL)
    in_ranks = (NONSCALAR,)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return None if out_rank >= MAX_RANK else [draw.integer("squeeze.in_rank", out_rank + 1, MAX_RANK)]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        k = draw.integer("squeeze.n_dims", 1, n) if self.out_rank is None else n - self.out_rank
        self.params["dims"] = sorted(draw.sample("squeeze.dims", range(n), k))

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [x[0].shape[i] == 1 for i in self.params["dims"]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([d for i, d in enumerate(x[0].shape) if i not in self.params["dims"]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        # One dim at a time: the TorchScript exporter fails on aten::squeeze.dims
        # (a tuple of dims) with "only one element tensors can be converted to
        # Python scalars", an exporter defect.
        for d in reversed(a.dims):
            x = x.squeeze(d)
        return x


class Unsqueeze(RankChanging):
    """Insert a size-1 dim; the position is passed negative half the time."""

    sigs = same(ALL)
    in_ranks = (tuple(range(MAX_RANK)),)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [out_rank - 1] if out_rank >= 1 else None

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        pos = draw.integer("unsqueeze.pos", 0, n)
        self.params.update(pos=pos, dim=pos - n - 1 if draw.coin("unsqueeze.negative") else pos)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = list(x[0].shape)
        shape.insert(self.params["pos"], 1)
        return [AbsTensor(shape, x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.unsqueeze(x, a.dim)


class Expand(RankChanging):
    """Broadcast drawn size-1 dims to symbolic sizes, possibly adding leading dims.

    Exported as one ONNX Expand whose shape holds 1 for the kept dims (ONNX
    Expand broadcasts both ways): torch's own lowering builds the shape through
    Where/ConstantOfShape, which ONNX shape inference cannot read.
    """

    sigs = same(ALL)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int]:
        return [draw.integer("expand.in_rank", 0, out_rank)]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        m = draw.integer("expand.rank", n, MAX_RANK) if self.out_rank is None else self.out_rank
        bcast = [i for i in range(n) if draw.coin("expand.bcast")]
        for i in range(m - n):
            self.new_attr(f"lead{i}")
        for i in bcast:
            self.new_attr(f"to{i}")
        self.params.update(lead=m - n, bcast=bcast)

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [x[0].shape[i] == 1 for i in self.params["bcast"]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        lead = [self.sym[f"lead{i}"] for i in range(self.params["lead"])]
        kept = [self.sym[f"to{i}"] if i in self.params["bcast"] else d for i, d in enumerate(x[0].shape)]
        return [AbsTensor(lead + kept, x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        out = a.out_types[0].shape
        new = [p < a.lead or p - a.lead in a.bcast for p in range(len(out))]
        torch_shape = [s if b else -1 for s, b in zip(out, new)]
        onnx_shape = [s if b else 1 for s, b in zip(out, new)]
        return lowered(x, lambda t: t.expand(torch_shape), "Expand", [onnx_shape])


# -- concat / split -------------------------------------------------------------------


class Concat(OpSpec):
    """torch.cat along a drawn axis; the other dims agree. Arity from `in_ranks`."""

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


# -- tiling, triangles ----------------------------------------------------------------


class Tile(OpSpec):
    """Repeat drawn dims a symbolic number of times (`rep<i>`), the others once.

    Only the drawn dims get a product (dim * rep), which keeps the nonlinear
    terms Z3 must factor in backward insertion few. x.repeat(reps) in torch,
    exported as one ONNX Tile with constant repeats: torch.tile lowers to an If
    on the rank difference, and x.repeat to an Expand by ConstantOfShape before
    the Tile; ONNX shape inference loses the output shape through either
    (size-1 dims in the Expand case).
    """

    sigs = same(ALL)
    in_ranks = (NONSCALAR,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        dims = sorted(draw.sample("tile.dims", range(n), draw.integer("tile.n_dims", 1, n)))
        for i in dims:
            self.new_attr(f"rep{i}")
        self.params["dims"] = dims

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = [d * self.sym[f"rep{i}"] if f"rep{i}" in self.sym else d for i, d in enumerate(x[0].shape)]
        return [AbsTensor(shape, x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        reps = [a.get(f"rep{i}", 1) for i in range(x.dim())]
        return lowered(x, lambda t: t.repeat(reps), "Tile", [reps])


class Tril(Elementwise):
    sigs = same(ALL)
    in_ranks = (MATRIX,)
    attrs = {"diagonal": AttrKind.SIGNED}
    min_opset = 14  # ONNX Trilu

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.tril(x, a.diagonal)


class Triu(Tril):
    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.triu(x, a.diagonal)


# -- scans, order ----------------------------------------------------------------------


class CumSum(Elementwise):
    # ONNX CumSum takes no 8-bit ints or bool; dtype=x.dtype stops torch widening int32.
    sigs = same(FLOATS + (DType.int32, DType.int64))
    in_ranks = (NONSCALAR,)
    min_opset_for = {DType.float16: 14}

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        self.params["axis"] = draw.integer("cumsum.axis", -n, n - 1)

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, a.axis, dtype=x.dtype)


class TopK(OpSpec):
    """The k largest or smallest along an axis: values and int64 indices.

    Exported as one ONNX TopK with a constant K: torch's lowering reshapes a
    scalar constant into K, which ONNX shape inference cannot read.
    """

    sigs = [((d,), (d, DType.int64)) for d in NUMERIC]
    in_ranks = (NONSCALAR,)
    attrs = {"k": AttrKind.SIZE}

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params.update(axis=draw.integer("topk.axis", 0, ins[0][1] - 1), largest=draw.coin("topk.largest"))

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [self.k <= x[0].shape[self.params["axis"]]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = list(x[0].shape)
        shape[self.params["axis"]] = self.k
        return [AbsTensor(shape, x[0].dtype), AbsTensor(list(shape), DType.int64)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        attrs = {"axis_i": a.axis, "largest_i": int(a.largest), "sorted_i": 1}
        return lowered(x, lambda t: _topk_ties_first(t, a.k, a.axis, a.largest), "TopK", [[a.k]], attrs, 2)


def _topk_ties_first(x: torch.Tensor, k: int, axis: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """TopK as ONNX defines it: of equal values the lower index comes first. torch.topk leaves
    the order of ties open, which made equal integers look like backend bugs."""
    if x.dtype == torch.bool:  # sort has no bool kernel on every build
        values, idx = _topk_ties_first(x.to(torch.uint8), k, axis, largest)
        return values.to(torch.bool), idx
    values, idx = torch.sort(x, dim=axis, descending=largest, stable=True)
    return values.narrow(axis, 0, k), idx.narrow(axis, 0, k)


class Flip(Elementwise):
    sigs = same(ALL)
    in_ranks = (NONSCALAR,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        self.params["dims"] = sorted(draw.sample("flip.dims", range(n), draw.integer("flip.n_dims", 1, n)))

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x, a.dims)


class Roll(Elementwise):
    """Circular shift by symbolic (signed) amounts along drawn dims.

    Two exporter defects shape it: torch.roll without dims (roll the flattened
    tensor) fails an assertion in the exporter, so dims are always given; and
    the exporter lowers a shift to Slice(-shift:) + Slice(:-shift) without
    reducing it modulo the dim, so |shift| > dim exports the identity (and
    loses the dim's static size, making a later Squeeze an If). Shifts are
    therefore kept within [-dim, dim].
    """

    sigs = same(ALL)
    in_ranks = (NONSCALAR,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        dims = draw.sample("roll.dims", range(n), draw.integer("roll.n_dims", 1, n))
        for j in range(len(dims)):
            self.new_attr(f"shift{j}", AttrKind.SIGNED)
        self.params["dims"] = dims

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        cons = []
        for j, d in enumerate(self.params["dims"]):
            shift, size = self.sym[f"shift{j}"], x[0].shape[d]
            cons += [shift <= size, shift >= -size]
        return cons

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.roll(x, [a[f"shift{j}"] for j in range(len(a.dims))], a.dims)


OPS = (
    Reshape, Flatten, Transpose, Permute, Squeeze, Unsqueeze, Expand,
    Concat2, Concat3, Concat4, Split2, Split3, Slice,
    PadConstant, PadReflect, PadReplicate, Tile, Tril, Triu,
    CumSum, TopK, Flip, Roll,
)  # fmt: skip
