"""Numeric validity for specs: tensor-inequality losses (Table 2) and proxy derivatives.

A vulnerable spec states its valid input domain as a list of losses, each the
Table 2 form of one predicate rewritten as f(X) <= 0 or f(X) < 0: a loss is
positive exactly when its predicate is violated by some element. Losses are
computed in float64 so the comparison itself cannot overflow.

Proxy derivatives stand in for gradients that are zero (ReLU's negative side,
Floor, Round, ...) so the value search can still move the values upstream of
them: a small slope `ALPHA` with the sign of the function's overall trend.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EPS = 1e-10  # Table 2's epsilon for strict inequalities
ALPHA = 0.1  # proxy slope where the true derivative is zero


def le0(f: torch.Tensor) -> torch.Tensor:
    """Loss of f(X) <= 0: sum of max(f(x), 0)."""
    return torch.clamp(f.double(), min=0).sum()


def lt0(f: torch.Tensor) -> torch.Tensor:
    """Loss of f(X) < 0: sum of max(f(x) + eps, 0)."""
    return torch.clamp(f.double() + EPS, min=0).sum()


def log_max(dtype: torch.dtype) -> float:
    """A bound on log|result| that keeps exp-like ops finite in `dtype` (with margin)."""
    return math.log(torch.finfo(dtype).max) - 1.0 if dtype.is_floating_point else 40.0


def tiny(dtype: torch.dtype) -> float:
    """Smallest magnitude whose reciprocal stays finite in `dtype`."""
    return 2.0 / torch.finfo(dtype).max if dtype.is_floating_point else 0.0


def log_ratio(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log|x| - log|y| in float64, finite for zeros."""
    x, y = x.double().abs(), y.double().abs()
    return torch.log(x + EPS) - torch.log(y + EPS)


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
hardsigmoid = proxy(F.hardsigmoid, lambda x: torch.where(x.abs() < 3, 1 / 6, ALPHA))
hardswish = proxy(F.hardswish, lambda x: torch.where(x < -3, ALPHA, torch.where(x > 3, 1.0, (2 * x + 3) / 6)))


def clamp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """clamp with slope ALPHA outside [lo, hi]."""
    f = proxy(lambda t: torch.clamp(t, lo, hi), lambda t: torch.where((t >= lo) & (t <= hi), 1.0, ALPHA))
    return f(x)
