"""What one step of the value search follows: the losses beyond an op's own domain.

An op whose result overflowed with every domain loss holding gets `overflow_guard`'s
losses; ops a step broke, and the target's own losses that hold, make a guard
(`guard_loss`) that holds still the elements the target would push towards their
boundary (`step_grads`). Gradients go through `tame` before Adam or a blame sees them.
"""

from __future__ import annotations

import math

import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.search.relaxed import Shadows
from nnsmith_cov.search.state import SearchState

GUARD_MARGIN = 0.1  # how far inside its domain a guard op is kept


def overflow_guard(ins: list[torch.Tensor], cap: float | None = None) -> tuple[list[torch.Tensor], float]:
    """Losses for an op whose result overflowed although no domain loss of its own is
    positive (float16 sums and products, convolutions, ...): each float input's
    magnitude at most sqrt(max) of its dtype, which keeps products and sums of two
    such values finite, and at most `cap`. Sums of many products overflow below any
    fixed bound, so the search passes a cap (`SearchState.fitting_cap`, else half the
    largest input magnitude) and keeps it while the loss goes down (one objective per
    target), choosing another when it is met and the op still overflows. Returns the
    losses and the cap used."""
    floats = [x for x in ins if x.is_floating_point() and x.numel()]
    if not floats:
        return [], math.inf
    if cap is None:
        cap = max(float(x.detach().abs().max()) for x in floats) / 2
    losses = [num.le0(x.abs() - min(math.sqrt(torch.finfo(x.dtype).max), cap)) for x in floats]
    return losses, cap


def tame(g: torch.Tensor) -> torch.Tensor:
    """A gradient Adam can digest: NaN -> 0, magnitudes capped so g * g stays finite
    (Sqrt at 0 has an infinite derivative)."""
    cap = math.sqrt(torch.finfo(g.dtype).max) / 16
    return torch.nan_to_num(g, nan=0.0, posinf=cap, neginf=-cap).clamp(-cap, cap)


def guard_loss(
    s: SearchState, guards: set[int], env: dict[int, torch.Tensor], shadows: Shadows, own: tuple[int, int]
) -> torch.Tensor | None:
    """The domain losses of the guard ops and the target's first `own[1]` losses (which
    hold), with a margin: positive near their boundary. None when there are none."""
    total = None
    target, first = own
    with num.margin(GUARD_MARGIN):
        for j in sorted(guards | ({target} if first else set())):
            ins = s.runner.differentiable_inputs(j, env, shadows)
            losses = s.runner.spec(j).domain(s.runner.attrs(j), *ins)
            for x in losses[:first] if j == target else losses:
                total = x if total is None else total + x
    return total


def step_grads(params: list[torch.Tensor], loss: torch.Tensor, guard: torch.Tensor | None) -> list:
    """Gradients for one step on `loss` while `guard` (the guards' losses) holds.

    The guard is a brake, not a goal: where it is active (some guarded element
    is within its margin) and pulls an element the other way than the target,
    that element is held still. A sum would let the target's far larger
    gradient (y * log x of a Pow with y = 1700) push an element just inside its
    guard's domain back out, at any step length; moving elements by the guard
    alone would push values that satisfy the target out of a window narrower
    than the margin. Where the guard would hold every element, it holds none
    (a step that breaks a guard is backed off element by element anyway)."""

    def grad(x: torch.Tensor) -> list:
        if not x.requires_grad:
            return [None] * len(params)
        # Kept: parts of the graph are reused by the next run (`SearchState._run`).
        gs = torch.autograd.grad(x, params, retain_graph=True, allow_unused=True)
        return [None if g is None else tame(g) for g in gs]

    active = guard is not None and guard.requires_grad and bool(guard.detach() > 0)
    g_t = grad(loss)
    if not active:
        return g_t
    held = [t if g is None or t is None else torch.where(t * g < 0, 0, t) for t, g in zip(g_t, grad(guard))]
    return held if any(h is not None and bool(h.any()) for h in held) else g_t
