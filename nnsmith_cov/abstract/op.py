"""The operator-spec base class and the meta-classes most specs are built from.

A spec is declarative: class attributes say which dtypes and ranks it takes and
which symbolic integer attributes it has; `requires` and `type_transfer` are
pure functions of symbolic shapes returning Z3 terms. Discrete, rank-dependent
parameters (axes, permutations, modes) are drawn in `setup` from the
`ChoiceSource` handed in, never from a global RNG. `forward` is the PyTorch
materialization and sees only concrete values, so a GraphIR can be rebuilt
without Z3.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op_facts import Domain, Elements, Monotone, ValueMap
from nnsmith_cov.abstract.symbols import int_sym
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.abstract.terms import disj, eq, ge

MAX_RANK = 5
# The largest magnitude a symbolic attribute may take: PyTorch narrows pooling windows and
# strides to C int (avg_pool raises "value cannot be converted to type int without
# overflow"), and nothing in a valid graph needs more. Z3 may otherwise pick any value for
# an attribute that nothing bounds from above (the stride of a pool with a single window,
# the dilation of a kernel of 1, a Tril diagonal past the matrix).
ATTR_LIMIT = 2**31 - 1
# The ONNX opsets a graph may be exported at: below 11 the exporter writes Pad, Slice and
# TopK with attributes, which the single-node lowering (`abstract.layout.lowered`) does not.
MIN_OPSET, MAX_OPSET = 11, 20
ANY_RANK: tuple[int, ...] = tuple(range(MAX_RANK + 1))
NONSCALAR: tuple[int, ...] = tuple(range(1, MAX_RANK + 1))

# (input dtypes, output dtypes): one accepted combination.
Sig = tuple[tuple[DType, ...], tuple[DType, ...]]
# (dtype, rank): what type matching looks at.
Slot = tuple[DType, int]


class AttrKind(enum.Enum):
    """How attribute binning (Algorithm 2) ranges a symbolic attribute."""

    SIZE = "size"  # >= 1: k exponential bins
    PAD = "pad"  # >= 0: a bin holding only 0, then the exponential bins
    SIGNED = "signed"  # any sign: the 0 bin and the exponential bins mirrored
    FREE = "free"  # no generic bins; the spec's `bin_constraints` ranges it


def same(dtypes: Sequence[DType], n_in: int = 1, n_out: int = 1) -> list[Sig]:
    """Signatures where every input and output has one common dtype."""
    return [((d,) * n_in, (d,) * n_out) for d in dtypes]


def into(dtypes: Sequence[DType], out: DType, n_in: int = 1) -> list[Sig]:
    """Signatures with inputs of one common dtype and a fixed output dtype."""
    return [((d,) * n_in, (out,)) for d in dtypes]


class Attrs(dict):
    """Concrete attributes of one instruction, readable as `a.name`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class OpSpec:
    """Base of every operator specification.

    Class attributes: `sigs` (accepted dtype combinations), `in_ranks` (the
    ranks each input accepts; its length is the arity), `attrs` (symbolic
    integer attributes and how they are binned), `param_inputs` (inputs that
    forward insertion always feeds from a fresh placeholder, made a weight),
    `vulnerable` (can yield NaN/Inf on valid shapes; such specs state their
    valid domain in `domain`), `torch_fn` (the function `forward` calls by
    default) and `proxy_fn` (the same computation with proxy derivatives,
    used by the value search).
    """

    sigs: ClassVar[list[Sig]]
    in_ranks: ClassVar[tuple[tuple[int, ...], ...]] = (ANY_RANK,)
    attrs: ClassVar[dict[str, AttrKind]] = {}
    param_inputs: ClassVar[tuple[int, ...]] = ()
    vulnerable: ClassVar[bool] = False
    torch_fn: ClassVar[Callable[..., Any] | None] = None
    proxy_fn: ClassVar[Callable[..., Any] | None] = None
    # The lowest ONNX opset PyTorch's exporter writes the op at, and per input dtype where
    # ONNX admits that dtype only later (an exporter/ONNX fact, checked by the spec tests).
    min_opset: ClassVar[int] = MIN_OPSET
    min_opset_for: ClassVar[dict[DType, int]] = {}
    # Operand index -> its first dim the exporter must know as a number (a convolution's
    # kernel dims): the export plan keeps the model-input dims behind them static.
    export_static_dims: ClassVar[dict[int, int]] = {}
    # ONNX forms the op can be exported in, drawn under the label FORM_DRAW (empty: one form)
    FORMS: ClassVar[tuple[str, ...]] = ()
    FORM_DRAW: ClassVar[str] = ""
    out_rank: int | None = None  # set by backward insertion before `setup`; None when forward

    # -- facts for the analyses that read graphs (kinds in abstract.op_facts) ----------------
    # Where its output elements come from: the range analysis passes a value's bounds (and,
    # for ALL, a domain learned of the output) through such ops unchanged.
    elements: ClassVar[Elements] = Elements.COMPUTED
    # How its output moves with its inputs, element by element (per-element bounds run
    # through it); `monotone_for` where attributes decide.
    monotone: ClassVar[Monotone] = Monotone.NONE
    # Each output element is the op of the input elements at its position (after
    # broadcasting): the range analysis evaluates it exactly on small value sets.
    pointwise: ClassVar[bool] = False
    # For unary ops that are one fixed function of each element: that function.
    value_map: ClassVar[ValueMap | None] = None
    # Per input, where its elements lie in every valid execution (None: anywhere); the range
    # analysis narrows the values feeding a vulnerable op to these.
    input_domains: ClassVar[tuple[Domain | None, ...]] = ()
    # For a unary op one-to-one on the reals and flat nowhere in floats near the value (not
    # Tanh: it reaches its limits exactly on half-lines): the one input giving an output
    # value, or None where that value has no such input.
    inverse: ClassVar[Callable[[float], float | None] | None] = None
    # Vulnerable ops the value search repairs first, lowest first (narrow domains: Asin's
    # [-1, 1] before Div's non-zero divisor); None: after those.
    narrow_rank: ClassVar[int | None] = None
    # Inputs holding positions into another input: they steer the op but carry no gradient.
    index_inputs: ClassVar[tuple[int, ...]] = ()
    # Slow in float16 on CPU (convolutions, matrix products): the search computes it in float32.
    slow_in_f16: ClassVar[bool] = False
    # `forward` with the gradients the value search needs where `forward` cuts them, used
    # while it records gradients, with or without proxy derivatives (same values).
    search_forward: ClassVar[Callable[..., Any] | None] = None

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.sym: dict[str, z3.ArithRef] = {}
        self.kinds: dict[str, AttrKind] = {}
        self.params: dict[str, Any] = {}
        for name, kind in self.attrs.items():
            self.new_attr(name, kind)

    # -- declaration helpers -------------------------------------------------
    @classmethod
    def name(cls) -> str:
        return cls.__name__

    @classmethod
    def arity(cls) -> int:
        return len(cls.in_ranks)

    @classmethod
    def n_outputs(cls) -> int:
        return len(cls.sigs[0][1])

    @classmethod
    def opset_floor(cls, dtype: DType) -> int:
        """The lowest opset an instance whose first input has `dtype` can be exported at."""
        return max(cls.min_opset, cls.min_opset_for.get(dtype, cls.min_opset))

    @classmethod
    def exports_at(cls, dtype: DType, opset: int) -> bool:
        """An instance whose first input has `dtype` can be exported at `opset`."""
        return cls.opset_floor(dtype) <= opset

    @classmethod
    def export_dtypes(cls, opset: int) -> frozenset[DType]:
        """The first-input dtypes of the signatures that export at `opset`."""
        return frozenset(sig[0][0] for sig in cls.sigs if cls.exports_at(sig[0][0], opset))

    @classmethod
    def monotone_for(cls, a: Attrs) -> Monotone:
        """`monotone` for an instance with attributes `a` (ops whose attributes decide override)."""
        return cls.monotone

    def new_attr(self, name: str, kind: AttrKind = AttrKind.SIZE) -> z3.ArithRef:
        """A fresh symbolic attribute; specs with rank-dependent attrs call it in `setup`."""
        sym = int_sym(f"{self.name()}{self.uid}.{name}")
        self.sym[name] = sym
        self.kinds[name] = kind
        return sym

    def __getattr__(self, name: str) -> z3.ArithRef:
        sym = self.__dict__.get("sym")
        if sym is not None and name in sym:
            return sym[name]
        raise AttributeError(name)

    # -- what specs override ---------------------------------------------------
    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        """Draw discrete parameters once input dtypes and ranks are known."""

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        """Constraints on inputs and attributes for the op to be valid."""
        return []

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        raise NotImplementedError

    def inner_tensors(self, x: list[AbsTensor]) -> list[AbsTensor]:
        """Tensors the op's ONNX form makes on the way (an Expand before a ScatterND): the
        element cap holds for them as for the graph's own, or one test can ask a backend
        for gigabytes."""
        return []

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        """Input ranks that can yield `out_rank` in backward insertion (None: impossible).

        The default suits shape-preserving ops: every input takes the output's rank.
        """
        return [out_rank] * self.arity()

    def infer_input_types(self, draw: ChoiceSource, out: Slot) -> list[Slot] | None:
        """Input dtypes and ranks that can produce `out` (backward insertion).

        Ranks come from `in_ranks_for`, dtypes from a signature making `out`'s
        dtype; `out_rank` is recorded for `setup`, which is called, leaving the
        op ready for `type_transfer`.
        """
        dtype, rank = out
        sigs = [s for s in self.sigs if s[1][0] == dtype]
        if not sigs:
            return None
        ranks = self.in_ranks_for(draw, rank)
        if ranks is None or any(r not in allowed for r, allowed in zip(ranks, self.in_ranks)):
            return None
        ins = [(d, r) for d, r in zip(draw.choice("sig", sigs)[0], ranks)]
        self.out_rank = rank
        self.setup(draw, ins)
        return ins

    def attr_domains(self) -> list[z3.BoolRef]:
        """SIZE attributes >= 1 and PAD ones >= 0; the generator adds these to `requires`
        (binning alone cannot hold them there: a dropped bin leaves them free)."""
        low = {AttrKind.SIZE: 1, AttrKind.PAD: 0}
        return [ge(sym, low[self.kinds[n]]) for n, sym in self.sym.items() if self.kinds[n] in low]

    def attr_limits(self) -> list[z3.BoolRef]:
        """Every symbolic attribute within +-ATTR_LIMIT. Added only when a model breaks them
        (`wide_attrs`): as part of every check they would change the graph of every seed."""
        return [z3.And(sym >= -ATTR_LIMIT, sym <= ATTR_LIMIT) for sym in self.sym.values()]

    def wide_attrs(self, model: z3.ModelRef) -> list[str]:
        """The symbolic attributes whose value in `model` lies beyond +-ATTR_LIMIT."""
        return [
            name for name, sym in self.sym.items() if abs(model.eval(sym, model_completion=True).as_long()) > ATTR_LIMIT
        ]

    def bin_constraints(self, draw: ChoiceSource, x: list[AbsTensor], k: int) -> list[z3.BoolRef]:
        """Specialized binning (k bins) for FREE attributes (e.g. slice ranges)."""
        return []

    def out_dtypes(self, ins: Sequence[DType]) -> tuple[DType, ...]:
        for sig_in, sig_out in self.sigs:
            if tuple(sig_in) == tuple(ins):
                return sig_out
        raise ValueError(f"{self.name()} takes no {list(ins)}")

    @classmethod
    def forward(cls, a: Attrs, *xs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The PyTorch computation, from concrete attributes."""
        assert cls.torch_fn is not None, f"{cls.name()} defines neither forward nor torch_fn"
        return cls.torch_fn(*xs)

    @classmethod
    def forward_proxy(cls, a: Attrs, *xs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """`forward` with proxy derivatives where the true gradient vanishes."""
        return cls.proxy_fn(*xs) if cls.proxy_fn is not None else cls.forward(a, *xs)

    @classmethod
    def domain(cls, a: Attrs, *xs: torch.Tensor) -> list[torch.Tensor]:
        """Losses of the predicates that keep the output finite (see abstract.numeric).

        Each is positive exactly when its predicate is violated; empty for
        ops that cannot produce NaN/Inf from finite inputs.
        """
        return []

    # -- after solving ---------------------------------------------------------
    def concrete_attrs(self, model: z3.ModelRef) -> dict[str, Any]:
        out: dict[str, Any] = {k: model.eval(v, model_completion=True).as_long() for k, v in self.sym.items()}
        out.update(self.params)
        return out

    def __repr__(self) -> str:
        return f"{self.name()}#{self.uid}"


# ---------------------------------------------------------------------------
# Meta-classes
# ---------------------------------------------------------------------------


class Elementwise(OpSpec):
    """Output shape = input shape (unary elementwise ops and their kin)."""

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        dt = self.out_dtypes([t.dtype for t in x])
        return [AbsTensor(list(x[0].shape), dt[0])]


class Broadcast(OpSpec):
    """N-ary ops with NumPy broadcasting (binary arithmetic, comparisons, Where).

    Each output dim is a fresh symbol that every aligned input dim either
    equals or is 1 to; at least one input dim equals it. No If-terms reach the
    shapes downstream, and no input is forced to 1 just because it could be:
    the solver and binning decide where broadcasting happens.
    """

    in_ranks = (ANY_RANK, ANY_RANK)
    pointwise = True

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        rank = max(t.rank for t in x)
        shape: list[Dim] = [int_sym(f"{self!r}.out{pos}") for pos in range(rank)]
        return [AbsTensor(shape, self.out_dtypes([t.dtype for t in x])[0])]

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        rank = max(t.rank for t in x)
        cons = []
        for pos in range(rank):
            out = int_sym(f"{self!r}.out{pos}")
            dims = [t.shape[pos - (rank - t.rank)] for t in x if pos >= rank - t.rank]
            cons += [disj(eq(d, out), eq(d, 1)) for d in dims]
            cons.append(disj(*[eq(d, out) for d in dims]))
        return cons

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        # One input keeps the output rank; the others may be lower and broadcast.
        keeper = draw.index("bcast_keeper", self.arity())
        return [out_rank if i == keeper else draw.integer("bcast_rank", 0, out_rank) for i in range(self.arity())]


def export_forms(ops: Sequence[type[OpSpec]]) -> dict[str, tuple[str, ...]]:
    """The form draws of `ops`: label -> option names (ops sharing a label share its options)."""
    return {op.FORM_DRAW: tuple(op.FORMS) for op in ops if op.FORM_DRAW and op.FORMS}
