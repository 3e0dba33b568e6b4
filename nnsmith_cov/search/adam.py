"""MaskedAdam: the value search's optimizer, Adam that moves only what the loss moves now.

Used by `search.gradient`; its step lengths are relative to each value's
magnitude and scaled per element by a trust that the search lowers where a
step made things worse (`punish`) and raises where one was kept (`reward`).
"""

from __future__ import annotations

import torch

JITTER = 0.5  # relative spread of the step lengths of one step's elements
TRUST_GAIN = 1.5  # trust regained by an element whose step was kept
MIN_TRUST = 1 / 1024  # below this an element's step is not worth taking


class MaskedAdam:
    """Adam whose step moves only the elements with a non-zero gradient in this step,
    each by lr times its trust times its magnitude (at least 1) along Adam's direction.

    The domain losses are hinges: an element that has just crossed into its
    valid region has zero gradient, and plain Adam would carry it on by its
    momentum (about 9 more steps' worth), often out of the region on the other
    side. Here it stays where it landed. Steps relative to the magnitude (as
    Adafactor's) bring a value from 9 to below 1 in four steps instead of
    sixteen; values near 0 still move by lr.

    `trust` (per element, at most 1) is the step control: an element
    whose move made things worse is moved back and trusted half as far, one
    whose move was kept regains trust (as Rprop's step sizes), so a value that
    must land in a narrow window takes shorter steps while the rest do not.
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        lr: float,
        jitter: torch.Generator | None = None,
        betas=(0.9, 0.999),
        eps: float = 1e-30,
    ) -> None:
        self.params, self.lr, self.jitter, self.betas, self.eps = params, lr, jitter, betas, eps
        self.boost = 1.0  # step length factor on a plateau of the loss (`search.gradient`)
        # None: every element fully trusted (the common case; nothing to compute).
        self.trust: list[torch.Tensor | None] = [None] * len(params)
        self.restart()

    def restart(self) -> None:
        """Forget the moments (not the trust): the next step goes along sign(gradient)."""
        self.m: list[torch.Tensor | None] = [None] * len(self.params)
        self.v: list[torch.Tensor | None] = [None] * len(self.params)
        self.t = 0

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor | None]) -> None:
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for k, (p, g) in enumerate(zip(self.params, grads)):
            if g is None:
                continue
            top = float(g.abs().max())
            if top == 0:
                continue
            # Adam is scale-free but for eps, and a gradient of 1e-14 (Erf or Exp deep in
            # saturation, in float32) must move its element as any other: with Adam's
            # usual eps of 1e-8 it would not move it at all. So each tensor's gradient is
            # taken relative to its largest element (g * g stays a normal float down to
            # 1e-19 of it), and eps is far below that.
            g = (g / top).to(p.dtype)
            if self.m[k] is None:
                self.m[k], self.v[k] = torch.zeros_like(p), torch.zeros_like(p)
            m, v = self.m[k], self.v[k]
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            # Adam's ratio is at most about 3 in magnitude; the clamp bounds it where g * g underflowed.
            ratio = (m / c1).div_((v / c2).sqrt_().add_(self.eps)).clamp_(-4, 4)
            update = ratio.mul_(p.detach().abs().clamp(min=1))
            if self.trust[k] is not None:
                update.mul_(self.trust[k])
            if self.jitter is not None:
                # Each tensor's step drawn from [1 - JITTER, 1 + JITTER] of its length: two
                # factors of a product that must change sign (x * y <= 0 from x, y > 0) would
                # otherwise shrink in lockstep and cross 0 together, again and again.
                r = float(torch.rand((), generator=self.jitter, dtype=torch.float64))
                update.mul_(1 - JITTER + 2 * JITTER * r)
            p.sub_(update.mul_(self.lr * self.boost).masked_fill_(g == 0, 0))

    @torch.no_grad()
    def reward(self, moved: list[torch.Tensor | None]) -> None:
        """The elements `moved` took a step that was kept: trust them further."""
        for trust, mv in zip(self.trust, moved):
            if trust is not None and mv is not None:
                trust.copy_(torch.where(mv, (trust * TRUST_GAIN).clamp(max=1), trust))

    @torch.no_grad()
    def punish(self, moved: list[torch.Tensor | None]) -> None:
        """The elements `moved` took a step that made things worse: trust them half as far."""
        for k, mv in enumerate(moved):
            if mv is not None and bool(mv.any()):
                if self.trust[k] is None:
                    self.trust[k] = torch.ones_like(self.params[k])
                t = self.trust[k]
                t.copy_(torch.where(mv, t / 2, t))

    def trusted(self, grads: list[torch.Tensor | None]) -> bool:
        """Whether a step along `grads` still moves some element by a useful length."""
        for t, g in zip(self.trust, grads):
            if g is None or not bool(g.any()):
                continue
            if t is None or bool((t[g != 0] >= MIN_TRUST).any()):
                return True
        return False
