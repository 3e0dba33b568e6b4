"""Numeric validity for specs: tensor-inequality losses (Table 2) and proxy derivatives.

A vulnerable spec states its valid input domain as a list of losses, each the
Table 2 form of one predicate rewritten as f(X) <= 0 or f(X) < 0: a loss is
positive exactly when its predicate is violated by some element. Losses are
computed in float64 so the comparison itself cannot overflow.

Proxy derivatives stand in for gradients that are zero (ReLU's negative side,
Floor, Round, ...) so the value search can still move the values upstream of
them: a small slope `ALPHA` with the sign of the function's overall trend.
`attach` is the straight-through form the search uses where a value is not a
float at all (casts, comparisons, arg-reductions): the value stays exact and
the gradient goes to a float surrogate.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

EPS = 1e-10  # Table 2's epsilon for strict inequalities
ALPHA = 0.1  # proxy slope where the true derivative is zero


_margin = 0.0  # see `margin`
_zero_side = 1.0  # see `zero_side`
_summed = True  # see `per_element`


def le0(f: torch.Tensor) -> torch.Tensor:
    """Loss of f(X) <= 0: sum of max(f(x), 0)."""
    h = torch.clamp(f.double() + _margin, min=0)
    return h.sum() if _summed else h


def lt0(f: torch.Tensor) -> torch.Tensor:
    """Loss of f(X) < 0: sum of max(f(x) + eps, 0)."""
    h = torch.clamp(f.double() + (EPS + _margin), min=0)
    return h.sum() if _summed else h


@contextlib.contextmanager
def _setting(name: str, value: float | bool) -> Iterator[None]:
    """The module setting `name` set to `value` within the block."""
    saved, globals()[name] = globals()[name], value
    try:
        yield
    finally:
        globals()[name] = saved


def per_element() -> contextlib.AbstractContextManager[None]:
    """Within this block, losses are not summed: each comes as its elements' terms, so
    the value search can tell which elements a step made worse."""
    return _setting("_summed", False)


def margin(m: float) -> contextlib.AbstractContextManager[None]:
    """Within this block, losses ask for f(X) <= -m: positive also for elements that
    satisfy the predicate by less than m. The value search uses it to keep an op it
    has already repaired away from its boundary while it repairs another."""
    return _setting("_margin", m)


def zero_side(sign: float) -> contextlib.AbstractContextManager[None]:
    """Within this block, `magnitude` leaves 0 towards `sign` (+1 or -1). Neither side
    is right for every graph (a zero pad under a ReduceMin can only be left
    downwards), so the value search alternates it between restarts."""
    return _setting("_zero_side", sign)


def log_max(dtype: torch.dtype) -> float:
    """A bound on log|result| that keeps exp-like ops finite in `dtype` (with margin)."""
    return math.log(torch.finfo(dtype).max) - 1.0 if dtype.is_floating_point else 40.0


def tiny(dtype: torch.dtype) -> float:
    """Smallest magnitude whose reciprocal stays finite in `dtype`."""
    return 2.0 / torch.finfo(dtype).max if dtype.is_floating_point else 0.0


def magnitude(x: torch.Tensor) -> torch.Tensor:
    """|x| in float64, whose derivative at 0 is +1 (or -1, see `zero_side`) instead of
    autograd's 0.

    Losses that want a magnitude away from 0 (divisors, reciprocals) would
    otherwise have no gradient exactly where they are violated: at zeros,
    which integer and boolean values cast to floats, ReLU and padding produce.
    """
    x = x.double()
    if not x.requires_grad:
        return x.abs()
    side = _zero_side
    return _Proxy.apply(x, torch.abs, lambda t: torch.where(t > 0, 1.0, torch.where(t < 0, -1.0, side)).double())


def log_ratio(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log|x| - log|y| in float64, finite for zeros."""
    return torch.log(x.double().abs() + EPS) - torch.log(magnitude(y) + EPS)


def abs_max(dtype: torch.dtype) -> float:
    """Largest magnitude a float may have to convert into `dtype` (float or integer)."""
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return float(info.max)


# -- proxy derivatives -----------------------------------------------------------------


class _Proxy(torch.autograd.Function):
    """y = fn(x) with dy/dx replaced where `slope` says so."""

    @staticmethod
    def forward(ctx, x, fn, slope):  # type: ignore[override]
        ctx.save_for_backward(x)
        ctx.slope = slope
        return fn(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return grad * ctx.slope(x).to(grad.dtype), None, None


def _flat(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, ALPHA)


def proxy(fn, slope=_flat):
    """`fn` with the proxy derivative `slope(x)` (default: ALPHA everywhere)."""

    def apply(x: torch.Tensor) -> torch.Tensor:
        return _Proxy.apply(x, fn, slope) if x.requires_grad else fn(x)

    return apply


relu = proxy(torch.relu, lambda x: torch.where(x > 0, 1.0, ALPHA))
floor = proxy(torch.floor)
ceil = proxy(torch.ceil)
round = proxy(torch.round)  # noqa: A001 - the op's name
sign = proxy(torch.sign)
# |x| leaves 0 upwards: autograd's slope of 0 there would hold an exact zero (a cast
# integer, a padding) in place under Log(Abs(x)).
absolute = proxy(torch.abs, lambda x: torch.where(x < 0, -1.0, 1.0))
hardsigmoid = proxy(F.hardsigmoid, lambda x: torch.where(x.abs() < 3, 1 / 6, ALPHA))
hardswish = proxy(F.hardswish, lambda x: torch.where(x > 3, 1.0, ((2 * x + 3) / 6).clamp(min=ALPHA)))


def rising(fn):
    """`fn` (increasing, or increasing in trend) with derivative ALPHA wherever its true
    derivative is not positive: underflowed to 0 in saturation, or negative on a dip such
    as Gelu's below -0.75."""

    def slope(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            t = x.detach().requires_grad_(True)
            (d,) = torch.autograd.grad(fn(t).sum(), t)
        return torch.where(d > 0, d, torch.full_like(d, ALPHA))

    return proxy(fn, slope)


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax whose entries that underflowed to exactly 0 (true gradient 0) get ALPHA
    times the gradient of log-softmax: up for themselves, down for the dominant ones."""
    out = F.softmax(x, dim)
    if not x.requires_grad:
        return out
    dead = (out == 0).detach()
    if not bool(dead.any()):
        return out
    surrogate = ALPHA * torch.where(dead, F.log_softmax(x.double(), dim), 0)
    return attach(out, surrogate)


def clamp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """clamp with slope ALPHA outside [lo, hi]."""
    f = proxy(lambda t: torch.clamp(t, lo, hi), lambda t: torch.where((t >= lo) & (t <= hi), 1.0, ALPHA))
    return f(x)


class _Attach(torch.autograd.Function):
    """Forward: `x` unchanged (as float64 when `x` is not a float). Backward: the
    incoming gradient goes both to `x` (when a float) and to the surrogate."""

    @staticmethod
    def forward(ctx, x, surrogate):  # type: ignore[override]
        ctx.x_dtype = x.dtype if x.is_floating_point() else None
        ctx.s_dtype = surrogate.dtype
        return x.clone() if x.is_floating_point() else x.double()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        to_x = grad.to(ctx.x_dtype) if ctx.x_dtype is not None else None
        return to_x, grad.to(ctx.s_dtype)


def attach(x: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """`x`'s values with the gradient of `surrogate` (a straight-through estimator).

    `surrogate` is broadcast to `x`'s shape; a non-float `x` comes back as
    float64 holding the same numbers, so integer and boolean values can carry
    gradients through the ops that follow.
    """
    return _Attach.apply(x, surrogate.expand(x.shape))
