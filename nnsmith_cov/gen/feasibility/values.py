"""Value sets (every element is one of a few values), pointwise ops evaluated exactly on
them, and the folding of ops whose inputs are each one known value."""

from __future__ import annotations

import math

import torch

from nnsmith_cov.gen.feasibility.facts import Infeasible, Range, constant, point, stored
from nnsmith_cov.gen.graph_ir import Inst
from nnsmith_cov.ops import ALL_OPS, op_by_name

MAX_FORCED = 8  # distinct values a folded result records as taken
MAX_VALUES = 16  # a value set larger than this is not tracked
MAX_PAIRS = 256  # input combinations a pointwise op on value sets is evaluated on


def value_set(r: Range) -> frozenset[float] | None:
    """Every value an element of r may take, when few: r's own set, or the whole numbers
    between bounds at most MAX_VALUES apart, or the one value of a point."""
    if r.values is not None:
        return r.values
    if point(r):
        return frozenset({r.lo})
    if r.integral and math.isfinite(r.lo) and math.isfinite(r.hi) and r.hi - r.lo < MAX_VALUES:
        return frozenset(float(v) for v in range(math.ceil(r.lo), math.floor(r.hi) + 1))
    return None


def of_values(values, src: str, forced: frozenset[float] = frozenset()) -> Range:
    """The range of a tensor whose elements are each one of `values` (finite, not empty)."""
    vs = frozenset(values)
    if not vs:
        raise Infeasible(f"{src}: no value is left")
    lo, hi = min(vs), max(vs)
    integral = all(float(v).is_integer() for v in vs)
    return Range(lo, hi, forced & vs, integral=integral, src=src, values=vs if len(vs) <= MAX_VALUES else None)


def union(rs: list[Range]) -> frozenset[float] | None:
    """The values elements of any of rs may take, when each one's set is known and few."""
    sets = [value_set(r) for r in rs]
    if any(vs is None for vs in sets):
        return None
    out = frozenset().union(*sets)
    return out if len(out) <= MAX_VALUES else None


# Pointwise ops (the specs' `pointwise`): on inputs whose value sets are known, the output's
# set is computed exactly, with the op's own forward, on every combination.
POINTWISE = frozenset(op.name() for op in ALL_OPS if op.pointwise)


def pointwise_values(inst: Inst, a, ins: list[Range]) -> list[Range] | None:
    """The output range of a pointwise op whose inputs' value sets are all known, by
    running it on every combination of input values (the same value twice where one
    input is used twice). Combinations whose result is NaN/Inf are not valid executions
    and drop out; None when the sets are unknown or too many, or the op refuses them."""
    if inst.op not in POINTWISE:
        return None
    sets = [value_set(r) for r in ins]
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
    src = next((r.src for r in ins if r.src), "") or inst.op
    # A value some element certainly takes gives its image, certainly taken too (one
    # input: the results lie along its value list); a NaN/Inf image is in every execution.
    forced = set()
    if k == 1:
        for x, y in zip(per_value[distinct[0]], res.tolist()):
            if x in ins[0].forced:
                if not math.isfinite(y):
                    raise Infeasible(f"{inst.op} <- {src}: NaN/Inf at {x:g}, a value its input certainly takes")
                forced.add(y)
    res = res[torch.isfinite(res)]
    if res.numel() == 0:
        raise Infeasible(f"{inst.op} <- {src}: NaN/Inf on every value its inputs may take")
    found = frozenset(float(c) for c in torch.unique(res))
    if len(found) > MAX_VALUES:
        lo, hi = min(found), max(found)
        return [Range(lo, hi, frozenset(forced), integral=all(c.is_integer() for c in found), src=src)]
    return [of_values(found, src, frozenset(forced))]


def fold(inst: Inst, a, ins: list[Range]) -> list[Range] | str | None:
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
            ranges.append(constant(lo, src))
            continue
        values = torch.unique(v)
        forced = frozenset(float(c) for c in values[:MAX_FORCED])
        integral = bool((v == torch.round(v)).all())
        exact = frozenset(float(c) for c in values) if len(values) <= MAX_VALUES else None
        # Where each value lies is known too: later ops follow it element by element (a
        # padding of ones around zeros stays zero where it was under a CumSum).
        known = stored(t.detach())
        ranges.append(Range(lo, hi, forced, integral=integral, src=src, values=exact, box=(known, known)))
    return ranges
