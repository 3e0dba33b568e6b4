"""Layout operators: reshape-like, tiling, triangles, scans, top-k, flips and rolls (cutting and
joining: `ops.slicing`)."""

from __future__ import annotations

import torch
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, NUMERIC, DType
from nnsmith_cov.abstract.layout import RankChanging, lowered
from nnsmith_cov.abstract.op import MAX_RANK, NONSCALAR, AttrKind, Attrs, Elementwise, OpSpec, Slot, same
from nnsmith_cov.abstract.op_facts import Elements, Monotone
from nnsmith_cov.abstract.symbols import context
from nnsmith_cov.abstract.tensor import AbsTensor, Dim, nelement

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

    `linear` (set before `setup`: the generator's rank bridges) makes as many groups as
    the smaller rank has dims, and a group of several output dims the input dim among
    unit dims: no unknowns and no product equation, so a bridge adds no work for Z3
    beyond the products of merged dims.
    """

    elements = Elements.ALL
    monotone = Monotone.MOVES
    sigs = same(ALL)
    linear = False

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
            g = min(n, m) if self.linear else draw.integer("reshape.groups", 1, min(n, m))
            groups = [
                list(p)
                for p in zip(self._cut(draw, "reshape.in_cuts", n, g), self._cut(draw, "reshape.out_cuts", m, g))
            ]
        else:
            groups = []
        # Linear: where the input dim goes among each group's output dims (the rest are 1).
        units = [draw.integer("reshape.unit_at", 0, b - 1) if b > 1 else 0 for _, b in groups] if self.linear else None
        pos = 0
        for _, b in groups:
            if b > 1 and units is None:
                for i in range(pos, pos + b):
                    self.new_attr(f"s{i}")
            pos += b
        # No -1 for a rank-0 input: the exporter then loses the static size of
        # that dim, and shape-dependent lowerings after it (Squeeze) become Ifs.
        infer = m and n and draw.coin("reshape.neg1", 0.3)
        self.params.update(rank=m, groups=groups, infer=draw.integer("reshape.infer", 0, m - 1) if infer else None)
        if units is not None:  # (only bridges carry it: other Reshapes' attributes stay as they were)
            self.params["units"] = units

    def _plan(self, x: AbsTensor) -> tuple[list[Dim], list[z3.BoolRef]]:
        """(output shape, constraints)."""
        if not self.params["groups"]:  # a rank-0 side: everything on the other side is 1
            return [1] * self.params["rank"], [_eq(d, 1) for d in x.shape]
        shape: list[Dim] = []
        cons = []
        i = 0
        units = self.params.get("units")
        for j, (a, b) in enumerate(self.params["groups"]):
            prod = nelement(x.shape[i : i + a])
            if b == 1:
                shape.append(prod)
            elif units is not None:
                shape += [prod if k == units[j] else 1 for k in range(b)]
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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
    monotone = Monotone.MOVES
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
    monotone = Monotone.RISING
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

    elements = Elements.SOME
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
    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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
    Tile, Tril, Triu,
    CumSum, TopK, Flip, Roll,
)  # fmt: skip
