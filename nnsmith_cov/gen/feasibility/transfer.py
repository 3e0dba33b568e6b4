"""The per-op transfer (the ranges of an op's outputs from its inputs'), long sums, the
violations that prove an op invalid, and the chain of ops a reason names."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.gen.feasibility.elementwise import UNARY, cast, mul_bounds, per_channel, rising, unary
from nnsmith_cov.gen.feasibility.facts import INF, SLACK, SLACKS, Infeasible, Range, constant, dtype_range, hull, zero
from nnsmith_cov.gen.feasibility.layout import KEEP_ALL, SUBSET, pad_widths, triangle_keeps, triangle_zeros
from nnsmith_cov.gen.feasibility.values import pointwise_values, union
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.ops import op_by_name


def _rounding(dt: DType, n: int) -> float:
    """A relative error bound for an n-term float sum in dt (and a few more roundings)."""
    return (n + 8) * float(torch.finfo(dt.torch).eps) if dt.is_float else 0.0


# Reductions that give back their element exactly (ReduceL1: its magnitude) where they
# reduce one. (ReduceL2's sqrt(x * x) may round away from |x|.)
_OF_ONE = ("ReduceSum", "ReduceMean", "ReduceProd", "CumSum", "ReduceL1")


def _summands(name: str, a) -> int:
    """How many input elements the longest sum (product) of a CumSum or reduction takes."""
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


def _product_of_positives(x: Range, n: int, dt: DType) -> Range:
    """The product of n elements each >= x.lo > 0: at least x.lo ** n (less rounding), so
    beyond dt's range it is Inf in every execution."""
    rounding = _rounding(dt, n)
    log_least = n * math.log(x.lo) + math.log1p(-rounding) if rounding < 1 else -INF
    if log_least > math.log(float(torch.finfo(dt.torch).max)):
        raise Infeasible(f"ReduceProd <- {x.src or 'its input'}: Inf in every execution (each factor >= {x.lo:g})")
    return Range(math.exp(log_least) if log_least > -700 else 0.0, INF, src=x.src)


def _forced_twice(name: str, forced: frozenset[float], dt: DType) -> frozenset[float]:
    """What an elementwise Add, Mul, Max or Min of a value with itself makes of the values
    some element certainly holds, computed in the op's dtype (integers wrap, floats round)."""
    fn = {"Add": torch.add, "Mul": torch.mul, "Max": torch.maximum, "Min": torch.minimum}[name]
    t = torch.tensor(sorted(forced), dtype=torch.float64).to(dt.torch)
    return frozenset(float(c) for c in fn(t, t).double() if math.isfinite(float(c)))


def transfer(inst: Inst, a, ins: list[Range], out_types, twice: bool = False) -> list[Range]:
    """Ranges of the outputs of one (valid) execution of `inst`; `twice`: its two inputs
    hold the same values (one value read twice, or one number everywhere in both)."""
    name, spec = inst.op, op_by_name(inst.op)
    tops = [dtype_range(t.dtype) for t in out_types]
    x = ins[0] if ins else Range()
    exact = pointwise_values(inst, a, ins)
    if exact is not None:
        return exact
    if name in _OF_ONE and _summands(name, a) == 1:  # each output is one element, or its magnitude
        if name == "ReduceL1":  # (Abs of a whole number is one too)
            return [replace(unary("Abs", x, a), integral=x.integral)]
        return [replace(x, box=None)]
    # A zero factor wins over any (finite) other operand (each of an Einsum's terms has one).
    if name in ("Mul", "MatMul", "Einsum") and any(zero(r) for r in ins) or name in ("Div", "PReLU") and zero(x):
        src = next(r.src for r in ins if zero(r))
        return [constant(0.0, src or f"{name} of 0")]
    if name in UNARY or name == "Clip" or rising(name, a):
        if name in ("Neg", "Abs") and not out_types[0].dtype.is_float and x.lo <= tops[0].lo:
            return tops  # the most negative integer has no negation: it wraps to itself
        return [unary(name, x, a)]
    if name == "FakeQuantizePerChannel":
        return [per_channel(x, a)]
    if name.startswith("Cast"):
        return [cast(spec.target, x)]
    if name in KEEP_ALL:
        return [x for _ in out_types]
    if name == "Interpolate" and a.mode == "bicubic":
        return tops  # cubic interpolation overshoots its samples
    if name == "Interpolate" and a.mode != "nearest":  # weighted means of neighbours
        return [Range(x.lo, x.hi, src=x.src)]
    if name in SUBSET:
        kept = Range(x.lo, x.hi, integral=x.integral, src=x.src, values=x.values)
        if name == "TopK":
            # Each slice keeps its k largest (smallest): among them the slice's largest
            # (smallest) element, so whatever some element reaches that way; all of it at k = n.
            every = a.k == a["in_types"][0].shape[a.axis]
            kept = replace(
                kept,
                below=x.below if every or not a.largest else INF,
                above=x.above if every or a.largest else -INF,
            )
            return [kept, tops[1]]
        return [kept for _ in out_types]
    if name == "Concat" or name.startswith("Concat"):
        h = hull(ins)
        return [
            replace(
                h,
                forced=frozenset().union(*(r.forced for r in ins)),
                below=min(r.below for r in ins),
                above=max(r.above for r in ins),
                src=next((r.src for r in ins if r.src), ""),
                values=union(ins),
            )
        ]
    if name in ("PadConstant", "PadReflect", "PadReplicate"):
        pads = pad_widths(a)
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
                union([out, constant(c, "")]),
            )
        return [out]
    if name in ("Tril", "Triu"):
        shape = tuple(a["in_types"][0].shape)
        if not triangle_zeros(name, a, shape):
            return [x]
        if not triangle_keeps(name, a, shape):
            return [constant(0.0, f"{name}(diagonal={a.diagonal}) zeroing everything")]
        zeros = union([x, constant(0.0, "")])
        return [Range(min(x.lo, 0.0), max(x.hi, 0.0), frozenset({0.0}), integral=x.integral, src=name, values=zeros)]
    if name == "ReduceProd" and x.lo > 0 and out_types[0].dtype.is_float:
        return [_product_of_positives(x, math.prod(a["in_types"][0].shape), out_types[0].dtype)]
    if name in ("Softmax", "LogSoftmax"):
        n = a["in_types"][0].shape[a.dim]
        if n == 1:
            c = 1.0 if name == "Softmax" else 0.0
            return [constant(c, f"{name} over a size-1 dim")]
        # The entries of each slice average 1/n: some entry is at most 1/n, some at least
        # 1/n (less the rounding of an n-term sum), and so for their logs.
        slack = _rounding(out_types[0].dtype, n)
        # Inputs within a spread d of each other: every entry is at least 1 / (1 + (n - 1) e^d)
        # (a Softmax of Ceil(Acos(x)), spread 4, never underflows to 0).
        spread = x.hi - x.lo
        least = 1 / (1 + (n - 1) * math.exp(spread)) * (1 - slack) if spread < 600 else 0.0
        # ... and at most 1 / (1 + (n - 1) e^-d): a Softmax of Softmax over 35 entries, spread
        # below 1, has no entry above 0.075.
        most = min(1.0, (1 + slack) / (1 + (n - 1) * math.exp(-spread))) if spread < 600 else 1.0
        if name == "Softmax":
            return [Range(least, most, below=1.0 / n, above=(1.0 / n) * (1 - slack), src="Softmax")]
        floor = math.log(least) - 2 * slack if least > 0 else -INF
        top = min(0.0, math.log(most) + 2 * slack)
        return [Range(floor, top, below=-math.log(n), above=-math.log(n) - 2 * slack, src="LogSoftmax")]
    twice = len(inst.inputs) == 2 and (twice or inst.inputs[0] == inst.inputs[1])  # an op on one value twice
    if twice:
        same = {"Sub": 0.0, "Xor": 0.0, "BitwiseXor": 0.0, "Greater": 0.0, "Less": 0.0, "Equal": 1.0}
        if name in same:
            c = same[name]
            return [constant(c, f"{name}(x, x)")]
    if name in ("Add", "Sub", "Mul", "Max", "Min"):
        p, q = ins
        integral = p.integral and q.integral
        if name == "Add":
            lo, hi = p.lo + q.lo, p.hi + q.hi
        elif name == "Sub":
            lo, hi = p.lo - q.hi, p.hi - q.lo
        elif name == "Mul" and twice:  # a square
            lo = 0.0 if p.lo <= 0 <= p.hi else min(p.lo * p.lo, p.hi * p.hi)
            hi = max(p.lo * p.lo, p.hi * p.hi)
        elif name == "Mul":
            lo, hi = mul_bounds(p, q)
        elif name == "Max":
            lo, hi = max(p.lo, q.lo), max(p.hi, q.hi)
        else:
            lo, hi = min(p.lo, q.lo), min(p.hi, q.hi)
        lo, hi = (-INF if math.isnan(lo) else lo), (INF if math.isnan(hi) else hi)
        forced: frozenset[float] = frozenset()
        src = ""
        if name == "Mul" and (0.0 in p.forced or 0.0 in q.forced):
            forced, src = frozenset({0.0}), (p.src if 0.0 in p.forced else q.src)
        if twice and p.forced:  # each value some element holds meets itself: c + c, c * c, c
            forced, src = forced | _forced_twice(name, p.forced, out_types[0].dtype), p.src
        if not out_types[0].dtype.is_float and (lo < tops[0].lo or hi > tops[0].hi):
            return tops  # integers wrap around: 0 - 1 is 255 in uint8
        return [Range(lo, hi, forced, integral=integral, src=src)]
    if name == "Where":
        return [replace(hull(ins[1:]), values=union(ins[1:]))]
    if name == "Reciprocal" and (x.lo >= 0 or x.hi <= 0):  # 1/x falls on each side of 0 (never 0)
        if x.lo >= 0:
            return [Range(0.0 if x.hi == INF else 1 / x.hi, INF if x.lo == 0 else 1 / x.lo, src=x.src)]
        return [Range(-INF if x.hi == 0 else 1 / x.hi, 0.0 if x.lo == -INF else 1 / x.lo, src=x.src)]
    if name == "Div" and 0.0 in x.forced:  # 0 / y = 0 for every valid divisor
        return [Range(forced=frozenset({0.0}), src=x.src)]
    if name == "ScatterValue" and math.prod(a["in_types"][1].shape) > 0:  # some position takes the value
        c = spec.written(a, out_types[0].dtype)
        integral = x.integral and c.is_integer()
        src = f"ScatterValue(value={a.value})"
        return [
            Range(
                min(x.lo, c),
                max(x.hi, c),
                frozenset({c}),
                integral=integral,
                src=src,
                values=union([x, constant(c, "")]),
            )
        ]
    if name == "ReduceLogSumExp":  # max <= log(sum(exp)) <= max + log(n); and >= mean + log(n)
        n = _summands("ReduceSum", a)
        lo, hi = x.lo + math.log(n), x.hi + math.log(n)
        lo, hi = lo - 1e-3 * (1 + abs(lo)), hi + 1e-3 * (1 + abs(hi))  # rounding
        return [Range(lo if math.isfinite(lo) else -INF, hi if math.isfinite(hi) else INF, src=x.src)]
    if name in ("IsNaN", "IsInf"):  # a valid execution's inputs are finite
        return [constant(0.0, f"{name} of finite values")]
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
        elif math.prod(a["in_types"][0].shape):  # a scan's first sum is one element: in [x.lo, x.hi]
            out = replace(out, below=min(out.below, x.hi), above=max(out.above, x.lo))
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
    if name == "OneHot":  # one 1 per row, 0 elsewhere
        if a.classes == 1:
            return [constant(1.0, "OneHot(classes=1)")]
        return [Range(0.0, 1.0, frozenset({0.0, 1.0}), integral=True, src="OneHot", values=frozenset({0.0, 1.0}))]
    if name in ("Equal", "Greater", "Less", "And", "Or", "Xor", "Not"):
        return [Range(0.0, 1.0, integral=True)]
    return tops


def violation(name: str, a, ins: list[Range], producer: Callable[[int], str]) -> str | None:
    """Why `name` is invalid on every input these ranges allow, or None. The reason
    reads "Op <- origin: what", the origin being the op the decisive fact came from
    (or, for plain bounds, `producer(i)`: the ops producing input i, named only then)."""
    x = ins[0] if ins else Range()
    slack = SLACKS.get(a["in_types"][0].dtype, SLACK) if ins else SLACK

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


def producer_chain(graph: GraphIR, v: int, depth: int = 3) -> str:
    """The chain of ops (first inputs first) that makes value v, e.g. "Floor(Asin(Erf))"."""
    for inst in graph.insts:
        if v in inst.outputs:
            if depth == 1 or not inst.inputs:
                return inst.op
            inner = producer_chain(graph, inst.inputs[0], depth - 1)
            return f"{inst.op}({inner})" if inner else inst.op
    return ""
