"""Indexing operators: gathers, scatters and one-hot encoding.

Positions come from the graph (any int64), so every op here wraps them into
range itself (`positions`, exported as Mod): valid by construction. Index
inputs of the ops whose index needs a rank or a last dim that generated graphs
rarely hold are weights (a lookup table of positions), so forward insertion can
always place the op.

Where several positions may coincide, what is written there must not depend on
which write wins: torch and ONNX leave that order undefined. Scatters therefore
write one value (ScatterValue), reduce (ScatterAdd, ScatterReduce) or write the
same row at every position (IndexPut).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, NUMERIC, DType
from nnsmith_cov.abstract.layout import RankChanging, lowered, mixed_ranks
from nnsmith_cov.abstract.op import MAX_RANK, NONSCALAR, AttrKind, Attrs, OpSpec, Slot
from nnsmith_cov.abstract.op_facts import Elements
from nnsmith_cov.abstract.symbols import context
from nnsmith_cov.abstract.tensor import AbsTensor
from nnsmith_cov.ops.onnx_node import as_node, positions

# -- gather ----------------------------------------------------------------------------


class GatherElements(OpSpec):
    """torch.gather(x, axis, index % x.shape[axis]); index dims fit in x's off the axis."""

    elements = Elements.SOME
    index_inputs = (1,)
    sigs = [((d, DType.int64), (d,)) for d in ALL]
    in_ranks = (NONSCALAR, NONSCALAR)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["axis"] = draw.integer("gather.axis", 0, ins[0][1] - 1)

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        if mixed_ranks(x):
            return [z3.BoolVal(False, context())]
        data, index = x
        return [index.shape[i] <= data.shape[i] for i in range(data.rank) if i != self.params["axis"]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[1].shape), x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, a.axis, positions(index, a.in_types[0].shape[a.axis]))


class IndexSelect(RankChanging):
    """torch.index_select(x, axis, index % x.shape[axis]) with a 1-D or 0-D index (ONNX Gather).

    The index is a weight (a lookup table of positions): int64 values of rank
    0 or 1 are too rare in generated graphs for forward insertion to find one.
    """

    elements = Elements.SOME
    index_inputs = (1,)
    sigs = [((d, DType.int64), (d,)) for d in ALL]
    in_ranks = (NONSCALAR, (0, 1))
    param_inputs = (1,)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int]:
        return [out_rank, draw.integer("index_select.index_rank", 0, 1)]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["axis"] = draw.integer("index_select.axis", 0, ins[0][1] - 1)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        shape = list(x[0].shape)
        shape[self.params["axis"]] = x[1].shape[0] if x[1].rank else 1
        return [AbsTensor(shape, x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, a.axis, positions(index, a.in_types[0].shape[a.axis]))


class GatherND(RankChanging):
    """x[index[..., 0], ..., index[..., m-1]]: index [*B, m] picks slices x[i0, ..., i(m-1)],
    the output is [*B, *x.shape[m:]]. Column j is wrapped into x's dim j. Exported as ONNX
    GatherND, which the exporter emits only for boolean masks (dynamic shapes); the index is
    a weight (its last dim must be m). Never a 0-d output: ONNX shape inference leaves
    GatherND's scalar output without a shape."""

    sigs = [((d, DType.int64), (d,)) for d in ALL]
    in_ranks = (NONSCALAR, NONSCALAR)
    param_inputs = (1,)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        if out_rank == 0:
            return None
        # (q - 1) output dims come from the index, the rest from x's dims after the m indexed ones
        q = draw.integer("gather_nd.index_rank", max(1, out_rank - MAX_RANK + 2), min(out_rank + 1, MAX_RANK))
        rest = out_rank - (q - 1)
        return [rest + draw.integer("gather_nd.m", 1, MAX_RANK - rest), q]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n, q = ins[0][1], ins[1][1]
        if self.out_rank is None:  # an output rank (q - 1) + (n - m) in [1, MAX_RANK]
            lo, hi = max(1, n + q - 1 - MAX_RANK), min(n, n + q - 2)
            m = draw.integer("gather_nd.m", lo, hi) if lo <= hi else 0  # 0: no m fits, rejected
        else:
            m = n - (self.out_rank - (q - 1))
        self.params["m"] = m

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        m = self.params["m"]
        return [x[1].shape[-1] == m] if 1 <= m <= x[0].rank else [False]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[1].shape[:-1]) + list(x[0].shape[self.params["m"] :]), x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        index = positions(index, a.in_types[0].shape[: a.m])
        return as_node(lambda t, i: t[tuple(i.unbind(-1))], "GatherND", [x, index])


# -- scatter ---------------------------------------------------------------------------


class _Scatter(OpSpec):
    """x with elements replaced along `axis` at index % x.shape[axis] (ONNX ScatterElements):
    x [*S], index [*I] (a weight), and for the scatters of a source, src [*J]; equal ranks,
    I fits in S off the axis and in J everywhere (torch's rule). Output: x's type."""

    param_inputs = (1,)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["axis"] = draw.integer("scatter.axis", 0, ins[0][1] - 1)

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        if mixed_ranks(x):
            return [False]  # the solver rejects a literal False without a check
        data, index, *src = x
        cons = [index.shape[i] <= data.shape[i] for i in range(data.rank) if i != self.params["axis"]]
        return cons + [index.shape[i] <= t.shape[i] for t in src for i in range(data.rank)]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[0].shape), x[0].dtype)]

    @staticmethod
    def where(a: Attrs, index: torch.Tensor) -> torch.Tensor:
        return positions(index, a.in_types[0].shape[a.axis])

    @staticmethod
    def updates(a: Attrs, src: torch.Tensor) -> torch.Tensor:
        """The corner of src that torch reads: ONNX takes updates of the index's shape, and
        torch's scatter_add backward fails on a larger src."""
        return src[tuple(slice(0, n) for n in a.in_types[1].shape)]


class ScatterValue(_Scatter):
    """x.scatter(axis, index, value) with one drawn value: coinciding positions write the same."""

    sigs = [((d, DType.int64), (d,)) for d in ALL]
    in_ranks = (NONSCALAR, NONSCALAR)
    _VALUES = (-1.0, 0.0, 0.5, 2.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        super().setup(draw, ins)
        self.params["value"] = draw.choice("scatter.value", self._VALUES)

    @staticmethod
    def fill(a: Attrs, dtype: DType) -> float | int:
        """The scalar `scatter` takes for a tensor of `dtype`. Booleans take the int (a bool
        scalar breaks the tracer's scatter overload lookup)."""
        return a.value if dtype.is_float else int(a.value != 0) if dtype is DType.bool else int(a.value)

    @classmethod
    def written(cls, a: Attrs, dtype: DType) -> float:
        """The number that lands in a tensor of `dtype` (-1 into uint8 is 255)."""
        return float(torch.tensor(cls.fill(a, dtype)).to(dtype.torch).double())

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return x.scatter(a.axis, cls.where(a, index), cls.fill(a, a.in_types[0].dtype))


class ScatterAdd(_Scatter):
    """x.scatter_add(axis, index, src) (ScatterElements with reduction add)."""

    sigs = [((d, DType.int64, d), (d,)) for d in NUMERIC]
    in_ranks = (NONSCALAR, NONSCALAR, NONSCALAR)

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return x.scatter_add(a.axis, cls.where(a, index), cls.updates(a, src))


class ScatterReduce(_Scatter):
    """x.scatter_reduce(axis, index, src, amax/amin) including x's own values (ONNX has no other
    form). Exported as one ScatterElements with reduction max/min: the exporter wraps it in an
    If on the index rank whose branches ONNX shape inference merges into a flat shape."""

    sigs = [((d, DType.int64, d), (d,)) for d in NUMERIC]
    in_ranks = (NONSCALAR, NONSCALAR, NONSCALAR)
    min_opset = 18  # reductions max and min

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        super().setup(draw, ins)
        self.params["reduce"] = draw.choice("scatter.reduce", ("amax", "amin"))

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        index, src = cls.where(a, index), cls.updates(a, src)
        attrs = {"axis_i": a.axis, "reduction_s": a.reduce[1:]}
        fn = lambda t, i, u: t.scatter_reduce(a.axis, i, u, a.reduce)
        return as_node(fn, "ScatterElements", [x, index, src], attrs=attrs, since=18)


class IndexPut(RankChanging):
    """x.index_put((index % x.shape[0],), row): the rows of x at 1-D positions all replaced by
    one row of x.shape[1:] (ONNX ScatterND), so coinciding positions write the same values.
    The row is expanded to one per position first: the exporter reshapes the values to that
    shape without broadcasting them (a model no backend can run)."""

    sigs = [((d, DType.int64, d), (d,)) for d in ALL]
    in_ranks = (NONSCALAR, (1,), tuple(range(MAX_RANK)))
    param_inputs = (1,)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [out_rank, 1, out_rank - 1] if out_rank >= 1 else None

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        data, _, row = x
        if row.rank != data.rank - 1:
            return [False]  # the solver rejects a literal False without a check
        return [a == b for a, b in zip(row.shape, data.shape[1:])]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[0].shape), x[0].dtype)]

    def inner_tensors(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([x[1].shape[0], *x[2].shape], x[2].dtype)]  # one row per position

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, index: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        shape = [a.in_types[1].shape[0], *a.in_types[2].shape]
        rows = lowered(row.unsqueeze(0), lambda t: t.expand(shape), "Expand", [shape])
        return x.index_put((positions(index, a.in_types[0].shape[0]),), rows)


# -- one-hot -------------------------------------------------------------------------------


class OneHot(RankChanging):
    """F.one_hot(index % classes, classes): int64 [*S] -> int64 [*S, classes] (ONNX OneHot,
    which takes no 0-d index)."""

    sigs = [((DType.int64,), (DType.int64,))]
    in_ranks = (tuple(range(1, MAX_RANK)),)
    attrs = {"classes": AttrKind.SIZE}

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [out_rank - 1] if out_rank >= 2 else None

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape, self.classes], DType.int64)]

    @staticmethod
    def forward(a: Attrs, index: torch.Tensor) -> torch.Tensor:
        return F.one_hot(positions(index, a.classes), a.classes)


OPS = (GatherElements, IndexSelect, GatherND, ScatterValue, ScatterAdd, ScatterReduce, IndexPut, OneHot)
