"""Value search (Algorithm 3): inputs and weights that keep every operator free of NaN/Inf.

Three methods share one entry point so the ablation compares like with like:
`gradient` (Adam on the first failing operator's domain loss, with or without
proxy derivatives), `sampling` (fresh random values until valid) and `none`
(one draw, checked). Every method starts from the same seeded initial values.
The result carries PyTorch's outputs: the oracle later stages compare with.

What the gradient method optimizes: one float *master* per leaf (float16
leaves through float32 masters, as Adam's steps underflow in half precision).
With proxy derivatives, integer and boolean leaves that can reach a float
value get float64 masters too (an integer is its master rounded, a bool is
master > 0.5) and receive gradients through the straight-through shadows of
`search.relaxed`; without proxy derivatives, integers and booleans get no
gradient and are only ever redrawn (on restarts, and in targeted redraws of
the leaves that feed an op the gradient cannot move).

In what order ops run (`search.demand`): Algorithm 3 stops at the first op with
NaN/Inf in any topological order, so each vulnerable op runs as soon as its cone
is computed (narrow domains first: Asin before Log before Reciprocal, so the
Log2(x) that needs x < 0 is repaired before the Reciprocal(x) that the integer
x crossing 0 would break), and ops that feed none run last: a step on an op does
not pay for a heavy ConvTranspose beside it. Float leaves that Asin, Acos, Sqrt,
Log or Log2 read directly are projected into those domains after every step.

Before the first step on a new target, one common scale (`_Search.scale_down`):
the leaves of its cone at 1/4, 1/16, ... of their values, kept at the first that
makes it valid (else at its least violation, if smaller scales did worse again).
Values drawn from [1, 9] grow through products, sums and convolutions by orders of
magnitude past Asin's [-1, 1] or float16's range.

How a step is taken (`search.adam.MaskedAdam`, `_Search.step`): Adam's direction, scaled
by each value's magnitude (at least 1) and by its trust, moving only elements
whose gradient is non-zero now. A step that made its target worse or broke an
op before it is backed off element by element: the moved elements the
violated loss depends on (for a grown target loss, only its grown terms) go
back and are trusted half as far, the rest keep their move. Ops a step broke,
and the target's own losses that hold, guard the target with a margin: they
hold still the elements they would pull the other way (`search.objective`).

Where the parts live: the values and how the graph runs on them in
`search.state` (`SearchState`), the optimizer in `search.adam`, the run order in
`search.demand`, the losses a step follows beyond the target's domain in
`search.objective`; here, the decisions (`_Search`: judge a step, back it off,
restart, scale) and the entry point `search_values`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.gen.feasibility.layout import KEEP_ALL
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.search_result import SearchResult
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.search.adam import MaskedAdam
from nnsmith_cov.search.demand import NARROW_FIRST, demand_order
from nnsmith_cov.search.objective import guard_loss, overflow_guard, step_grads, tame
from nnsmith_cov.search.relaxed import Shadows
from nnsmith_cov.search.sampling import DRAWS
from nnsmith_cov.search.state import BOOL_MASTER, SearchState, finite

# What other modules and the tests take from here: this module's own public names, and three
# that moved to the modules above but are still read through this one.
__all__ = [
    "BOOL_MASTER",
    "DEFAULT_INIT",
    "METHODS",
    "SAMPLING_INIT",
    "MaskedAdam",
    "demand_order",
    "search_values",
]

METHODS = ("gradient", "sampling", "none")
DEFAULT_INIT = (-1.0, 1.0)  # where the gradient search starts
SAMPLING_INIT = (1.0, 9.0)  # the paper's sampling baseline
RESTART_INIT = (-1.0, 1.0)  # floats of every other restart of the gradient method
TARGET_MARGIN = 0.02  # how far inside its domain the target's loss aims
MAX_REDRAWS = 4  # targeted redraws of integer/bool leaves before a full restart
MAX_PARTIAL = 3  # redraws of a stalled loss's elements that did not shrink, before a full restart
# Interval domains of first inputs (the specs' `input_domains`: Asin's [-1, 1], Log's x > 0)
# kept on the float leaves these ops read (`_leaf_boxes`); an open lower bound (Log's 0)
# moves up by OPEN_FLOOR, where results stay moderate.
OPEN_FLOOR = 1e-3


def _leaf_domain(op: type[OpSpec]) -> tuple[float, float] | None:
    d = op.input_domains[0] if op.input_domains else None
    return None if d is None or not d.bounded else (d.lo + OPEN_FLOOR if d.lo_open else d.lo, d.hi)


LEAF_DOMAINS = {op.name(): dom for op in ALL_OPS if (dom := _leaf_domain(op)) is not None}
SCALE_PROBES = 8  # `_Search.scale_down` tries 1/4, 1/16, ... 1/4**8 of the cone's values
MAX_BOOST = 256.0  # the most a plateau lengthens steps


def _leaf_boxes(graph: GraphIR) -> dict[int, tuple[float, float]]:
    """Float leaves that a vulnerable op with an interval domain reads directly (or through
    ops that show every element unchanged: a Reshape, a Transpose, a Tile), and the
    interval (met over all such ops). The search keeps them inside it after every step
    (a projection), rather than take a step on Log2(Sin(x @ w)) that breaks Acos(x) and
    then back it off."""
    producer = {v: inst for inst in graph.insts for v in inst.outputs}
    boxes: dict[int, tuple[float, float]] = {}
    for inst in graph.insts:
        if inst.op not in LEAF_DOMAINS:
            continue
        v = inst.inputs[0]
        while v in producer and producer[v].op in KEEP_ALL and len(producer[v].inputs) == 1:
            v = producer[v].inputs[0]
        if v in producer or not graph.types[v].dtype.is_float:
            continue
        lo, hi = boxes.get(v, (-math.inf, math.inf))
        d_lo, d_hi = LEAF_DOMAINS[inst.op]
        boxes[v] = (max(lo, d_lo), min(hi, d_hi))
    return boxes


@dataclass
class _Step:
    """A step taken on `target`, kept until an evaluation accepts it or undoes all of it."""

    target: int
    which: int  # the index of its first positive loss (len(domain) for the overflow guard)
    loss: float
    start: dict[int, torch.Tensor]  # every master before the step
    grads: list[torch.Tensor | None]
    moved: list[torch.Tensor | None] = field(default_factory=list)  # per trainable master: moved and not undone
    terms: torch.Tensor | None = None  # its loss per element (`num.per_element`), before the step


class _Goal(NamedTuple):
    """What one iteration follows on the first invalid op (`_Search.goal`)."""

    which: int  # the index of its first positive domain loss (len(domain) for the overflow guard)
    loss: torch.Tensor | None  # None: no loss explains the NaN/Inf
    terms: torch.Tensor | None  # the domain loss per element, when a domain loss is violated
    guard: torch.Tensor | None  # the guards' losses (`guard_loss`)
    value: float  # the loss' value (inf without one)


@dataclass(frozen=True)
class _Settings:
    """How one search runs (`search_values`' arguments, the clock read once)."""

    method: str
    lr: float
    patience: int
    max_steps: int
    max_iters: int | None
    t0: float  # perf_counter seconds at the start
    deadline: float  # perf_counter seconds


class _Search(SearchState):
    """One search: the state it moves (`SearchState`) and the decisions taken on it,
    one method each: judge the last step (`judge`), back it off (`back_off`), restart
    (`give_up`, `redraw_own`, `start_over`), scale a new target (`scale`), step (`step`)."""

    def __init__(self, graph: GraphIR, seed: int, init: tuple[float, float], proxy: bool) -> None:
        super().__init__(graph, seed, init, proxy, boxes=_leaf_boxes(graph), narrow=NARROW_FIRST)
        self.iters = 0
        self.target: int | None = None
        self.pending: _Step | None = None  # the last step, not yet judged
        self.redraws = 0  # targeted redraws since the last full restart
        # Redraws of a stalled loss's elements since the last full restart that redrew no fewer
        # than the one before (`strikes`), and how many the last one redrew.
        self.strikes, self.last_partial = 0, math.inf
        self.steps, self.best, self.stall = 0, math.inf, 0
        self.guards: set[int] = set()  # ops before the target that a step on it broke
        self.aim = 0  # the target's loss being followed
        self.caps: dict[int, float] = {}  # the overflow guard's cap per op, while the target stays
        self.scaled: set[tuple[int, int]] = set()  # (target, restart) pairs `scale_down` has tried

    def run(self, cfg: _Settings) -> SearchResult:
        """Iterate until every op holds, or the budget is spent."""
        # Set here, not in __init__: a state built only to be inspected (the tests) needs neither.
        self.cfg = cfg
        self.opt = MaskedAdam(self.trainable(), cfg.lr, self.jitter)
        while True:
            self.iters += 1
            with torch.set_grad_enabled(cfg.method == "gradient"):
                bad, env, shadows = self.first_invalid()
            if bad is None and self.runner.widen:  # valid at search precision: check at the graph's own
                self.runner.widen, self.pending = False, None
                continue
            if bad is None:
                return self.result(True, None, env)
            out_of_time = time.perf_counter() >= cfg.deadline or (
                cfg.max_iters is not None and self.iters >= cfg.max_iters
            )
            if cfg.method == "none" or out_of_time:
                return self.result(False, self.graph.insts[bad].op)
            if cfg.method == "sampling":
                self.restart()
                continue
            self.descend(bad, env, shadows)

    def descend(self, bad: int, env: dict[int, torch.Tensor], shadows: Shadows) -> None:
        """One iteration of the gradient method on `bad`, the first invalid op."""
        goal = self.goal(bad, env, shadows)
        if self.pending is not None and not self.judge(bad, goal):
            return
        if goal.loss is None or not goal.loss.requires_grad:
            self.give_up(bad)  # no loss explains the NaN/Inf, or no value upstream can move
            return
        if self.scale(bad, env):
            return
        self.focus(bad, goal.which)
        if self.stalled(goal.value):
            grads = torch.autograd.grad(goal.loss, self.trainable(), retain_graph=True, allow_unused=True)
            if not self.redraw_own(list(grads)):
                self.start_over()
            return
        self.step(bad, goal)

    def goal(self, bad: int, env: dict[int, torch.Tensor], shadows: Shadows) -> _Goal:
        """The loss to follow on `bad`: its first violated domain loss aimed a margin
        inside, else the overflow guard's; and the guard that holds while it is followed."""
        ins = self.runner.differentiable_inputs(bad, env, shadows)
        side = 1.0 if self.restarts % 2 == 0 else -1.0  # where magnitudes leave 0: flips per restart
        with num.zero_side(side):
            losses = self.runner.spec(bad).domain(self.runner.attrs(bad), *ins)
        which = next((i for i, x in enumerate(losses) if bool(x > 0)), len(losses))
        loss = losses[which] if which < len(losses) else None
        terms = None  # the loss per element: which elements a step made worse
        if loss is not None:
            # Aim a margin inside the domain: elements that land just inside the boundary
            # are pushed back out by the next objective's first step.
            with num.zero_side(side), num.margin(TARGET_MARGIN), num.per_element():
                terms = self.runner.spec(bad).domain(self.runner.attrs(bad), *ins)[which]
            loss = terms.sum()
        else:  # nothing in the op's domain explains it: an overflow
            loss = self.overflow(bad, env, ins)
        guard = None
        if loss is not None:
            # The target's own losses before `which` hold now; they guard it too.
            own = which if which < len(losses) else 0
            with num.zero_side(side):
                guard = guard_loss(self, self.guards if bad == self.target else set(), env, shadows, (bad, own))
        value = math.inf if loss is None else float(loss.detach())
        return _Goal(which, loss, terms, guard, value)

    def overflow(self, bad: int, env: dict[int, torch.Tensor], ins: list[torch.Tensor]) -> torch.Tensor | None:
        """The overflow guard's loss on `bad` (None where it holds), under the cap kept
        for the target, or a new cap once that is met."""
        # Each op its own cap: an op a step on the target broke must not pass its cap on.
        mine = self.caps.get(bad) if bad == self.target else None
        over, self.caps[bad] = overflow_guard(ins, mine if mine is not None else self.fitting_cap(bad, env))
        loss = sum(over) if over and bool(sum(over) > 0) else None
        if loss is None and bad == self.target:  # the cap is met: a new objective
            over, self.caps[bad] = overflow_guard(ins, self.fitting_cap(bad, env))
            loss = sum(over) if over and bool(sum(over) > 0) else None
            if self.pending is not None and bad == self.pending.target:
                self.pending.loss = math.inf
        return loss

    def judge(self, bad: int, goal: _Goal) -> bool:
        """Whether the pending step stands, now that the graph ran after it: it does
        unless it broke an op before its target or made its target worse (an earlier
        loss of it violated again, or the same one grown); then it is backed off."""
        pending = self.pending
        broke = self.rank[bad] < self.rank[pending.target]
        worse = bad == pending.target and (goal.which, -goal.value) < (pending.which, -pending.loss)
        if broke or worse:
            culprit = goal.loss
            if worse and goal.which == pending.which and goal.terms is not None:  # (so pending.terms is too)
                # Only the elements that grew blame the leaves they depend on: in
                # Log2(Sin(x / w)) over 2,000 elements, one that overshot takes back its own
                # move, not the move of every other.
                culprit = torch.where(goal.terms.detach() > pending.terms, goal.terms, 0).sum()
            self.back_off(bad, broke, culprit)
            return False
        self.opt.reward(pending.moved)
        # The same loss, to the bit, after a kept step: a plateau its proxies lead
        # across (Log2 of Floor(Acos(Sign(x))) is the same for every x > 0); the next
        # step goes twice as far.
        same = bad == pending.target and goal.value == pending.loss
        self.opt.boost = min(self.opt.boost * 2, MAX_BOOST) if same else 1.0
        self.pending = None
        return True

    def back_off(self, bad: int, broke: bool, culprit: torch.Tensor | None) -> None:
        """The pending step broke `bad` (before its target) or made its target worse:
        take back what `culprit` blames, and retake what is left of the step."""
        pending = self.pending
        self.opt.boost = 1.0  # the plateau ended the wrong way
        if broke and self.runner.spec(bad).vulnerable:
            self.guards.add(bad)  # it guards the target from now on
        # Move back the elements the violated loss depends on, trusting them half
        # as far from now on; the others keep their move. A target whose gradient
        # through the broken op is huge (Acos' slope at +-1) breaks it at any step
        # length of that op's leaves, while other leaves can fix the target alone.
        if _back_off(self, self.opt, pending, culprit):
            return
        # Nothing of the step is left: take it again as far as each element is
        # trusted now, without Adam's momentum (a first Adam step goes along
        # sign(gradient), which a short enough step descends), unless a new guard
        # changes the gradient.
        if not self.opt.trusted(pending.grads):
            if not self.redraw_own(pending.grads):
                self.give_up(pending.target)
            return
        self.opt.restart()
        if broke and bad in self.guards:
            self.pending = None
            return
        self.take(pending)

    def restart(self, leaves: set[int] | None = None) -> None:
        """A restart: new values for `leaves` (all by default), integers and bools drawn
        wide, narrow and as one repeated value in turn (`DRAWS`)."""
        self.restarts += 1
        self.redraw(DRAWS[(self.restarts - 1) % len(DRAWS)], leaves)

    def start_over(self) -> None:
        """A full restart: every leaf redrawn, no target."""
        self.redraws = 0
        self.restart()
        self.target, self.pending = None, None

    def give_up(self, bad: int) -> None:
        """Nothing more to follow on `bad`: redraw what feeds it, or everything."""
        discrete = {v for v in self.cones[bad] if self.discrete(v)}
        if discrete and self.redraws < MAX_REDRAWS:
            self.redraws += 1
            self.restart(discrete)
            self.target, self.pending = None, None
        else:
            self.start_over()

    def redraw_own(self, grads: list[torch.Tensor | None] | None) -> bool:
        """The target's loss stopped improving: redraw only the elements it still depends
        on (an element caught in a local minimum of its own, such as Sin(-1 / Cos(x)) at
        x = 0, among thousands that are valid), for as long as each such redraw redraws
        fewer elements than the last (up to MAX_PARTIAL strikes). False when it does not."""
        n = self.resample_where(grads) if grads is not None and self.strikes < MAX_PARTIAL else 0
        if not n:
            self.strikes, self.last_partial = 0, math.inf  # a full restart follows
            return False
        self.strikes += n >= self.last_partial
        self.last_partial = n
        self.target, self.pending = None, None
        return True

    def scale(self, bad: int, env: dict[int, torch.Tensor]) -> bool:
        """A new target (once per restart): one common scale of its cone first
        (`scale_down`, each run an iteration). Returns whether it wrote the leaves (if
        only to undo): the next iteration runs again from them."""
        if self.target == bad or (bad, self.restarts) in self.scaled:
            return False
        self.scaled.add((bad, self.restarts))
        _, runs = self.scale_down(bad, env, (self.cfg.max_iters or math.inf) - self.iters, self.cfg.deadline)
        if not runs:
            return False
        self.iters += runs
        self.target, self.pending = None, None
        return True

    def focus(self, bad: int, which: int) -> None:
        """`bad`'s loss `which` is followed: a new target resets Adam, its step control
        and the guards; another loss of the same target, Adam's momentum."""
        if self.target != bad:
            self.target, self.steps, self.best, self.stall = bad, 0, math.inf, 0
            self.opt = MaskedAdam(self.trainable(), self.cfg.lr, self.jitter)
            self.guards, self.aim = set(), which
        elif which != self.aim:
            self.opt, self.aim = MaskedAdam(self.trainable(), self.cfg.lr, self.jitter), which

    def stalled(self, value: float) -> bool:
        """Count a step on the target at loss `value`: whether it has stopped improving
        (for more than `patience` steps) or run out of steps."""
        self.steps += 1
        self.stall = 0 if value < self.best * (1 - 1e-3) else self.stall + 1
        self.best = min(self.best, value)
        return self.stall > self.cfg.patience or self.steps > self.cfg.max_steps

    def step(self, bad: int, goal: _Goal) -> None:
        """Take a step on `goal`'s loss, held by its guard; it is judged after the next run."""
        grads = step_grads(self.trainable(), goal.loss, goal.guard)
        if not any(g is not None and bool(g.any()) for g in grads):
            self.give_up(bad)  # zero gradient: nothing to follow
            return
        terms = None if goal.terms is None else goal.terms.detach()
        self.pending = _Step(bad, goal.which, goal.value, self.save(), grads, terms=terms)
        self.take(self.pending)

    def take(self, step: _Step) -> None:
        """Take `step` from its start: one Adam step along its gradients."""
        self.opt.step(step.grads)
        self.clamp_masters()
        if not all(finite(p) for p, g in zip(self.trainable(), step.grads) if g is not None):  # what moved
            self.redraw_non_finite()
        starts = [step.start[v] for v in self.trainable_leaves()]
        step.moved = [None if g is None else p.detach() != a for p, a, g in zip(self.trainable(), starts, step.grads)]

    def result(self, ok: bool, failed: str | None, env: dict[int, torch.Tensor] | None = None) -> SearchResult:
        values = self.numpy_values()
        oracle: dict[int, np.ndarray] = {}
        if ok and env is not None:
            # The pass that found every op valid computed the outputs: proxies change
            # gradients only, so these are the plain functions' values (tested).
            oracle = {v: env[v].detach().numpy().copy() for v in self.graph.outputs}
        elapsed = (time.perf_counter() - self.cfg.t0) * 1000
        return SearchResult(ok, values, oracle, self.iters, self.restarts, elapsed, failed)

    def scale_down(self, k: int, env: dict[int, torch.Tensor], runs: float, deadline: float) -> tuple[bool, int]:
        """Op k has just become the target (`env`: the run that found it): run the graph
        with every float leaf of its cone (and integer, with proxy derivatives) scaled
        towards 0 by one factor, 1/4, 1/16, ... (at most `runs` runs, none past
        `deadline` in perf_counter seconds), and keep the first at which op k and the
        ops before it are valid. Values drawn from [1, 9] multiply through products,
        convolutions and sums into magnitudes far outside Asin's [-1, 1] or float16's
        range; one common scale takes every element inside at once, where gradient
        steps shrink each by half at most and then chase the last few across the
        boundary. Where no scale makes op k valid, the one that left it least violated
        (`_violation`) is kept if a smaller one did worse again; a violation that only
        shrinks with the leaves (-(x * y) for positive x and y) approaches the boundary
        and never crosses it, and the values stay as they were. Returns whether op k
        was made valid and how many runs it took."""
        # The leaves the search moves (integers too, with proxy derivatives: their masters
        # scale and round), but booleans: a master scaled below 0.5 is just False.
        leaves = [
            v for v in sorted(self.cones[k]) if self.masters[v].requires_grad and self._dtype(v) is not DType.bool
        ]
        if not leaves:
            return False, 0
        start = {v: self.masters[v].detach().clone() for v in leaves}
        best, least = 0, self._violation(k, env)
        tried = 0
        for j in range(1, int(min(SCALE_PROBES, runs)) + 1):
            if time.perf_counter() >= deadline:
                break
            self._scale(start, 4.0**-j)
            tried = j
            # With autograd on, as the search's own runs: the kept scale's run is reused.
            bad, env, _ = self.first_invalid()
            if bad is None or self.rank[bad] > self.rank[k]:
                return True, tried
            if bad == k and (v := self._violation(k, env)) < least:
                best, least = j, v
        if best == tried:  # still falling at the last scale tried: no better than the start
            best = 0
        if best != tried:
            self._scale(start, 4.0**-best)
        return False, tried


def _back_off(s: SearchState, opt: MaskedAdam, step: _Step, culprit: torch.Tensor | None) -> bool:
    """After `step` made `culprit` (the loss now violated) positive: move the moved
    elements it depends on back to where the step started and halve their trust.
    With no gradient to tell them (NaN, no loss), all of them. Returns whether any
    element is still moved."""
    params = s.trainable()
    grads: list = [None] * len(params)
    if culprit is not None and culprit.requires_grad:
        gs = torch.autograd.grad(culprit, params, retain_graph=True, allow_unused=True)
        grads = [None if g is None else tame(g) for g in gs]
    blamed = [None if mv is None or g is None else mv & (g != 0) for mv, g in zip(step.moved, grads)]
    if not any(b is not None and bool(b.any()) for b in blamed):
        blamed = step.moved
    opt.punish(blamed)
    left = False
    with torch.no_grad():
        for p, v, mv, b in zip(params, s.trainable_leaves(), step.moved, blamed):
            if mv is None or b is None:
                continue
            p.copy_(torch.where(b, step.start[v], p))
            mv &= ~b
            left |= bool(mv.any())
    return left


def search_values(
    graph: GraphIR,
    seed: int,
    method: str = "gradient",
    budget_ms: float = 100.0,
    proxy: bool = True,
    lr: float = 0.5,
    init: tuple[float, float] | None = None,
    max_iters: int | None = None,
    patience: int = 8,
    max_steps: int = 64,
) -> SearchResult:
    """Find NaN/Inf-free values for `graph` within `budget_ms` (and `max_iters`, if set).

    Each iteration runs the graph up to the first op with a NaN/Inf output. On an op
    that has just become the target (once per restart), the gradient method first
    tries a common scale of the leaves of its cone (`_Search.scale`, each run
    an iteration); where none makes it valid, it steps. It judges its previous step:
    a step is kept when its target's loss went down or the target became valid. When
    the loss went up, or an op before the target broke (a full-size step overshoots
    products of many moving values, and fixing a later op must not break an earlier
    one), the elements the violated loss has a gradient in (where the target's loss
    grew, the gradient of its terms that grew) are moved back to where the step
    started and their trust (`MaskedAdam`) is halved; the other elements keep their
    move, and the next iteration judges the result again. Once nothing of the step
    is left, it is taken again as far as each element is trusted now. A kept step
    restores its elements' trust by half, up to 1; Adam's moments and the trust are
    reset on every new target and loss. An op a step broke becomes a guard: until
    the target changes, its domain losses with a margin of GUARD_MARGIN hold still
    the elements the target would push towards its boundary (`step_grads`), as do
    the target's own earlier losses (a Pow made valid in its base must stay so while
    y * log(x) is brought down). A kept step after which the target's loss is the
    same to the bit stands on a plateau that proxy derivatives lead across (Floor,
    Sign, a saturated FakeQuantize): the next step goes twice as far, up to
    MAX_BOOST times. An op with a NaN/Inf output that no domain loss explains (an
    overflow) follows `overflow_guard`.

    Beyond Algorithm 3's restarts on a zero gradient, the gradient method also
    restarts when one target's loss has not improved for `patience` steps,
    after `max_steps` steps on it, or when every element a step would move is
    trusted less than MIN_TRUST: losses such as Sqrt(1 / x) for negative x slope towards
    the pole, never across it, so following them longer does not help. Such a
    restart first redraws only the elements the loss still has a gradient in
    (`_Search.redraw_own`), keeping the rest; each full restart flips the side a
    magnitude leaves 0 towards. Where
    the failing op's loss cannot be moved by gradient (no loss explains the
    NaN/Inf, or its gradient is zero) but integer or boolean leaves feed it,
    only those leaves are redrawn (a few times before a full restart),
    keeping the float values found so far.

    Float16 convolutions run in float32 while searching (`Runner.widen`);
    values valid that way are checked once more at float16, which returns
    them with the oracle, or else the search goes on at float16.
    """
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r} (choose from {', '.join(METHODS)})")
    if init is None:
        init = SAMPLING_INIT if method == "sampling" else DEFAULT_INIT
    t0 = time.perf_counter()
    s = _Search(graph, seed, init, proxy=proxy and method == "gradient")
    if method == "gradient":  # every other restart draws floats of both signs (sampling keeps its range)
        s.restart_init = RESTART_INIT
    s.runner.widen &= method != "none"  # one draw, one check: at the graph's own precision
    return s.run(_Settings(method, lr, patience, max_steps, max_iters, t0, t0 + budget_ms / 1000))
