"""A static proof that a graph has no NaN/Inf-free values at all (or only exact ones).

Some generated graphs cannot be repaired by any search: Log of a LogSoftmax
(never positive), a divisor out of Tril (whose upper triangle is zero), Asin of
a constant pad of 2, a max pool whose window lies wholly in the padding. This
module finds such graphs by abstract interpretation: each value gets a `Range`
(bounds on all its elements, values some element certainly takes, and bounds
that some element certainly reaches), propagated in order under the assumption
that every op before is valid; a vulnerable op whose input range lies wholly
outside its domain proves the graph infeasible. An op whose inputs are each one
known value everywhere (a Less(x, x), a softmax over one element, a zero
product) is computed instead, exactly.

The analysis is sound but incomplete: it answers "infeasible" only with a proof
(every transfer function over-approximates), and "unknown" otherwise. Ops it
does not model get the whole range of their dtype.

What each kind of fact claims, of every valid execution (no op before has a
NaN/Inf output, and casts from floats to integers stay in range):

- bounds, `integral`: every element lies in [lo, hi] (and is a whole number);
- `forced`: each of these values is taken by some element;
- `below` / `above`: some element is <= below, some is >= above (a Softmax
  slice's largest entry is at least 1/n; the bounds also tighten: of inputs
  within a spread d, every Softmax entry is at least 1 / (1 + (n - 1) e^d), so
  Softmax of Ceil(Acos(x)) is never 0). Non-monotone ops (Sin, Cos, Abs, Gelu,
  HardSwish) carry these facts through the image of the interval the element
  lies in: LogSoftmax's largest entry of each slice is in [-log n, 0] (less
  rounding), so Sin of it is <= 0;
- `values`: every element is one of these (a few values: booleans, Floor or
  Sign of a bounded value, ArgMax over few entries). Pointwise ops on inputs
  with known sets are run on every combination, with the op's own forward, so
  the result is exact (Pow(c, c) of a cast comparison is 1 everywhere);
  combinations giving NaN/Inf are no valid execution and drop out;
- `box`: per-element lower and upper bounds, started where some elements are
  the same in every execution (padding, a zeroed triangle) and computed by
  running ops monotone in each input on the lower and on the upper bounds
  (decreasing ones swapped, products at the corners): the output's bounds are
  the boxes' extremes, some element is at most the least upper bound (a row
  minimum that sees a padding of -2 is at most -2), and elements whose bounds
  meet hold that value in every execution.

Values whose elements are all equal (one element, and what pointwise and
layout ops make of such) have ArgMax and ArgMin 0 (the first of equal values).

Between values, the analysis knows one order: the maximum of all of a value's
elements (a ReduceMax to one element, or what picks from it) is at least each
of them, the minimum at most. A comparison the order decides is a constant (Less
of the maximum and the value is False everywhere), and their difference keeps
its sign.

One answer is not a proof of infeasibility: `_exact_only` reports a graph that
is valid only where a float input or weight holds one exact value (Acos of
Exp(Sqrt(x)) needs Exp's result to be 1, so x = 0: below 4e-15 in float32),
found through one-to-one ops only, so no interval of values is valid. Values
that exact are a set no search aims for; the generator drops such graphs with
the proven ones, and the reason says "valid only where ... is exactly ...".

A vulnerable op's domain also refines its inputs for the ops that read them
later: every valid execution has them in the domain, and so the values they
are made of by ops that keep every element exactly (Reshape and its kin,
Concat's parts, non-cropping pads, Neg, exact casts, Relu for a positive
domain). A refinement that leaves no value, or contradicts a value certainly
taken, is a proof too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.ops import op_by_name

INF = math.inf
SLACK = 1e-3  # distance from a domain bound a "certainly reached" value must keep (float rounding)
# ... by the dtype the op computes in: float16 rounds at 1e-3 per op, float64 at 1e-16.
_SLACKS = {DType.float16: SLACK, DType.float32: 1e-5, DType.float64: 1e-9}


@dataclass(frozen=True)
class Range:
    """What holds for every valid execution: lo <= each element <= hi; each value in
    `forced` is taken by some element; some element is <= `below`, some >= `above`.
    `integral`: every element is a whole number. `src` names the op a fact came from."""

    lo: float = -INF
    hi: float = INF
    forced: frozenset[float] = field(default_factory=frozenset)
    below: float = INF
    above: float = -INF
    integral: bool = False
    src: str = ""
    values: frozenset[float] | None = None  # every element is one of these (None: not known)
    # Per-element lower and upper bounds (the elements of a padding, a zeroed triangle are
    # known exactly); None when no more is known than lo and hi.
    box: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, compare=False, repr=False)

    def certainly_le(self, bound: float) -> bool:
        """Some element is certainly <= bound."""
        return self.hi <= bound or self.below <= bound or any(c <= bound for c in self.forced)

    def certainly_ge(self, bound: float) -> bool:
        return self.lo >= bound or self.above >= bound or any(c >= bound for c in self.forced)


def _dtype_range(dt: DType) -> Range:
    if dt is DType.bool:
        return Range(0.0, 1.0, integral=True, values=frozenset({0.0, 1.0}))
    if dt.is_float:
        return Range()
    info = torch.iinfo(dt.torch)
    return Range(float(info.min), float(info.max), integral=True)


def _hull(rs: list[Range]) -> Range:
    return Range(min(r.lo for r in rs), max(r.hi for r in rs), integral=all(r.integral for r in rs))


def _union(rs: list[Range]) -> frozenset[float] | None:
    """The values elements of any of rs may take, when each one's set is known and few."""
    sets = [_value_set(r) for r in rs]
    if any(vs is None for vs in sets):
        return None
    out = frozenset().union(*sets)
    return out if len(out) <= MAX_VALUES else None


# -- elementwise maps ---------------------------------------------------------------------

# name -> (function on float64, trend: +1 increasing, -1 decreasing, 0 neither, domain)
_UNARY = {
    "Relu": (torch.relu, 1, None),
    "LeakyRelu": (F.leaky_relu, 1, None),
    "Elu": (F.elu, 1, None),
    "Selu": (F.selu, 1, None),
    "Sigmoid": (torch.sigmoid, 1, None),
    "Tanh": (torch.tanh, 1, None),
    "Atan": (torch.atan, 1, None),
    "Erf": (torch.erf, 1, None),
    "Floor": (torch.floor, 1, None),
    "Ceil": (torch.ceil, 1, None),
    "Round": (torch.round, 1, None),
    "Sign": (torch.sign, 1, None),
    "Softsign": (F.softsign, 1, None),
    "HardSigmoid": (F.hardsigmoid, 1, None),
    "Exp": (torch.exp, 1, None),
    "Log": (torch.log, 1, (0.0, INF)),
    "Log2": (torch.log2, 1, (0.0, INF)),
    "Sqrt": (torch.sqrt, 1, (0.0, INF)),
    "Asin": (torch.asin, 1, (-1.0, 1.0)),
    "Acos": (torch.acos, -1, (-1.0, 1.0)),
    "Neg": (torch.neg, -1, None),
    "Abs": (torch.abs, 0, None),
    "Gelu": (F.gelu, 0, None),
    "HardSwish": (F.hardswish, 0, None),
    "Sin": (torch.sin, 0, None),
    "Cos": (torch.cos, 0, None),
}
_INTEGRAL_RESULT = {"Floor", "Ceil", "Round", "Sign"}
# Interior extremes of the non-monotone maps: (where, value).
_DIPS = {"Gelu": [(-0.7517916, -0.1699702)], "HardSwish": [(-1.5, -0.375)]}


def _f(fn, x: float) -> float:
    """fn at x (float64); at an infinite x where fn gives NaN, its value at +-1e300."""
    y = float(fn(torch.tensor(x, dtype=torch.float64)))
    if math.isnan(y) and math.isinf(x):
        y = float(fn(torch.tensor(math.copysign(1e300, x), dtype=torch.float64)))
    return y


def _fact(fn, x: float, none: float) -> float:
    """fn applied to a "some element" fact, where `none` (an infinity) means no fact."""
    return x if x == none else _f(fn, x)


# Non-decreasing unary ops with attributes: computed with their own forward.
_RISING_OPS = {"Softplus", "Asinh", "Celu", "Shrink", "ThresholdedRelu"}


def _rising(name: str, a) -> bool:
    """Whether `name` with attributes `a` is a non-decreasing map (ThresholdedRelu only
    for a threshold >= 0: below a negative one it lifts x to 0)."""
    return name in _RISING_OPS and (name != "ThresholdedRelu" or a.alpha >= 0)


def _unary(name: str, r: Range, a) -> Range:
    if name == "Clip":
        fn, trend, dom = (lambda t: torch.clamp(t, a.lo, a.hi)), 1, None
    elif name in _RISING_OPS:
        fn, trend, dom = (lambda t: op_by_name(name).forward(a, t)), 1, None
    else:
        fn, trend, dom = _UNARY[name]
    lo, hi = r.lo, r.hi
    if dom is not None:  # valid executions keep the input inside the domain
        lo, hi = max(lo, dom[0]), min(hi, dom[1])
        if name in ("Log", "Log2") and r.integral:
            lo = max(lo, 1.0)  # a whole number above 0
    # "Some element is <= below" stays true with below cut to [lo, hi] (every element is in
    # it); so for above. Outside the domain fn would give NaN.
    r = replace(
        r,
        below=min(max(r.below, lo), INF if r.below == INF else hi),
        above=max(min(r.above, hi), -INF if r.above == -INF else lo),
    )
    forced = frozenset(_f(fn, c) for c in r.forced)
    integral = name in _INTEGRAL_RESULT or (r.integral and name in {"Relu", "Neg", "Abs", "Sign", "Clip"})
    if integral and name == "Clip":
        integral = float(a.lo).is_integer() and float(a.hi).is_integer()
    if trend == 1:
        below, above = _fact(fn, r.below, INF), _fact(fn, r.above, -INF)
        out = Range(_f(fn, lo), _f(fn, hi), forced, below, above, integral, r.src)
    elif trend == -1:
        below = INF if r.above == -INF else _f(fn, r.above)
        above = -INF if r.below == INF else _f(fn, r.below)
        out = Range(_f(fn, hi), _f(fn, lo), forced, below, above, integral, r.src)
    else:  # Abs, Sin, Cos, Gelu, HardSwish: not monotone, so each fact goes through the image
        bottom, top = _image(name, fn, lo, hi)
        # An element certainly in [lo, below] (or [above, hi]) is certainly in that
        # interval's image: some output element is at most its top, at least its bottom.
        below, above = INF, -INF
        for w_lo, w_hi in ((lo, r.below), (r.above, hi)):
            if w_lo <= w_hi and (w_hi < INF or w_lo > -INF):
                w_bottom, w_top = _image(name, fn, w_lo, w_hi)
                below, above = min(below, w_top), max(above, w_bottom)
        out = Range(bottom, top, forced, below, above, integral, r.src)
    if name == "Clip" and a.hi <= 0:
        out = replace(out, src=f"Clip(hi={a.hi})")
    return out


def _image(name: str, fn, lo: float, hi: float) -> tuple[float, float]:
    """The least and greatest values of a non-monotone unary op over [lo, hi]."""
    if name == "Abs":
        top = max(abs(lo), abs(hi))
        return (lo if lo >= 0 else (-hi if hi <= 0 else 0.0)), top
    if name in ("Sin", "Cos"):
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo >= 2 * math.pi:
            return -1.0, 1.0
        # The extremes are at the ends or where the function is +-1: Sin at pi/2 + k pi,
        # Cos at k pi.
        shift = math.pi / 2 if name == "Sin" else 0.0
        ys = [_f(fn, lo), _f(fn, hi)]
        k = math.ceil((lo - shift) / math.pi)
        while shift + k * math.pi <= hi:
            ys.append(1.0 if k % 2 == 0 else -1.0)
            k += 1
        return max(-1.0, min(ys)), min(1.0, max(ys))
    # Gelu, HardSwish: increasing but for one dip
    ends = [_f(fn, lo), _f(fn, hi)]
    dips = [v for where, v in _DIPS[name] if lo <= where <= hi]
    return min(ends + dips), max(ends)


def _cast(target: DType, r: Range) -> Range:
    if target is DType.bool:
        forced = frozenset(float(c != 0) for c in r.forced)
        return Range(0.0, 1.0, forced, integral=True, src=r.src)
    if target.is_float:
        return r
    base = _dtype_range(target)
    if r.hi >= base.hi + 1 or r.lo <= base.lo - 1:
        # A value beyond the target's range (2**63 passes a float |x| <= 2**63 - 1) wraps
        # to anything: no bound but the dtype's.
        return Range(base.lo, base.hi, integral=True, src=r.src)
    trunc = lambda v: float(math.trunc(v)) if math.isfinite(v) else v  # noqa: E731
    lo, hi = max(trunc(r.lo), base.lo), min(trunc(r.hi), base.hi)
    forced = frozenset(trunc(c) for c in r.forced if base.lo <= c <= base.hi)
    return Range(lo, hi, forced, integral=True, src=r.src)


def _mul_bounds(a: Range, b: Range) -> tuple[float, float]:
    products = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            p = x * y
            if math.isnan(p):  # 0 * inf: unbounded
                return -INF, INF
            products.append(p)
    return min(products), max(products)


# -- ops that move elements without computing ---------------------------------------------

# Every input element appears in the output (reordered, reshaped, repeated).
_KEEP_ALL = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Permute", "Roll", "Flip",
    "Expand", "Tile", "PixelShuffle", "PixelUnshuffle", "SpaceToDepth",
}  # fmt: skip
# Output elements are some of the input elements.
_SUBSET = {"Slice", "IndexSelect", "GatherElements", "Split2", "Split3", "TopK", "Interpolate"}


def _pads(a) -> list[int]:
    return [a[f"{side}{i}"] for i in range(a.k) for side in "lr"]


def _triangle_zeros(name: str, a, shape: tuple[int, ...]) -> bool:
    """Whether Tril/Triu leaves at least one element zeroed."""
    rows, cols = shape[-2], shape[-1]
    if name == "Tril":  # zero where col - row > diagonal
        return cols - 1 > a.diagonal
    return -(rows - 1) < a.diagonal  # Triu: zero where col - row < diagonal


def _triangle_keeps(name: str, a, shape: tuple[int, ...]) -> bool:
    """Whether Tril/Triu keeps at least one element (col - row ranges over [1 - rows, cols - 1])."""
    rows, cols = shape[-2], shape[-1]
    return 1 - rows <= a.diagonal if name == "Tril" else cols - 1 >= a.diagonal


def _all_padding_window(name: str, a) -> bool:
    """Pooling whose output is non-finite even on an all-ones input: some window lies
    wholly in the padding, whatever the values."""
    t = a["in_types"][0]
    ones = torch.ones(t.shape, dtype=t.dtype.torch)
    with torch.no_grad():
        out = op_by_name(name).forward(a, ones)
    return not bool(torch.isfinite(out).all())


def _point(r: Range) -> bool:
    """Every element holds the same, known value."""
    return r.lo == r.hi and math.isfinite(r.lo)


def _zero(r: Range) -> bool:
    return r.lo == r.hi == 0


def _constant(value: float, src: str) -> Range:
    return Range(value, value, frozenset({value}), integral=float(value).is_integer(), src=src)


MAX_FORCED = 8  # distinct values a folded result records as taken
MAX_VALUES = 16  # a value set larger than this is not tracked
MAX_PAIRS = 256  # input combinations a pointwise op on value sets is evaluated on


class _Infeasible(Exception):
    """Raised by a transfer or a refinement that finds no value a valid execution may take."""


def _value_set(r: Range) -> frozenset[float] | None:
    """Every value an element of r may take, when few: r's own set, or the whole numbers
    between bounds at most MAX_VALUES apart, or the one value of a point."""
    if r.values is not None:
        return r.values
    if _point(r):
        return frozenset({r.lo})
    if r.integral and math.isfinite(r.lo) and math.isfinite(r.hi) and r.hi - r.lo < MAX_VALUES:
        return frozenset(float(v) for v in range(math.ceil(r.lo), math.floor(r.hi) + 1))
    return None


def _of_values(values, src: str, forced: frozenset[float] = frozenset()) -> Range:
    """The range of a tensor whose elements are each one of `values` (finite, not empty)."""
    vs = frozenset(values)
    if not vs:
        raise _Infeasible(f"{src}: no value is left")
    lo, hi = min(vs), max(vs)
    integral = all(float(v).is_integer() for v in vs)
    return Range(lo, hi, forced & vs, integral=integral, src=src, values=vs if len(vs) <= MAX_VALUES else None)


# Pointwise ops: each output element is the op of the input elements at its position (after
# broadcasting). On inputs whose value sets are known, the output's set is computed exactly,
# with the op's own forward, on every combination.
_POINTWISE_UNARY = set(_UNARY) | {
    "Clip", "Not", "IsNaN", "IsInf", "Softplus", "Celu", "ThresholdedRelu", "Shrink", "Mish", "Asinh", "BitwiseNot",
}  # fmt: skip
_POINTWISE_NARY = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Greater", "Less", "GreaterEqual", "LessEqual",
    "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Where",
}  # fmt: skip


def _pointwise_values(inst: Inst, a, ins: list[Range]) -> list[Range] | None:
    """The output range of a pointwise op whose inputs' value sets are all known, by
    running it on every combination of input values (the same value twice where one
    input is used twice). Combinations whose result is NaN/Inf are not valid executions
    and drop out; None when the sets are unknown or too many, or the op refuses them."""
    if not (inst.op in _POINTWISE_UNARY or inst.op.startswith("Cast") or inst.op in _POINTWISE_NARY):
        return None
    sets = [_value_set(r) for r in ins]
    if any(vs is None for vs in sets):
        return None
    distinct = list(dict.fromkeys(inst.inputs))
    per_value = {v: sorted(sets[inst.inputs.index(v)]) for v in distinct}
    if math.prod(len(per_value[v]) for v in distinct) > MAX_PAIRS:
        return None
    # One axis per distinct input value: broadcasting then gives every combination.
    k = len(distinct)
    columns = {}
    for j, v in enumerate(distinct):
        shape = [1] * k
        shape[j] = len(per_value[v])
        t = a["in_types"][inst.inputs.index(v)]
        columns[v] = torch.tensor(per_value[v], dtype=torch.float64).to(t.dtype.torch).reshape(shape)
    try:
        with torch.no_grad():
            out = op_by_name(inst.op).forward(a, *(columns[v] for v in inst.inputs))
    except (RuntimeError, IndexError, ValueError, TypeError):
        return None
    if isinstance(out, tuple | list) or out.dim() != k:
        return None
    res = out.detach().double().reshape(-1)
    res = res[torch.isfinite(res)]
    src = next((r.src for r in ins if r.src), "") or inst.op
    if res.numel() == 0:
        raise _Infeasible(f"{inst.op} <- {src}: NaN/Inf on every value its inputs may take")
    found = frozenset(float(c) for c in torch.unique(res))
    if len(found) > MAX_VALUES:
        return [Range(min(found), max(found), integral=all(c.is_integer() for c in found), src=src)]
    return [_of_values(found, src)]


# -- refining a value by what a valid execution needs of it -------------------------------------

# A domain: (lo, hi, lo_open, hi_open, nonzero): every element lies in the interval and, with
# nonzero, is not 0.
Domain = tuple[float, float, bool, bool, bool]
_DOMAINS: dict[str, list[Domain | None]] = {
    "Log": [(0.0, INF, True, False, False)],
    "Log2": [(0.0, INF, True, False, False)],
    "Sqrt": [(0.0, INF, False, False, False)],
    "Asin": [(-1.0, 1.0, False, False, False)],
    "Acos": [(-1.0, 1.0, False, False, False)],
    "Reciprocal": [(-INF, INF, False, False, True)],
    "Div": [None, (-INF, INF, False, False, True)],
}


def _inside(c: float, d: Domain) -> bool:
    lo, hi, lo_open, hi_open, nonzero = d
    return (c > lo if lo_open else c >= lo) and (c < hi if hi_open else c <= hi) and not (nonzero and c == 0)


def _narrow(r: Range, d: Domain, why: str) -> Range:
    """r as far as elements that all lie in domain d allow; _Infeasible when that is nothing
    (a value r certainly takes, or certainly reaches, lies outside)."""
    lo, hi, lo_open, hi_open, nonzero = d
    new_lo, new_hi = max(r.lo, lo), min(r.hi, hi)
    if r.integral:  # whole numbers: an open bound or an excluded 0 moves to the next one
        new_lo = math.ceil(new_lo) if math.isfinite(new_lo) else new_lo
        new_hi = math.floor(new_hi) if math.isfinite(new_hi) else new_hi
        if lo_open and new_lo == lo:
            new_lo += 1
        if hi_open and new_hi == hi:
            new_hi -= 1
        if nonzero and new_lo == 0:
            new_lo = 1
        if nonzero and new_hi == 0:
            new_hi = -1
    values = None if r.values is None else frozenset(c for c in r.values if _inside(c, d))
    bad = (
        new_lo > new_hi
        or (lo_open and new_hi <= lo)
        or (hi_open and new_lo >= hi)
        or values == frozenset()
        or any(not _inside(c, d) for c in r.forced)
        or r.below < new_lo
        or r.above > new_hi
    )
    if bad:
        raise _Infeasible(why)
    if values is not None:
        new_lo, new_hi = max(new_lo, min(values)), min(new_hi, max(values))
    out = replace(r, lo=float(new_lo), hi=float(new_hi), values=values)
    return replace(out, values=_value_set(out))


def _negated(d: Domain) -> Domain:
    lo, hi, lo_open, hi_open, nonzero = d
    return (-hi, -lo, hi_open, lo_open, nonzero)


# Ops whose every input element appears, unchanged, in the output: a domain every output
# element lies in holds for the input too.
_SHOWS_ALL = _KEEP_ALL | {"Identity"}
MAX_PULL = 8  # producers a refinement walks back through


def _pull(
    env: dict[int, Range], producers: dict[int, Inst], graph: GraphIR, v: int, d: Domain, why: str, depth: int = 0
) -> None:
    """Refine value v (and, through ops that keep values exact, what it is made of) to
    domain d, which every valid execution's v lies in."""
    env[v] = _narrow(env[v], d, why)
    inst = producers.get(v)
    if inst is None or depth >= MAX_PULL:
        return
    name, ins = inst.op, inst.inputs
    if name in _SHOWS_ALL or name.startswith("Concat"):
        targets = ins if name.startswith("Concat") else ins[:1]
    elif name in ("PadConstant", "PadReflect", "PadReplicate") and all(p >= 0 for p in _pads(graph.attrs(inst))):
        targets = ins[:1]
    elif name == "Neg":
        _pull(env, producers, graph, ins[0], _negated(d), why, depth + 1)
        return
    elif name == "Relu" and (d[0] > 0 or d[0] == 0 and d[2]):  # positive elements are the input's own
        targets = ins[:1]
    elif name.startswith("Cast") and _exact_cast(graph.types[ins[0]].dtype, graph.types[v].dtype, env[ins[0]]):
        targets = ins[:1]
    else:
        return
    for u in targets:
        _pull(env, producers, graph, u, d, why, depth + 1)


def _exact_cast(src: DType, dst: DType, r: Range) -> bool:
    """Whether casting every value r allows from src to dst keeps it exactly."""
    if src is DType.bool:
        return True
    if src.is_float:
        return dst.is_float and torch.finfo(dst.torch).bits >= torch.finfo(src.torch).bits
    if dst.is_float:  # integers up to 2048 in magnitude are exact in every float (float16: 11 bits)
        return max(abs(r.lo), abs(r.hi)) <= 2048
    if dst is DType.bool:
        return False
    info = torch.iinfo(dst.torch)
    return info.min <= r.lo and r.hi <= info.max


def _fold(inst: Inst, a, ins: list[Range]) -> list[Range] | str | None:
    """Outputs of `inst` on inputs that are each one known value everywhere, computed
    (so exact for every op, whatever its semantics); a reason string when that
    execution has NaN/Inf: then every execution does. None when the op refuses the
    values (an index out of range): no valid execution reaches here, nothing to say."""
    xs = [torch.full(t.shape, r.lo, dtype=t.dtype.torch) for t, r in zip(a["in_types"], ins)]
    try:
        with torch.no_grad():
            out = op_by_name(inst.op).forward(a, *xs)
    except (RuntimeError, IndexError, ValueError):
        return None
    outs = list(out) if isinstance(out, tuple | list) else [out]
    ranges = []
    src = next((r.src for r in ins if r.src), "")
    for t in outs:
        v = t.detach().double().reshape(-1)
        if v.numel() and not bool(torch.isfinite(v).all()):
            return f"{inst.op} <- {src or 'constants'}: NaN/Inf on the only values its inputs take"
        if not v.numel():
            ranges.append(Range(src=src))
            continue
        lo, hi = (float(c) for c in torch.aminmax(v))
        if lo == hi:  # one value everywhere (the common case): no sort needed
            ranges.append(_constant(lo, src))
            continue
        values = torch.unique(v)
        forced = frozenset(float(c) for c in values[:MAX_FORCED])
        integral = bool((v == torch.round(v)).all())
        exact = frozenset(float(c) for c in values) if len(values) <= MAX_VALUES else None
        ranges.append(Range(lo, hi, forced, integral=integral, src=src, values=exact))
    return ranges


def _rounding(dt: DType, n: int) -> float:
    """A relative error bound for an n-term float sum in dt (and a few more roundings)."""
    return (n + 8) * float(torch.finfo(dt.torch).eps) if dt.is_float else 0.0


# -- per-element bounds ("boxes") -----------------------------------------------------------

# Ops monotone (non-decreasing) in every input, element by element: run on the inputs'
# lower bounds they give the output's lower bounds, on the upper bounds its upper bounds.
# Those that only move, pick or zero elements (`_MOVES`) are exact in any dtype.
_MOVES = (_KEEP_ALL | _SUBSET | {
    "Concat2", "Concat3", "Concat4", "PadConstant", "PadReflect", "PadReplicate", "Tril", "Triu", "ReduceMax",
    "ReduceMin", "MaxPool1d", "MaxPool2d", "AdaptiveMaxPool2d", "GlobalMaxPool", "Max", "Min", "Relu", "Floor",
    "Ceil", "Round", "Clip", "Sign",
}) - {"Interpolate", "TopK", "IndexSelect", "GatherElements"}  # fmt: skip
_MONOTONE = _MOVES | {
    "ReduceSum", "ReduceMean", "CumSum", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d", "Interpolate", "Add",
    "LeakyRelu", "Elu", "Selu", "Sigmoid", "Tanh", "Atan", "Erf", "Softsign", "HardSigmoid", "Exp", "Log", "Log2",
    "Sqrt", "Asin",
}  # fmt: skip
_DECREASING = {"Neg": "Neg", "Acos": "Acos"}
# Ops whose output holds elements the same in every execution (padding, a zeroed triangle):
# boxes start there and are followed while they say more than the value's range.
_BOX_SOURCES = {"PadConstant", "Tril", "Triu"}
Box = tuple[torch.Tensor, torch.Tensor]


def _whole(t, r: Range, dt: torch.dtype) -> Box:
    """The box of a value known only by its range. (A bound rounded to dt still bounds
    the values dt holds; one beyond dt's range becomes an infinity.)"""
    lo, hi = (torch.tensor(b, dtype=torch.float64).to(dt).expand(t.shape) for b in (r.lo, r.hi))
    return lo, hi


def _clean(lo: torch.Tensor, hi: torch.Tensor) -> Box:
    """Bounds with NaN (0 * inf, inf - inf) read as no bound."""
    return lo.nan_to_num(nan=-math.inf), hi.nan_to_num(nan=math.inf)


def _box_of(inst: Inst, a, ins: list[Range]) -> list[Box] | None:
    """Per-element bounds of the outputs of `inst`, from its inputs' boxes (or ranges)."""
    name = inst.op
    if name == "Interpolate" and a.mode == "bicubic":
        return None
    types = a["in_types"]
    if not all(t.dtype.is_float for t in types) and not (
        name in _MOVES and all(t.dtype is not DType.bool for t in types)
    ):
        return None
    boxes = []
    for t, r in zip(types, ins):
        # Moves are exact in any dtype: float16's slow CPU kernels (Tril takes
        # milliseconds) run in float32, integers in float64 (exact below 2**53).
        if name in _MOVES:
            dt = torch.float32 if t.dtype is DType.float16 else (t.dtype.torch if t.dtype.is_float else torch.float64)
        else:
            dt = t.dtype.torch
        boxes.append(_whole(t, r, dt) if r.box is None else (r.box[0].to(dt), r.box[1].to(dt)))
    fwd = op_by_name(name).forward
    dom = _UNARY.get(name, (None, None, None))[2]
    try:
        with torch.no_grad():
            if name in _MONOTONE or _rising(name, a):
                if dom is not None:  # valid executions keep the input in the domain
                    boxes = [(lo.clamp(dom[0], dom[1]), hi.clamp(dom[0], dom[1])) for lo, hi in boxes]
                los, his = fwd(a, *(lo for lo, _ in boxes)), fwd(a, *(hi for _, hi in boxes))
            elif name in _DECREASING:
                ((lo, hi),) = boxes
                if dom is not None:
                    lo, hi = lo.clamp(dom[0], dom[1]), hi.clamp(dom[0], dom[1])
                los, his = fwd(a, hi), fwd(a, lo)
            elif name == "Abs":
                ((lo, hi),) = boxes
                los = torch.where(lo >= 0, lo, torch.where(hi <= 0, -hi, torch.zeros_like(lo)))
                his = torch.maximum(lo.abs(), hi.abs())
            elif name == "Sub":
                (p_lo, p_hi), (q_lo, q_hi) = boxes
                los, his = fwd(a, p_lo, q_hi), fwd(a, p_hi, q_lo)
            elif name in ("Mul", "PReLU"):
                # Bilinear in its two inputs (PReLU: max(0, x) + w * min(0, x)): its extremes
                # over a box are at the corners.
                (x_lo, x_hi), (w_lo, w_hi) = boxes
                if name == "PReLU":
                    base = (torch.relu(x_lo), torch.relu(x_hi))
                    x_lo, x_hi = x_lo.clamp(max=0), x_hi.clamp(max=0)
                corners = [fwd(a, x, w) for x in (x_lo, x_hi) for w in (w_lo, w_hi)]
                corners = [c.nan_to_num(nan=math.nan) for c in corners]
                los = torch.stack(torch.broadcast_tensors(*corners)).amin(0)
                his = torch.stack(torch.broadcast_tensors(*corners)).amax(0)
                if any(bool(c.isnan().any()) for c in corners):  # 0 * inf: no bound there
                    nan = torch.stack(torch.broadcast_tensors(*[c.isnan() for c in corners])).any(0)
                    los, his = los.masked_fill(nan, -math.inf), his.masked_fill(nan, math.inf)
                if name == "PReLU":
                    los, his = los + base[0], his + base[1]
            else:
                return None
    except (RuntimeError, IndexError, ValueError, TypeError):
        return None
    los = list(los) if isinstance(los, tuple | list) else [los]
    his = list(his) if isinstance(his, tuple | list) else [his]
    return [_clean(lo, hi) for lo, hi in zip(los, his)]


def _boxes(inst: Inst, a, ins: list[Range], outs: list[Range]) -> list[Range]:
    """`outs` sharpened by per-element bounds, where some input has a box or the op makes
    one. What a box tells: the output's bounds are the boxes' extremes; some element is at
    most the least upper bound (and at least the greatest lower bound); elements whose two
    bounds meet hold that value in every execution (an Inf there means every execution
    has one)."""
    outs = [replace(r, box=None) if r.box is not None else r for r in outs]  # only the op's own
    if not (inst.op in _BOX_SOURCES or any(r.box is not None for r in ins)):
        return outs
    got = _box_of(inst, a, ins)
    if got is None:
        return outs
    src = next((x.src for x in ins if x.src), "") or inst.op
    boxed = []
    for r, (lo, hi), t in zip(outs, got, a["out_types"]):
        known = lo == hi
        lo_min, lo_max = (float(c) for c in torch.aminmax(lo))
        hi_min, hi_max = (float(c) for c in torch.aminmax(hi))
        if lo_max == math.inf or hi_min == -math.inf:
            raise _Infeasible(f"{inst.op} <- {src}: Inf in every execution")
        if bool(known.all()):  # every element known: the values there are
            taken = torch.unique(lo.double())
            boxed.append(_of_values([float(c) for c in taken], r.src or src) if len(taken) <= MAX_VALUES else r)
            continue
        if lo_min == lo_max and hi_min == hi_max and lo_min < hi_min:  # the same bounds everywhere: no box
            boxed.append(replace(r, lo=max(r.lo, lo_min), hi=min(r.hi, hi_max)))
            continue
        forced = r.forced
        if bool(known.any()):
            k_lo, k_hi = (float(c) for c in torch.aminmax(lo[known]))
            forced = forced | {k_lo, k_hi}
        if t.dtype.is_float or t.dtype is DType.bool:
            store = (lo, hi)
        else:  # bounds of integers are whole numbers: kept in float64
            store = (lo.double(), hi.double())
        boxed.append(
            replace(
                r,
                lo=max(r.lo, lo_min),
                hi=min(r.hi, hi_max),
                forced=forced,
                below=min(r.below, hi_min),
                above=max(r.above, lo_max),
                box=store,
                src=r.src or src,
            )
        )
    return boxed


def _summands(name: str, a) -> int:
    """How many input elements the longest sum of a CumSum or ReduceSum adds up."""
    shape = a["in_types"][0].shape
    if name == "CumSum":
        return shape[a.axis] if shape else 1
    axes = range(len(shape)) if a.axes is None else a.axes
    return math.prod(shape[i] for i in axes)


def _sum(x: Range, n: int, dt: DType) -> Range:
    """Sums of up to n elements of x (float: rounding may move a sum of n terms by n * eps
    of itself, which the bounds allow for). The longest sums certainly reach n * lo when
    every term is positive (n * hi when every term is negative)."""
    if n == 0:
        return Range(0.0, 0.0, frozenset({0.0}), src=x.src)
    slack = n * float(torch.finfo(dt.torch).eps)
    grow, shrink = 1 + slack, max(0.0, 1 - slack)
    lo = x.lo if x.lo >= 0 else n * x.lo * grow
    hi = x.hi if x.hi <= 0 else n * x.hi * grow
    above = n * x.lo * shrink if x.lo > 0 else -INF
    below = n * x.hi * shrink if x.hi < 0 else INF
    return Range(lo, hi, above=above, below=below, src=x.src)


def _transfer(inst: Inst, a, ins: list[Range], out_types) -> list[Range]:
    """Ranges of the outputs of one (valid) execution of `inst`."""
    name, spec = inst.op, op_by_name(inst.op)
    tops = [_dtype_range(t.dtype) for t in out_types]
    x = ins[0] if ins else Range()
    exact = _pointwise_values(inst, a, ins)
    if exact is not None:
        return exact
    # A zero factor wins over any (finite) other operand.
    if name in ("Mul", "MatMul") and any(_zero(r) for r in ins) or name in ("Div", "PReLU") and _zero(x):
        src = next(r.src for r in ins if _zero(r))
        return [_constant(0.0, src or f"{name} of 0")]
    if name in _UNARY or name == "Clip" or _rising(name, a):
        if name in ("Neg", "Abs") and not out_types[0].dtype.is_float and x.lo <= tops[0].lo:
            return tops  # the most negative integer has no negation: it wraps to itself
        return [_unary(name, x, a)]
    if name.startswith("Cast"):
        return [_cast(spec.target, x)]
    if name in _KEEP_ALL:
        return [x for _ in out_types]
    if name == "Interpolate" and a.mode == "bicubic":
        return tops  # cubic interpolation overshoots its samples
    if name == "Interpolate" and a.mode != "nearest":  # weighted means of neighbours
        return [Range(x.lo, x.hi, src=x.src)]
    if name in _SUBSET:
        kept = Range(x.lo, x.hi, integral=x.integral, src=x.src, values=x.values)
        if name == "TopK":
            return [kept, tops[1]]
        return [kept for _ in out_types]
    if name == "Concat" or name.startswith("Concat"):
        h = _hull(ins)
        return [
            replace(
                h,
                forced=frozenset().union(*(r.forced for r in ins)),
                below=min(r.below for r in ins),
                above=max(r.above for r in ins),
                src=next((r.src for r in ins if r.src), ""),
                values=_union(ins),
            )
        ]
    if name in ("PadConstant", "PadReflect", "PadReplicate"):
        pads = _pads(a)
        keeps = all(p >= 0 for p in pads)
        out = x if keeps else Range(x.lo, x.hi, integral=x.integral, src=x.src, values=x.values)
        if name == "PadConstant" and any(p > 0 for p in pads):
            c = float(torch.tensor(a.value, dtype=out_types[0].dtype.torch).double())  # as the dtype holds it
            out = Range(
                min(out.lo, c),
                max(out.hi, c),
                out.forced | {c},
                out.below,
                out.above,
                out.integral and c.is_integer(),
                f"PadConstant(value={a.value})",
                _union([out, _constant(c, "")]),
            )
        return [out]
    if name in ("Tril", "Triu"):
        shape = tuple(a["in_types"][0].shape)
        if not _triangle_zeros(name, a, shape):
            return [x]
        if not _triangle_keeps(name, a, shape):
            return [_constant(0.0, f"{name}(diagonal={a.diagonal}) zeroing everything")]
        zeros = _union([x, _constant(0.0, "")])
        return [Range(min(x.lo, 0.0), max(x.hi, 0.0), frozenset({0.0}), integral=x.integral, src=name, values=zeros)]
    if name in ("Softmax", "LogSoftmax"):
        n = a["in_types"][0].shape[a.dim]
        if n == 1:
            c = 1.0 if name == "Softmax" else 0.0
            return [_constant(c, f"{name} over a size-1 dim")]
        # The entries of each slice average 1/n: some entry is at most 1/n, some at least
        # 1/n (less the rounding of an n-term sum), and so for their logs.
        slack = _rounding(out_types[0].dtype, n)
        # Inputs within a spread d of each other: every entry is at least 1 / (1 + (n - 1) e^d)
        # (a Softmax of Ceil(Acos(x)), spread 4, never underflows to 0).
        spread = x.hi - x.lo
        least = 1 / (1 + (n - 1) * math.exp(spread)) * (1 - slack) if spread < 600 else 0.0
        if name == "Softmax":
            return [Range(least, 1.0, below=1.0 / n, above=(1.0 / n) * (1 - slack), src="Softmax")]
        floor = math.log(least) - 2 * slack if least > 0 else -INF
        return [Range(floor, 0.0, below=-math.log(n), above=-math.log(n) - 2 * slack, src="LogSoftmax")]
    if len(inst.inputs) == 2 and inst.inputs[0] == inst.inputs[1]:  # an op on one value twice
        same = {"Sub": 0.0, "Xor": 0.0, "Greater": 0.0, "Less": 0.0, "Equal": 1.0}
        if name in same:
            c = same[name]
            return [_constant(c, f"{name}(x, x)")]
    if name in ("Add", "Sub", "Mul", "Max", "Min"):
        p, q = ins
        integral = p.integral and q.integral
        if name == "Add":
            lo, hi = p.lo + q.lo, p.hi + q.hi
        elif name == "Sub":
            lo, hi = p.lo - q.hi, p.hi - q.lo
        elif name == "Mul":
            lo, hi = _mul_bounds(p, q)
        elif name == "Max":
            lo, hi = max(p.lo, q.lo), max(p.hi, q.hi)
        else:
            lo, hi = min(p.lo, q.lo), min(p.hi, q.hi)
        lo, hi = (-INF if math.isnan(lo) else lo), (INF if math.isnan(hi) else hi)
        forced: frozenset[float] = frozenset()
        src = ""
        if name == "Mul" and (0.0 in p.forced or 0.0 in q.forced):
            forced, src = frozenset({0.0}), (p.src if 0.0 in p.forced else q.src)
        if not out_types[0].dtype.is_float and (lo < tops[0].lo or hi > tops[0].hi):
            return tops  # integers wrap around: 0 - 1 is 255 in uint8
        return [Range(lo, hi, forced, integral=integral, src=src)]
    if name == "Where":
        return [replace(_hull(ins[1:]), values=_union(ins[1:]))]
    if name == "Reciprocal" and (x.lo >= 0 or x.hi <= 0):  # 1/x falls on each side of 0 (never 0)
        if x.lo >= 0:
            return [Range(0.0 if x.hi == INF else 1 / x.hi, INF if x.lo == 0 else 1 / x.lo, src=x.src)]
        return [Range(-INF if x.hi == 0 else 1 / x.hi, 0.0 if x.lo == -INF else 1 / x.lo, src=x.src)]
    if name == "Div" and 0.0 in x.forced:  # 0 / y = 0 for every valid divisor
        return [Range(forced=frozenset({0.0}), src=x.src)]
    if name == "ScatterValue" and math.prod(a["in_types"][1].shape) > 0:  # some position takes the value
        dt = out_types[0].dtype  # the value as the op writes it into this dtype
        value = a.value if dt.is_float else int(a.value != 0) if dt is DType.bool else int(a.value)
        c = float(torch.tensor(value).to(dt.torch).double())
        integral = x.integral and c.is_integer()
        src = f"ScatterValue(value={a.value})"
        return [
            Range(
                min(x.lo, c),
                max(x.hi, c),
                frozenset({c}),
                integral=integral,
                src=src,
                values=_union([x, _constant(c, "")]),
            )
        ]
    if name == "ReduceLogSumExp":  # max <= log(sum(exp)) <= max + log(n); and >= mean + log(n)
        n = _summands("ReduceSum", a)
        lo, hi = x.lo + math.log(n), x.hi + math.log(n)
        lo, hi = lo - 1e-3 * (1 + abs(lo)), hi + 1e-3 * (1 + abs(hi))  # rounding
        return [Range(lo if math.isfinite(lo) else -INF, hi if math.isfinite(hi) else INF, src=x.src)]
    if name in ("IsNaN", "IsInf"):  # a valid execution's inputs are finite
        return [_constant(0.0, f"{name} of finite values")]
    if name in ("ReduceL1", "ReduceL2", "ReduceSumSquare") and out_types[0].dtype.is_float:
        return [Range(0.0, INF, src=x.src)]  # norms and sums of squares
    if name in ("ReduceMax", "ReduceMin", "MaxPool1d", "MaxPool2d", "AdaptiveMaxPool2d", "GlobalMaxPool"):
        # Each output is one of its window's elements (a window wholly in the padding
        # would give -inf: not a valid execution).
        return [Range(x.lo, x.hi, integral=x.integral, src=x.src, values=x.values)]
    if name in ("CumSum", "ReduceSum") and out_types[0].dtype.is_float:
        out = _sum(x, _summands(name, a), out_types[0].dtype)
        if name == "ReduceSum":  # every output is a whole sum
            out = replace(out, lo=max(out.lo, out.above), hi=min(out.hi, out.below))
        return [out]
    if name == "ReduceMean":
        return [Range(x.lo, x.hi, src=x.src)]
    if name == "PReLU":  # x where x >= 0, w * x elsewhere: 0 stays 0, the sign stays
        forced = frozenset({0.0}) & x.forced
        if x.lo >= 0:
            return [replace(x, box=None)]
        return [Range(-INF if x.lo < 0 else 0.0, max(x.hi, 0.0), forced, src=x.src if forced else "")]
    if name in ("ArgMax", "ArgMin"):
        t = a["in_types"][0]
        n = math.prod(t.shape) if a.axis is None else t.shape[a.axis]
        return [Range(0.0, float(n - 1), integral=True)]
    if name in ("Equal", "Greater", "Less", "And", "Or", "Xor", "Not"):
        return [Range(0.0, 1.0, integral=True)]
    return tops


def _violation(name: str, a, ins: list[Range], producer: Callable[[int], str]) -> str | None:
    """Why `name` is invalid on every input these ranges allow, or None. The reason
    reads "Op <- origin: what", the origin being the op the decisive fact came from
    (or, for plain bounds, `producer(i)`: the ops producing input i, named only then)."""
    x = ins[0] if ins else Range()
    slack = _SLACKS.get(a["in_types"][0].dtype, SLACK) if ins else SLACK

    def why(r: Range, what: str) -> str:
        i = ins.index(r)
        return f"{name} <- {r.src or producer(i)}: {what}"

    if name in ("Log", "Log2") and x.certainly_le(0.0):
        return why(x, "input never all positive")
    if name == "Sqrt" and x.certainly_le(-slack) or name == "Sqrt" and any(c < 0 for c in x.forced):
        return why(x, "input never all non-negative")
    if name == "Reciprocal" and (0.0 in x.forced or x.lo == x.hi == 0):
        return why(x, "input always holds a 0")
    if name == "Div" and (0.0 in ins[1].forced or ins[1].lo == ins[1].hi == 0):
        return why(ins[1], "divisor always holds a 0")
    if name in ("Asin", "Acos") and (x.certainly_le(-1 - slack) or x.certainly_ge(1 + slack)):
        return why(x, "input never all within [-1, 1]")
    if name == "Pow" and x.certainly_le(-slack) and not ins[1].integral:
        return why(x, "base never all positive (valid only where the exponent is a whole number)")
    return None


# -- graphs valid only at an exact value -------------------------------------------------------

# Unary ops that are one-to-one on the reals and flat nowhere in floats near the value: the
# one input giving a value is isolated. (Not Tanh, Sigmoid, Erf: they reach their limits
# exactly on half-lines; not Exp at 0, reached by underflow.) value -> the one input.
_INVERSE: dict[str, Callable[[float], float | None]] = {
    "Exp": lambda b: math.log(b) if 1e-30 < b < 1e30 else None,
    "Log": lambda b: math.exp(b) if abs(b) < 60 else None,
    "Log2": lambda b: 2.0**b if abs(b) < 60 else None,
    "Sqrt": lambda b: b * b if b >= 0 else None,
    "Neg": lambda b: -b,
    "Atan": lambda b: math.tan(b) if abs(b) < 1.5 else None,
    "Asin": lambda b: math.sin(b) if abs(b) <= math.pi / 2 else None,
    "Acos": lambda b: math.cos(b) if 0 <= b <= math.pi else None,
    "Softsign": lambda b: b / (1 - abs(b)) if abs(b) < 0.99 else None,
    "Reciprocal": lambda b: 1 / b if b != 0 else None,
}


def _only_at(name: str, r: Range) -> float | None:
    """The one value every element of a valid input must hold, where input range r meets
    the op's closed domain at one end only (Acos of a value >= 1 needs it to be 1)."""
    if name in ("Asin", "Acos"):
        return 1.0 if r.lo >= 1 else (-1.0 if r.hi <= -1 else None)
    if name == "Sqrt" and r.hi <= 0:
        return 0.0
    return None


def _isolated(graph: GraphIR, producers: dict[int, Inst], v: int, b: float, depth: int = 0) -> tuple[int, float] | None:
    """A float leaf, and the value it must hold, for v to be b in some element: found
    through ops that keep a value isolated (one-to-one unary ops, and ops that move
    elements unchanged). None where some op on the way takes b on a whole interval
    (Relu, Floor, a saturated Tanh, an integer cast) or the way is not followed."""
    if v in graph.inputs or v in graph.weights:
        return (v, b) if graph.types[v].dtype.is_float else None
    inst = producers.get(v)
    if inst is None or depth >= MAX_PULL:
        return None
    name = inst.op
    if name in _SHOWS_ALL:
        return _isolated(graph, producers, inst.inputs[0], b, depth + 1)
    if name in _INVERSE:
        c = _INVERSE[name](b)
        return None if c is None else _isolated(graph, producers, inst.inputs[0], c, depth + 1)
    return None


def _exact_only(graph: GraphIR, producers: dict[int, Inst], inst: Inst, ins: list[Range]) -> str | None:
    """Why `inst` is valid only where a float leaf holds one exact value (up to rounding:
    Acos(Exp(Sqrt(x))) needs x = 0, or below 4e-15 in float32), or None. Not a proof
    that no values exist: values that exact are a set no search aims for, and the
    generator drops such graphs like those proven to have none."""
    if not ins:
        return None
    b = _only_at(inst.op, ins[0])
    found = None if b is None else _isolated(graph, producers, inst.inputs[0], b)
    if found is None:
        return None
    leaf, c = found
    kind = "input" if leaf in graph.inputs else "weight"
    return f"{inst.op} <- {_producers(graph, inst.inputs[0])}: valid only where {kind} v{leaf} is exactly {c:g}"


def _keeps_even(inst: Inst) -> bool:
    """Whether the op, on inputs whose elements are each all equal, makes equal elements."""
    name = inst.op
    return (
        name in _KEEP_ALL
        or name in _SUBSET
        or name in _POINTWISE_UNARY
        or name in _POINTWISE_NARY
        or name.startswith("Cast")
        or name in ("ReduceMax", "ReduceMin", "ReduceMean")
    )  # not Concat: its parts may differ


# Ops each of whose output elements is one of the input's elements.
_PICKS = (
    _KEEP_ALL | _SUBSET | {"ReduceMax", "ReduceMin", "MaxPool1d", "MaxPool2d", "AdaptiveMaxPool2d", "GlobalMaxPool"}
)


class _Order:
    """Which values lie wholly above which: `ge[u]` holds each w with every element of u
    >= every element of w (u the maximum of all of w, w the minimum of all of u, or values
    each of whose elements is one of such a value's)."""

    def __init__(self) -> None:
        self.ge: dict[int, set[int]] = {}

    def holds(self, u: int, w: int, depth: int = 4) -> bool:
        """Every element of u >= every element of w (transitively)."""
        direct = self.ge.get(u, set())
        return w in direct or depth > 0 and any(self.holds(z, w, depth - 1) for z in direct)

    def track(self, inst: Inst, a) -> None:
        if not inst.inputs:
            return
        x, name = inst.inputs[0], inst.op
        if name in ("ReduceMax", "ReduceMin") and math.prod(a["out_types"][0].shape) == 1:
            m = inst.outputs[0]
            if name == "ReduceMax":  # the maximum of every element is above each of them
                self.ge.setdefault(m, set()).add(x)
            else:  # and the minimum below
                self.ge.setdefault(x, set()).add(m)
        if name in _PICKS:  # each output element is one of x's: above what x is above
            for v in inst.outputs:
                if x in self.ge:
                    self.ge.setdefault(v, set()).update(self.ge[x])
                # ... and below what is above x
                for ws in self.ge.values():
                    if x in ws:
                        ws.add(v)

    def decide(self, inst: Inst, out: Range) -> Range:
        """`out` of a comparison or difference of two values the order relates."""
        if len(inst.inputs) != 2:
            return out
        p, q = inst.inputs
        ge, le = self.holds(p, q), self.holds(q, p)
        if not (ge or le):
            return out
        name = inst.op
        if name == "Sub":  # p - q keeps the sign of the order (exactly so in floats)
            return replace(out, lo=max(out.lo, 0.0)) if ge else replace(out, hi=min(out.hi, 0.0))
        decided = {"Less": (ge, 0.0), "GreaterEqual": (ge, 1.0), "Greater": (le, 0.0), "LessEqual": (le, 1.0)}
        if name in decided and decided[name][0]:
            return _constant(decided[name][1], f"{name} of a value and its extreme")
        return out


def analyze(graph: GraphIR) -> tuple[str | None, dict[int, Range]]:
    """Ranges of the values up to the first op proven invalid, and why it is (or None).

    Two passes: what the first learns of a value from a later op's domain (Log(x) makes
    x positive, so its Floor is >= 1) holds in every valid execution, so the second
    applies it where the value is made, before the ops between read it (a Log of x
    read before an Acos of x that needs x <= 1 sees x = 1)."""
    reason, env, learned = _pass(graph, {})
    if reason is None and learned:
        reason, env, _ = _pass(graph, learned)
    return reason, env


def _meet(r: Range, known: Range, why: str) -> Range:
    """r where every element also lies within what `known` says of it."""
    out = _narrow(r, (known.lo, known.hi, False, False, False), why)
    if known.values is not None:
        mine = out.values if out.values is not None else _value_set(out)
        values = known.values if mine is None else mine & known.values
        out = _narrow(replace(out, values=values), (known.lo, known.hi, False, False, False), why)
    return replace(out, integral=out.integral or known.integral)


def _pass(graph: GraphIR, hints: dict[int, Range]) -> tuple[str | None, dict[int, Range], dict[int, Range]]:
    """One pass of the analysis, each value met with its hint; also returns the values a
    domain refined after they were made (the next pass's hints)."""
    env: dict[int, Range] = {v: _dtype_range(graph.types[v].dtype) for v in (*graph.inputs, *graph.weights)}
    for v in env:
        if v in hints:
            env[v] = hints[v]
    made = dict(env)
    producers = {v: inst for inst in graph.insts for v in inst.outputs}
    order = _Order()
    # Values whose elements are all equal (one element, or made from such by ops that
    # keep that): ArgMax and ArgMin of them pick index 0 (the first of equal values).
    even = {v for v, t in enumerate(graph.types) if math.prod(t.shape) == 1}
    for inst in graph.insts:
        a = graph.attrs(inst)
        ins = [env[v] for v in inst.inputs]
        if ins and all(_point(r) for r in ins):
            folded = _fold(inst, a, ins)
            if isinstance(folded, str):
                return folded, env, {}
            if folded is not None:
                env.update(zip(inst.outputs, folded))
                made.update(zip(inst.outputs, folded))
                continue
        try:
            if op_by_name(inst.op).vulnerable:
                reason = _violation(inst.op, a, ins, lambda i, vs=inst.inputs: _producers(graph, vs[i]))
                reason = reason or _exact_only(graph, producers, inst, ins)
                if reason is not None:
                    return reason, env, {}
                # Every valid execution has this op's inputs in its domain: so do the values
                # they are made of exactly (a Concat's parts, a Reshape's input, ...), which
                # later ops may read.
                for i, d in enumerate(_DOMAINS.get(inst.op, [])):
                    if d is not None:
                        src = ins[i].src or _producers(graph, inst.inputs[i])
                        why = f"{inst.op} <- {src}: no value its input may take lies in its domain"
                        _pull(env, producers, graph, inst.inputs[i], d, why)
                ins = [env[v] for v in inst.inputs]
            if inst.op in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d") and _all_padding_window(inst.op, a):
                return f"{inst.op}: a window lies wholly in the padding", env, {}
            if inst.op in ("ArgMax", "ArgMin") and inst.inputs[0] in even:
                outs = [_constant(0.0, f"{inst.op} of equal values")]
            else:
                outs = _boxes(inst, a, ins, _transfer(inst, a, ins, [graph.types[v] for v in inst.outputs]))
            if inst.inputs and all(v in even for v in inst.inputs) and _keeps_even(inst):
                even.update(inst.outputs)
            outs[:1] = [order.decide(inst, outs[0])] if outs else []
            order.track(inst, a)
            why = f"{inst.op}: what later ops need of its output leaves no value"
            outs = [_meet(r, hints[v], why) if v in hints else r for v, r in zip(inst.outputs, outs)]
        except _Infeasible as e:
            return str(e), env, {}
        env.update(zip(inst.outputs, outs))
        made.update(zip(inst.outputs, outs))
    return None, env, {v: r for v, r in env.items() if r is not made.get(v)}


def _producers(graph: GraphIR, v: int, depth: int = 3) -> str:
    """The chain of ops (first inputs first) that makes value v, e.g. "Floor(Asin(Erf))"."""
    for inst in graph.insts:
        if v in inst.outputs:
            if depth == 1 or not inst.inputs:
                return inst.op
            inner = _producers(graph, inst.inputs[0], depth - 1)
            return f"{inst.op}({inner})" if inner else inst.op
    return ""


def prove_infeasible(graph: GraphIR) -> str | None:
    """Why no NaN/Inf-free values exist for `graph`, or None when that cannot be shown."""
    return analyze(graph)[0]
