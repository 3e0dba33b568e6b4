"""Linear algebra: Linear, MatMul, Addmm, Einsum."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import FLOATS, DType
from nnsmith_cov.abstract.op import MAX_RANK, NONSCALAR, AttrKind, Attrs, OpSpec, Slot, same
from nnsmith_cov.abstract.symbols import int_sym
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.abstract.window import Layer, any_of

SIZE, PAD = AttrKind.SIZE, AttrKind.PAD

# -- linear algebra ----------------------------------------------------------------


class Linear(Layer):
    """x [..., in] @ W[out, in]^T + b[out].

    ONNX forms: "linear", F.linear (one Gemm for a 2-d x, else MatMul on the transposed
    weight and Add); for a 2-d x only, the draw "linear.form" may pick "matmul_add", the
    same written out as `x @ W.T + b` as hand-written MLP blocks do (Transpose, MatMul and
    Add, which ORT fuses into a Gemm itself). At other ranks both are the same ONNX, so
    nothing is drawn. Graphs stored before the form was drawn are "linear".
    """

    slow_in_f16 = True
    sigs = same(FLOATS, 3)
    in_ranks = (NONSCALAR, (2,), (1,))
    param_inputs = (1, 2)
    FORMS = ("linear", "matmul_add")
    FORM_DRAW = "linear.form"  # the label the form is drawn under: the scheduler's "form" arms

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["form"] = draw.choice(self.FORM_DRAW, self.FORMS) if ins[0][1] == 2 else "linear"

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [x[0].shape[-1] == x[1].shape[1], x[2].shape[0] == x[1].shape[0]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:-1], x[1].shape[0]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.get("form") == "matmul_add":
            return torch.matmul(x, w.t()) + b
        return F.linear(x, w, b)


class MatMul(OpSpec):
    """torch.matmul: dot, matrix-vector either side, and batched products with broadcast leading dims."""

    slow_in_f16 = True
    sigs = same(FLOATS + (DType.int32, DType.int64), 2)
    in_ranks = (NONSCALAR, NONSCALAR)
    torch_fn = torch.matmul

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        cases = [(1, 1)] if out_rank == 0 else []
        if 1 <= out_rank < 5:  # matrix-vector products drop one dim
            cases += [(out_rank + 1, 1), (1, out_rank + 1)]
        if out_rank >= 2:
            cases += [(out_rank, r) for r in range(2, out_rank + 1)] + [(r, out_rank) for r in range(2, out_rank)]
        return list(draw.choice("matmul.ranks", cases))

    @staticmethod
    def _mats(x: list[AbsTensor]) -> tuple[list[Dim], list[Dim]]:
        a, b = (list(t.shape) for t in x)
        return ([1, *a] if len(a) == 1 else a), (b + [1] if len(b) == 1 else b)

    def _batch(self, x: list[AbsTensor]) -> tuple[list[z3.ArithRef], list[z3.BoolRef]]:
        a, b = self._mats(x)
        n = max(len(a), len(b)) - 2
        out, cons = [], []
        for pos in range(n):
            o = int_sym(f"{self!r}.batch{pos}")
            dims = [m[pos - (n - (len(m) - 2))] for m in (a, b) if pos >= n - (len(m) - 2)]
            cons += [z3.Or(d == o, d == 1) for d in dims] + [z3.Or([d == o for d in dims])]
            out.append(o)
        return out, cons

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        a, b = self._mats(x)
        return [a[-1] == b[-2]] + self._batch(x)[1]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        a, b = self._mats(x)
        shape = self._batch(x)[0] + ([a[-2]] if x[0].rank > 1 else []) + ([b[-1]] if x[1].rank > 1 else [])
        return [AbsTensor(shape, x[0].dtype)]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, y)


class Addmm(OpSpec):
    """beta * c + alpha * (a @ b) on matrices, c broadcast to the product: exported as ONNX Gemm."""

    sigs = same(FLOATS, 3)
    in_ranks = ((0, 1, 2), (2,), (2,))
    param_inputs = (2,)  # B as a weight, as Gemm layers have it
    _SCALES = (1.0, 0.5, 2.0, -1.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params.update(alpha=draw.choice("addmm.alpha", self._SCALES), beta=draw.choice("addmm.beta", self._SCALES))

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [draw.integer("addmm.c_rank", 0, 2), 2, 2] if out_rank == 2 else None

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        c, (m, k), (k2, n) = x[0].shape, x[1].shape, x[2].shape
        out = [m, n][2 - len(c) :]
        return [k == k2] + [any_of([d == 1, d == o]) for d, o in zip(c, out)]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([x[1].shape[0], x[2].shape[1]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.addmm(c, x, y, beta=a.beta, alpha=a.alpha)


class Einsum(OpSpec):
    """torch.einsum on two operands with drawn subscripts: each axis of the second operand
    shares a label with an axis of the first (same size) or has its own; each label is kept
    in the output, in a drawn order, or summed over. Labels are numbers in `a`, `b`, `out`."""

    # No bool kernel; smaller integers are summed into int64 on the way (a dtype change or,
    # feeding the result into bmm, a torch error).
    sigs = same(FLOATS + (DType.int64,), 2)
    in_ranks = (NONSCALAR, NONSCALAR)
    min_opset = 12

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        ra = draw.integer("einsum.rank_a", 1, MAX_RANK)
        return [ra, draw.integer("einsum.rank_b", max(1, out_rank - ra), MAX_RANK)]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        ra, rb = ins[0][1], ins[1][1]
        # Backward, enough labels must stay distinct to make the output rank.
        most = min(ra, rb) if self.out_rank is None else min(ra, rb, ra + rb - self.out_rank)
        k = draw.integer("einsum.shared", 0, most)
        b: list[int | None] = [None] * rb
        shared = draw.sample("einsum.shared_a", range(ra), k)
        for label, pos in zip(shared, draw.sample("einsum.shared_b", range(rb), k)):
            b[pos] = label
        fresh = iter(range(ra, ra + rb))
        labels = ra + rb - k
        n_out = self.out_rank if self.out_rank is not None else draw.integer("einsum.n_out", 0, min(labels, MAX_RANK))
        self.params.update(
            a=list(range(ra)),
            b=[next(fresh) if label is None else label for label in b],
            out=draw.sample("einsum.out", range(labels), n_out),
        )

    def _sizes(self, x: list[AbsTensor]) -> dict[int, Dim]:
        sizes = dict(zip(self.params["a"], x[0].shape))
        for label, d in zip(self.params["b"], x[1].shape):
            sizes.setdefault(label, d)
        return sizes

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        sizes = self._sizes(x)
        return [d == sizes[label] for label, d in zip(self.params["b"], x[1].shape) if label < x[0].rank]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        sizes = self._sizes(x)
        return [AbsTensor([sizes[label] for label in self.params["out"]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        letters = "abcdefghij"
        sub = lambda labels: "".join(letters[i] for i in labels)
        return torch.einsum(f"{sub(a.a)},{sub(a.b)}->{sub(a.out)}", x, y)


OPS = (Linear, MatMul, Addmm, Einsum)
