"""Elementwise maps on ranges: unary ops (monotone, decreasing, or through the image of an
interval for those that are neither), casts, and the bounds of a product."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace

import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op_facts import Monotone
from nnsmith_cov.gen.feasibility.facts import INF, Range, dtype_range
from nnsmith_cov.ops import ALL_OPS, op_by_name

# Unary ops that are one fixed function of each element (the specs' `value_map`).
UNARY = frozenset(op.name() for op in ALL_OPS if op.value_map is not None)
# Rising unary pointwise ops that attributes shape (no fixed map): computed with their own forward.
RISING_OPS = frozenset(
    op.name()
    for op in ALL_OPS
    if op.pointwise and op.arity() == 1 and op.value_map is None and op.monotone is Monotone.RISING
)


def unary_map(name: str) -> tuple[Callable[[torch.Tensor], torch.Tensor], int, tuple[float, float] | None]:
    """A UNARY op's function on float64, its trend (+1 rising, -1 falling, 0 neither), and
    the interval its input lies in on valid executions (None: anywhere)."""
    spec = op_by_name(name)
    assert spec.value_map is not None, f"{name} has no value map"
    fn = spec.value_map.fn or spec.torch_fn
    d = spec.input_domains[0] if spec.input_domains else None
    return fn, spec.monotone.trend, (d.lo, d.hi) if d is not None and d.bounded else None


def _f(fn, x: float) -> float:
    """fn at x (float64); at an infinite x where fn gives NaN, its value at +-1e300."""
    y = float(fn(torch.tensor(x, dtype=torch.float64)))
    if math.isnan(y) and math.isinf(x):
        y = float(fn(torch.tensor(math.copysign(1e300, x), dtype=torch.float64)))
    return y


def _fact(fn, x: float, none: float) -> float:
    """fn applied to a "some element" fact, where `none` (an infinity) means no fact."""
    return x if x == none else _f(fn, x)


def rising(name: str, a) -> bool:
    """Whether `name` with attributes `a` is a non-decreasing map of RISING_OPS (its spec's
    `monotone_for`: ThresholdedRelu only for a threshold >= 0)."""
    return name in RISING_OPS and op_by_name(name).monotone_for(a) is Monotone.RISING


def unary(name: str, r: Range, a) -> Range:
    if name == "Clip":
        fn, trend, dom = (lambda t: torch.clamp(t, a.lo, a.hi)), 1, None
    elif name in RISING_OPS:
        fn, trend, dom = (lambda t: op_by_name(name).forward(a, t)), 1, None
    else:
        fn, trend, dom = unary_map(name)
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
    whole = name in UNARY and op_by_name(name).value_map.whole
    integral = whole or (r.integral and name in {"Relu", "Neg", "Abs", "Sign", "Clip"})
    if integral and name == "Clip":  # a bound may be absent (None): the Clip form leaves it out
        integral = all(b is None or float(b).is_integer() for b in (a.lo, a.hi))
    if trend == 1:
        below, above = _fact(fn, r.below, INF), _fact(fn, r.above, -INF)
        out = Range(_f(fn, lo), _f(fn, hi), forced, below, above, integral, r.src)
    elif trend == -1:
        below = INF if r.above == -INF else _f(fn, r.above)
        above = -INF if r.below == INF else _f(fn, r.below)
        out = Range(_f(fn, hi), _f(fn, lo), forced, below, above, integral, r.src)
    else:  # Abs, Sin, Cos, Gelu, HardSwish, Mish: not monotone, so each fact goes through the image
        bottom, top = _image(name, fn, lo, hi)
        # An element certainly in [lo, below] (or [above, hi]) is certainly in that
        # interval's image: some output element is at most its top, at least its bottom.
        below, above = INF, -INF
        for w_lo, w_hi in ((lo, r.below), (r.above, hi)):
            if w_lo <= w_hi and (w_hi < INF or w_lo > -INF):
                w_bottom, w_top = _image(name, fn, w_lo, w_hi)
                below, above = min(below, w_top), max(above, w_bottom)
        out = Range(bottom, top, forced, below, above, integral, r.src)
    if name == "Clip" and a.hi is not None and a.hi <= 0:
        out = replace(out, src=f"Clip(hi={a.hi})")
    return out


def per_channel(r: Range, a) -> Range:
    """FakeQuantizePerChannel: each channel is a FakeQuantize with its own scale and zero
    point, all non-decreasing. Every element lies within some channel's image of [lo, hi];
    the element <= below lands at most at the largest image of below, the one >= above
    at least at the smallest image of above."""
    outs = [
        unary("FakeQuantize", r, SimpleNamespace(scale=scale, zero=zero, lo=a.lo, hi=a.hi))
        for scale, zero in set(op_by_name("FakeQuantizePerChannel").channels(a))
    ]
    if not outs:
        return r
    lo, hi = min(o.lo for o in outs), max(o.hi for o in outs)
    return Range(lo, hi, below=max(o.below for o in outs), above=min(o.above for o in outs), src=r.src)


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
    # Gelu, HardSwish, Mish: increasing but for one dip
    ends = [_f(fn, lo), _f(fn, hi)]
    dips = [v for where, v in op_by_name(name).value_map.dips if lo <= where <= hi]
    return min(ends + dips), max(ends)


def cast(target: DType, r: Range) -> Range:
    if target is DType.bool:
        forced = frozenset(float(c != 0) for c in r.forced)
        return Range(0.0, 1.0, forced, integral=True, src=r.src)
    if target.is_float:
        return r
    base = dtype_range(target)
    if r.hi >= base.hi + 1 or r.lo <= base.lo - 1:
        # A value beyond the target's range (2**63 passes a float |x| <= 2**63 - 1) wraps
        # to anything: no bound but the dtype's.
        return Range(base.lo, base.hi, integral=True, src=r.src)
    trunc = lambda v: float(math.trunc(v)) if math.isfinite(v) else v  # noqa: E731
    lo, hi = max(trunc(r.lo), base.lo), min(trunc(r.hi), base.hi)
    forced = frozenset(trunc(c) for c in r.forced if base.lo <= c <= base.hi)
    return Range(lo, hi, forced, integral=True, src=r.src)


def mul_bounds(a: Range, b: Range) -> tuple[float, float]:
    products = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            p = x * y
            if math.isnan(p):  # 0 * inf: unbounded
                return -INF, INF
            products.append(p)
    return min(products), max(products)
