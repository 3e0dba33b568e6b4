"""A static proof that a graph has no NaN/Inf-free values at all.

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

    def certainly_le(self, bound: float) -> bool:
        """Some element is certainly <= bound."""
        return self.hi <= bound or self.below <= bound or any(c <= bound for c in self.forced)

    def certainly_ge(self, bound: float) -> bool:
        return self.lo >= bound or self.above >= bound or any(c >= bound for c in self.forced)


def _dtype_range(dt: DType) -> Range:
    if dt is DType.bool:
        return Range(0.0, 1.0, integral=True)
    if dt.is_float:
        return Range()
    info = torch.iinfo(dt.torch)
    return Range(float(info.min), float(info.max), integral=True)


def _hull(rs: list[Range]) -> Range:
    return Range(min(r.lo for r in rs), max(r.hi for r in rs), integral=all(r.integral for r in rs))


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


def _unary(name: str, r: Range, a) -> Range:
    if name == "Clip":
        fn, trend, dom = (lambda t: torch.clamp(t, a.lo, a.hi)), 1, None
    else:
        fn, trend, dom = _UNARY[name]
    lo, hi = r.lo, r.hi
    if dom is not None:  # valid executions keep the input inside the domain
        lo, hi = max(lo, dom[0]), min(hi, dom[1])
        if name in ("Log", "Log2") and r.integral:
            lo = max(lo, 1.0)  # a whole number above 0
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
    elif name == "Abs":
        top = max(abs(lo), abs(hi))
        bottom = lo if lo >= 0 else (-hi if hi <= 0 else 0.0)
        out = Range(bottom, top, forced, integral=integral, src=r.src)
    elif name in ("Sin", "Cos"):
        out = Range(-1.0, 1.0, forced, src=r.src)
    else:  # Gelu, HardSwish: increasing but for one dip
        ends = [_f(fn, lo), _f(fn, hi)]
        dips = [v for where, v in _DIPS[name] if lo <= where <= hi]
        out = Range(min(ends + dips), max(ends), forced, src=r.src)
    if name == "Clip" and a.hi <= 0:
        out = replace(out, src=f"Clip(hi={a.hi})")
    return out


def _cast(target: DType, r: Range) -> Range:
    if target is DType.bool:
        forced = frozenset(float(c != 0) for c in r.forced)
        return Range(0.0, 1.0, forced, integral=True, src=r.src)
    if target.is_float:
        return r
    base = _dtype_range(target)
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
    "Expand", "Tile", "PixelShuffle", "PixelUnshuffle",
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
        values = torch.unique(v)
        forced = frozenset(float(c) for c in values[:MAX_FORCED])
        integral = bool((v == torch.round(v)).all())
        ranges.append(Range(float(values[0]), float(values[-1]), forced, integral=integral, src=src))
    return ranges


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
    # A zero factor wins over any (finite) other operand.
    if name in ("Mul", "MatMul") and any(_zero(r) for r in ins) or name in ("Div", "PReLU") and _zero(x):
        src = next(r.src for r in ins if _zero(r))
        return [_constant(0.0, src or f"{name} of 0")]
    if name in _UNARY or name == "Clip":
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
        kept = Range(x.lo, x.hi, integral=x.integral, src=x.src)
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
            )
        ]
    if name in ("PadConstant", "PadReflect", "PadReplicate"):
        pads = _pads(a)
        keeps = all(p >= 0 for p in pads)
        out = x if keeps else Range(x.lo, x.hi, integral=x.integral, src=x.src)
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
            )
        return [out]
    if name in ("Tril", "Triu"):
        shape = tuple(a["in_types"][0].shape)
        if not _triangle_zeros(name, a, shape):
            return [x]
        return [Range(min(x.lo, 0.0), max(x.hi, 0.0), frozenset({0.0}), integral=x.integral, src=name)]
    if name in ("Softmax", "LogSoftmax"):
        n = a["in_types"][0].shape[a.dim]
        if n == 1:
            c = 1.0 if name == "Softmax" else 0.0
            return [_constant(c, f"{name} over a size-1 dim")]
        if name == "Softmax":  # some entry of each slice is at most 1/n
            return [Range(0.0, 1.0, below=1.0 / n, src="Softmax")]
        # Some entry of each slice is at most log(1/n).
        return [Range(-INF, 0.0, below=-math.log(n), src="LogSoftmax")]
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
        return [Range(lo, hi, forced, integral=integral, src=src)]
    if name == "Where":
        return [_hull(ins[1:])]
    if name in ("ReduceMax", "ReduceMin"):
        return [Range(x.lo, x.hi, integral=x.integral, src=x.src)]
    if name in ("CumSum", "ReduceSum") and out_types[0].dtype.is_float:
        out = _sum(x, _summands(name, a), out_types[0].dtype)
        if name == "ReduceSum":  # every output is a whole sum
            out = replace(out, lo=max(out.lo, out.above), hi=min(out.hi, out.below))
        return [out]
    if name == "ReduceMean":
        return [Range(x.lo, x.hi, src=x.src)]
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

    def why(r: Range, what: str) -> str:
        i = ins.index(r)
        return f"{name} <- {r.src or producer(i)}: {what}"

    if name in ("Log", "Log2") and x.certainly_le(0.0):
        return why(x, "input never all positive")
    if name == "Sqrt" and x.certainly_le(-SLACK) or name == "Sqrt" and any(c < 0 for c in x.forced):
        return why(x, "input never all non-negative")
    if name == "Reciprocal" and (0.0 in x.forced or x.lo == x.hi == 0):
        return why(x, "input always holds a 0")
    if name == "Div" and (0.0 in ins[1].forced or ins[1].lo == ins[1].hi == 0):
        return why(ins[1], "divisor always holds a 0")
    if name in ("Asin", "Acos") and (x.certainly_le(-1 - SLACK) or x.certainly_ge(1 + SLACK)):
        return why(x, "input never all within [-1, 1]")
    if name == "Pow" and x.certainly_le(-SLACK) and not ins[1].integral:
        return why(x, "base never all positive (valid only where the exponent is a whole number)")
    return None


def analyze(graph: GraphIR) -> tuple[str | None, dict[int, Range]]:
    """Ranges of the values up to the first op proven invalid, and why it is (or None)."""
    env: dict[int, Range] = {v: _dtype_range(graph.types[v].dtype) for v in (*graph.inputs, *graph.weights)}
    for inst in graph.insts:
        a = graph.attrs(inst)
        ins = [env[v] for v in inst.inputs]
        if ins and all(_point(r) for r in ins):
            folded = _fold(inst, a, ins)
            if isinstance(folded, str):
                return folded, env
            if folded is not None:
                env.update(zip(inst.outputs, folded))
                continue
        if op_by_name(inst.op).vulnerable:
            reason = _violation(inst.op, a, ins, lambda i, vs=inst.inputs: _producers(graph, vs[i]))
            if reason is not None:
                return reason, env
        if inst.op in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d") and _all_padding_window(inst.op, a):
            return f"{inst.op}: a window lies wholly in the padding", env
        outs = _transfer(inst, a, ins, [graph.types[v] for v in inst.outputs])
        env.update(zip(inst.outputs, outs))
    return None, env


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
