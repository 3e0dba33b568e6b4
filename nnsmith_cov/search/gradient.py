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

In what order ops run (`demand_order`): Algorithm 3 stops at the first op with
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

How a step is taken (`MaskedAdam`, `search_values`): Adam's direction, scaled
by each value's magnitude (at least 1) and by its trust, moving only elements
whose gradient is non-zero now. A step that made its target worse or broke an
op before it is backed off element by element: the moved elements the
violated loss depends on (for a grown target loss, only its grown terms) go
back and are trusted half as far, the rest keep their move. Ops a step broke,
and the target's own losses that hold, guard the target with a margin: they
hold still the elements they would pull the other way.
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
from nnsmith_cov.gen.feasibility.layout import KEEP_ALL
from nnsmith_cov.gen.feasibility.refine import DOMAINS
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.search.relaxed import Runner, Shadows
from nnsmith_cov.search.sampling import DRAWS, sample_tensor

METHODS = ("gradient", "sampling", "none")
DEFAULT_INIT = (-1.0, 1.0)  # where the gradient search starts
SAMPLING_INIT = (1.0, 9.0)  # the paper's sampling baseline
RESTART_INIT = (-1.0, 1.0)  # floats of every other restart of the gradient method
GUARD_MARGIN = 0.1  # how far inside its domain a guard op is kept
TARGET_MARGIN = 0.02  # how far inside its domain the target's loss aims
MAX_REDRAWS = 4  # targeted redraws of integer/bool leaves before a full restart
MAX_PARTIAL = 3  # redraws of a stalled loss's elements that did not shrink, before a full restart
JITTER = 0.5  # relative spread of the step lengths of one step's elements
TRUST_GAIN = 1.5  # trust regained by an element whose step was kept
MIN_TRUST = 1 / 1024  # below this an element's step is not worth taking
# Interval domains (the analysis' `DOMAINS`) kept on the float leaves these ops read
# (`_leaf_boxes`); an open lower bound (Log's 0) moves up by OPEN_FLOOR, where results stay moderate.
OPEN_FLOOR = 1e-3
LEAF_DOMAINS = {
    op: (lo + OPEN_FLOOR if lo_open else lo, hi)
    for op in ("Asin", "Acos", "Sqrt", "Log", "Log2")
    for lo, hi, lo_open, *_ in DOMAINS[op][:1]
}
# Vulnerable ops by how narrow their domains are (`_Search.order`): the others come after.
NARROW_FIRST = {"Asin": 0, "Acos": 0, "Log": 1, "Log2": 1, "Sqrt": 2, "Pow": 3, "Reciprocal": 4, "Div": 4}
CAP_HALVINGS = 24  # `_Search.fitting_cap` looks as far as 2**-24 of the largest input
SCALE_PROBES = 8  # `_Search.scale_down` tries 1/4, 1/16, ... 1/4**8 of the cone's values
MAX_BOOST = 256.0  # the most a plateau lengthens steps
BOOL_MASTER = (0.25, 0.75)  # masters of False and True: one step of lr 0.5 flips them


@dataclass
class SearchResult:
    """Values found (or the last tried) and, when `ok`, the oracle outputs."""

    ok: bool
    values: dict[int, np.ndarray]
    oracle: dict[int, np.ndarray] = field(default_factory=dict)
    iterations: int = 0
    restarts: int = 0
    elapsed_ms: float = 0.0
    failed_op: str | None = None  # op still making NaN/Inf when the budget ran out

    def summary(self) -> dict:
        return {
            "ok": self.ok,
            "iterations": self.iterations,
            "restarts": self.restarts,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "failed_op": self.failed_op,
        }


def overflow_guard(ins: list[torch.Tensor], cap: float | None = None) -> tuple[list[torch.Tensor], float]:
    """Losses for an op whose result overflowed although no domain loss of its own is
    positive (float16 sums and products, convolutions, ...): each float input's
    magnitude at most sqrt(max) of its dtype, which keeps products and sums of two
    such values finite, and at most `cap`. Sums of many products overflow below any
    fixed bound, so the search passes a cap (`_Search.fitting_cap`, else half the
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


def demand_order(graph: GraphIR, first: list[int]) -> list[int]:
    """A topological order of `graph`'s instructions that runs each of `first` (in
    their order) as soon as what it reads is computed, and the rest after.

    Algorithm 3 stops at the first op with NaN/Inf in any topological order. This one
    makes a search step on a vulnerable op run its cone only: a heavy ConvTranspose
    that feeds no vulnerable op (only an output) waits until they all hold."""
    producer = {v: k for k, inst in enumerate(graph.insts) for v in inst.outputs}
    order: list[int] = []
    placed: set[int] = set()
    for root in [*first, *range(len(graph.insts))]:
        stack = [root]
        while stack:  # iterative post-order: graphs can be deeper than Python's recursion
            k = stack[-1]
            if k in placed:
                stack.pop()
                continue
            todo = [producer[v] for v in graph.insts[k].inputs if v in producer and producer[v] not in placed]
            if todo:
                stack.extend(reversed(todo))
            else:
                placed.add(k)
                order.append(k)
                stack.pop()
    return order


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


def _finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in `t`: its min and max are finite (both propagate NaN). One fused
    reduction with no temporary: far cheaper than isfinite(t).all() per op."""
    if not t.is_floating_point() or t.numel() == 0:
        return True
    lo, hi = torch.aminmax(t.detach())
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


def _tame(g: torch.Tensor) -> torch.Tensor:
    """A gradient Adam can digest: NaN -> 0, magnitudes capped so g * g stays finite
    (Sqrt at 0 has an infinite derivative)."""
    cap = math.sqrt(torch.finfo(g.dtype).max) / 16
    return torch.nan_to_num(g, nan=0.0, posinf=cap, neginf=-cap).clamp(-cap, cap)


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
        self.boost = 1.0  # step length factor on a plateau of the loss (`search_values`)
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


class _Ran(NamedTuple):
    """An instruction's last run (`_Search._run`): under which key, its outputs (value id,
    tensor, shadow), and whether they were free of NaN/Inf."""

    key: tuple
    outputs: list[tuple[int, torch.Tensor, torch.Tensor | None]]
    finite: bool


class _Search:
    """Mutable state of one search: masters of the leaves, the runner, the rng."""

    def __init__(self, graph: GraphIR, seed: int, init: tuple[float, float], proxy: bool) -> None:
        self.graph = graph
        self.rng = np.random.default_rng(seed)
        # Its own stream, so the initial values stay the same for every method.
        self.jitter = torch.Generator().manual_seed((seed * 0x9E3779B1 + 0x7F4A7C15) % 2**63)
        self.init = init
        self.proxy = proxy
        self.restart_init: tuple[float, float] | None = None  # float range of odd restarts
        self.restarts = 0
        self.leaves = (*graph.inputs, *graph.weights)
        start = {v: sample_tensor(self.rng, graph.types[v], *init) for v in self.leaves}
        self.runner = Runner(graph, start, proxy=proxy)
        self.masters: dict[int, torch.Tensor] = {}
        for v, a in start.items():
            self.masters[v] = self._master(v, a)
        # Vulnerable ops from floats to integers or booleans: out of their domain, their
        # output is still finite, so `first_invalid` checks their domain itself.
        self.silent = frozenset(
            k
            for k, inst in enumerate(graph.insts)
            if self.runner.spec(k).vulnerable
            and any(graph.types[v].dtype.is_float for v in inst.inputs)
            and not any(graph.types[v].dtype.is_float for v in inst.outputs)
        )
        self.boxes = _leaf_boxes(graph)
        # Leaves each instruction depends on (its cone), for targeted resampling.
        cone: dict[int, frozenset[int]] = {v: frozenset([v]) for v in self.leaves}
        self.cones: list[frozenset[int]] = []
        for inst in graph.insts:
            c = frozenset().union(*(cone[v] for v in inst.inputs))
            self.cones.append(c)
            for v in inst.outputs:
                cone[v] = c
        # Vulnerable ops with narrow domains first: Log2(x) before Reciprocal(x), so the step that
        # takes an integer x from 1 to -1 across 0 is no break of an earlier Reciprocal, which
        # the Log2 makes valid anyway.
        vulnerable = [k for k in range(len(graph.insts)) if self.runner.spec(k).vulnerable]
        vulnerable.sort(key=lambda k: NARROW_FIRST.get(graph.insts[k].op, len(NARROW_FIRST)))
        self.order = demand_order(graph, vulnerable)
        self.rank = {k: i for i, k in enumerate(self.order)}
        # Outputs of the last run per instruction, reused while no master of its cone was
        # written (`_key`): a 20 ms ConvTranspose beside the op being repaired need not run
        # again each step. Leaves are masters or made afresh from them, so the versions of
        # the masters say whether an instruction's inputs can have changed.
        self._cache: dict[int, _Ran] = {}
        self._cone_masters = [[self.masters[v] for v in sorted(c)] for c in self.cones]

    def _dtype(self, v: int) -> DType:
        return self.graph.types[v].dtype

    def _master(self, v: int, a: np.ndarray) -> torch.Tensor:
        dt = self._dtype(v)
        t = torch.from_numpy(np.array(a))
        if dt.is_float:
            t = t.float() if dt is DType.float16 else t.clone()
            return t.requires_grad_(True)
        if dt is DType.bool:
            t = torch.where(t, BOOL_MASTER[1], BOOL_MASTER[0]).double()
        else:
            t = t.double()
        return t.requires_grad_(self.proxy and v in self.runner.useful)

    def discrete(self, v: int) -> bool:
        return not self._dtype(v).is_float

    def trainable(self) -> list[torch.Tensor]:
        return [m for m in self.masters.values() if m.requires_grad]

    def trainable_leaves(self) -> list[int]:
        """The leaf of each `trainable()` master, in the same order."""
        return [v for v, m in self.masters.items() if m.requires_grad]

    def _real(self, v: int, m: torch.Tensor) -> torch.Tensor:
        """Leaf v's value in its GraphIR dtype, from its master (differentiable for floats)."""
        dt = self._dtype(v)
        if dt.is_float:
            return m.to(dt.torch)
        if dt is DType.bool:
            return m.detach() > 0.5
        info = torch.iinfo(dt.torch)
        return torch.floor(m.detach() + 0.5).clamp(info.min, info.max).to(dt.torch)

    def env(self) -> tuple[dict[int, torch.Tensor], Shadows]:
        """Leaf values, and for optimized integer and boolean leaves their shadows."""
        env, shadows = {}, {}
        for v, m in self.masters.items():
            env[v] = self._real(v, m)
            if self.discrete(v) and m.requires_grad and torch.is_grad_enabled():
                shadows[v] = num.attach(env[v], m)
        return env, shadows

    def numpy_values(self) -> dict[int, np.ndarray]:
        with torch.no_grad():
            return {v: self._real(v, m).detach().numpy().copy() for v, m in self.masters.items()}

    def _draw(self, v: int, draw: str) -> torch.Tensor:
        init = self.init
        if self.restart_init is not None and self.restarts % 2 == 1 and self._dtype(v).is_float:
            init = self.restart_init
        fresh = self._master(v, sample_tensor(self.rng, self.graph.types[v], *init, draw=draw))
        return fresh.detach()

    def resample(self, leaves=None, only_bad: bool = False) -> None:
        """A restart: new random values for `leaves` (all by default), integers and bools
        drawn wide, narrow and as one repeated value in turn (`sample_tensor`); with
        `only_bad`, replace just the non-finite elements of float masters."""
        self.restarts += not only_bad
        draw = DRAWS[(self.restarts - 1) % len(DRAWS)] if not only_bad else "wide"
        with torch.no_grad():
            for v, m in self.masters.items():
                if leaves is not None and v not in leaves:
                    continue
                if only_bad and not self._dtype(v).is_float:
                    continue
                fresh = self._draw(v, draw)
                m.copy_(torch.where(torch.isfinite(m), m, fresh) if only_bad else fresh)

    def resample_where(self, grads: list[torch.Tensor | None]) -> int:
        """Redraw the elements of the trainable leaves where `grads` (a loss's gradients, in
        `trainable()` order) are non-zero, and say how many; 0 (nothing redrawn) when that
        is every element of them: a full restart is no worse."""
        masks = {v: g != 0 for v, g in zip(self.trainable_leaves(), grads) if g is not None}
        if not masks or all(bool(m.all()) for m in masks.values()):
            return 0
        # Elementwise: a repeated value would not stay one value among the kept elements.
        draw = "narrow" if self.restarts % 2 == 1 else "wide"
        with torch.no_grad():
            for v, mask in masks.items():
                m = self.masters[v]
                m.copy_(torch.where(mask, self._draw(v, draw), m))
        return sum(int(m.sum()) for m in masks.values())

    def save(self) -> dict[int, torch.Tensor]:
        """The trainable masters' values (the others do not move in a step)."""
        return {v: m.detach().clone() for v, m in self.masters.items() if m.requires_grad}

    def clamp_masters(self) -> None:
        """Keep masters where their leaves stay finite: float16 masters within float16's
        range, integer masters within their dtype, bool masters near [0, 1], and float
        masters within the domains of the ops that read them directly (`_leaf_boxes`). A master
        already within is not written: a write makes the instructions of its cone run
        again (`_run`)."""
        with torch.no_grad():
            for v, m in self.masters.items():
                bounds = self._bounds(v)
                if bounds is None or not m.numel():
                    continue
                lo, hi = torch.aminmax(m)
                if float(lo) < bounds[0] or float(hi) > bounds[1]:
                    m.clamp_(*bounds)

    def _bounds(self, v: int) -> tuple[float, float] | None:
        """Where leaf v's master is kept (`clamp_masters`), or None when anywhere."""
        dt, m = self._dtype(v), self.masters[v]
        if dt.is_float:
            lo, hi = self.boxes.get(v, (-math.inf, math.inf))
            if dt is DType.float16:
                top = torch.finfo(torch.float16).max
                lo, hi = max(lo, -top), min(hi, top)
            return None if (lo, hi) == (-math.inf, math.inf) else (lo, hi)
        if not m.requires_grad:
            return None
        if dt is DType.bool:
            return -0.25, 1.25
        info = torch.iinfo(dt.torch)
        return max(info.min, -(2.0**52)), min(info.max, 2.0**52)

    def first_invalid(self) -> tuple[int | None, dict[int, torch.Tensor], Shadows]:
        """Run in topological order; stop at the first op with a NaN/Inf output, or with an
        input outside its domain where the output cannot show it (a float cast to an
        integer out of range is undefined, not NaN)."""
        env, shadows = self.env()
        for k in self.order:
            if not self._run(k, env, shadows):
                return k, env, shadows
            if k in self.silent and self._outside(k, env):
                return k, env, shadows
        return None, env, shadows

    def _key(self, k: int) -> tuple:
        """What instruction k's outputs depend on beyond the graph: the write counts of the
        masters of its cone (every write to a master, even of the same values, counts),
        the search precision, and whether autograd records."""
        versions = tuple(m._version for m in self._cone_masters[k])
        return (self.runner.widen, torch.is_grad_enabled(), versions)

    def _run(self, k: int, env: dict[int, torch.Tensor], shadows: Shadows) -> bool:
        """Instruction k's outputs into `env` (and `shadows`): the last run's while its key
        holds. Returns whether they are free of NaN/Inf (checked once per run). A reused
        output's autograd graph is the last run's, whose saved tensors are unchanged (no
        master of its cone was written), so the search keeps graphs for a second backward
        pass (retain_graph)."""
        key = self._key(k)
        hit = self._cache.get(k)
        if hit is not None and hit.key == key:
            for v, out, shadow in hit.outputs:
                env[v] = out
                if shadow is not None:
                    shadows[v] = shadow
            return hit.finite
        outs = self.runner.run_inst(k, env, shadows)
        kept = [(v, env[v], shadows.get(v)) for v in self.graph.insts[k].outputs]
        finite = all(_finite(o) for o in outs)
        self._cache[k] = _Ran(key, kept, finite)
        return finite

    def fitting_cap(self, k: int, env: dict[int, torch.Tensor]) -> float | None:
        """The cap for `overflow_guard` on op k, which overflowed: the largest of top / 2,
        top / 4, ... (top: its largest float input magnitude) such that op k computed in
        float64 on its inputs clamped to it, where the guard's losses lead, stays within
        half its dtype's range. A float16 sum of 32,768 products of values in [1, 9] gets
        its cap of 9 / 16 at once, rather than by four halvings of four objectives. None
        where clamping says nothing: the result computed wide is within range already (an
        intermediate overflowed), or is not at any cap."""
        inst = self.graph.insts[k]
        xs = [env[v].detach().double() if env[v].is_floating_point() else env[v].detach() for v in inst.inputs]
        floats = [x for x in xs if x.is_floating_point() and x.numel()]
        if not floats:
            return None
        top = max(float(x.abs().max()) for x in floats)
        fn, attrs = self.runner.spec(k).forward, self.runner.attrs(k)

        def fits(c: float) -> bool:
            try:
                with torch.no_grad():
                    out = fn(attrs, *(x.clamp(-c, c) if x.is_floating_point() else x for x in xs))
            except Exception:  # an op that refuses float64 inputs: no cap from it, halving then
                return False
            outs = out if isinstance(out, tuple | list) else [out]
            for v, o in zip(inst.outputs, outs):
                if self._dtype(v).is_float and o.is_floating_point() and o.numel():
                    m = float(o.abs().max())
                    if not m <= torch.finfo(self._dtype(v).torch).max / 2:  # (False for NaN)
                        return False
            return True

        if not math.isfinite(top) or top == 0 or fits(top) or not fits(top / 2**CAP_HALVINGS):
            return None  # (an op that rounds to its own dtype inside overflows at any cap)
        lo, hi = 0, CAP_HALVINGS  # fits(top / 2**lo) is False, fits(top / 2**hi) True
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(top / 2**mid) else (mid, hi)
        return top / 2**hi

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

    def _scale(self, start: dict[int, torch.Tensor], factor: float) -> None:
        with torch.no_grad():
            for v, a in start.items():
                self.masters[v].copy_(a * factor)
        self.clamp_masters()

    def _violation(self, k: int, env: dict[int, torch.Tensor]) -> tuple[int, float]:
        """How far op k is from valid, smaller being nearer: its first positive domain loss
        (a later one is nearer), or where all hold (an overflow) how many of its float
        outputs' elements are NaN/Inf."""
        losses = self._losses(k, env)
        for i, x in enumerate(losses):
            if float(x) > 0:
                return -i, float(x)
        outs = [env[v].detach() for v in self.graph.insts[k].outputs if env[v].is_floating_point()]
        return -len(losses), float(sum(int((~torch.isfinite(o)).sum()) for o in outs))

    def _outside(self, k: int, env: dict[int, torch.Tensor]) -> bool:
        return any(bool(x > 0) for x in self._losses(k, env))

    def _losses(self, k: int, env: dict[int, torch.Tensor]) -> list[torch.Tensor]:
        """Op k's domain losses on its inputs in `env`, without autograd."""
        with torch.no_grad():
            ins = [env[v].detach() for v in self.graph.insts[k].inputs]
            return self.runner.spec(k).domain(self.runner.attrs(k), *ins)


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
    tries a common scale of the leaves of its cone (`_Search.scale_down`, each run
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
    the elements the target would push towards its boundary (`_step_grads`), as do
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
    (`redraw_own`), keeping the rest; each full restart flips the side a
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
    deadline = t0 + budget_ms / 1000
    iters = 0
    target: int | None = None
    pending: _Step | None = None  # the last step, not yet judged
    redraws = 0  # targeted redraws since the last full restart
    # Redraws of a stalled loss's elements since the last full restart that redrew no fewer
    # than the one before (`strikes`), and how many the last one redrew.
    strikes, last_partial = 0, math.inf
    opt = MaskedAdam(s.trainable(), lr, s.jitter)
    steps, best, stall = 0, math.inf, 0
    guards: set[int] = set()  # ops before the target that a step on it broke
    aim = 0  # the target's loss being followed
    caps: dict[int, float] = {}  # the overflow guard's cap per op, while the target stays
    scaled: set[tuple[int, int]] = set()  # (target, restart) pairs `scale_down` has tried

    def give_up(bad: int) -> None:
        """Nothing more to follow on `bad`: redraw what feeds it, or everything."""
        nonlocal target, pending, redraws
        discrete = {v for v in s.cones[bad] if s.discrete(v)}
        if discrete and redraws < MAX_REDRAWS:
            redraws += 1
            s.resample(discrete)
        else:
            redraws = 0
            s.resample()
        target, pending = None, None

    def redraw_own(grads: list[torch.Tensor | None] | None) -> bool:
        """The target's loss stopped improving: redraw only the elements it still depends
        on (an element caught in a local minimum of its own, such as Sin(-1 / Cos(x)) at
        x = 0, among thousands that are valid), for as long as each such redraw redraws
        fewer elements than the last (up to MAX_PARTIAL strikes). False when it does not."""
        nonlocal target, pending, strikes, last_partial
        n = s.resample_where(grads) if grads is not None and strikes < MAX_PARTIAL else 0
        if not n:
            strikes, last_partial = 0, math.inf  # a full restart follows
            return False
        strikes += n >= last_partial
        last_partial = n
        target, pending = None, None
        return True

    while True:
        iters += 1
        with torch.set_grad_enabled(method == "gradient"):
            bad, env, shadows = s.first_invalid()
        if bad is None and s.runner.widen:  # valid at search precision: check at the graph's own
            s.runner.widen, pending = False, None
            continue
        if bad is None:
            return _result(s, True, iters, t0, None, env)
        out_of_time = time.perf_counter() >= deadline or (max_iters is not None and iters >= max_iters)
        if method == "none" or out_of_time:
            return _result(s, False, iters, t0, graph.insts[bad].op)
        if method == "sampling":
            s.resample()
            continue
        ins = s.runner.differentiable_inputs(bad, env, shadows)
        side = 1.0 if s.restarts % 2 == 0 else -1.0  # where magnitudes leave 0: flips per restart
        with num.zero_side(side):
            losses = s.runner.spec(bad).domain(s.runner.attrs(bad), *ins)
        which = next((i for i, x in enumerate(losses) if bool(x > 0)), len(losses))
        loss = losses[which] if which < len(losses) else None
        terms = None  # the loss per element: which elements a step made worse
        if loss is not None:
            # Aim a margin inside the domain: elements that land just inside the boundary
            # are pushed back out by the next objective's first step.
            with num.zero_side(side), num.margin(TARGET_MARGIN), num.per_element():
                terms = s.runner.spec(bad).domain(s.runner.attrs(bad), *ins)[which]
            loss = terms.sum()
        if loss is None:  # nothing in the op's domain explains it: an overflow
            # Each op its own cap: an op a step on the target broke must not pass its cap on.
            mine = caps.get(bad) if bad == target else None
            over, caps[bad] = overflow_guard(ins, mine if mine is not None else s.fitting_cap(bad, env))
            loss = sum(over) if over and bool(sum(over) > 0) else None
            if loss is None and bad == target:  # the cap is met: a new objective
                over, caps[bad] = overflow_guard(ins, s.fitting_cap(bad, env))
                loss = sum(over) if over and bool(sum(over) > 0) else None
                if pending is not None and bad == pending.target:
                    pending.loss = math.inf
        guard = None
        if loss is not None:
            # The target's own losses before `which` hold now; they guard it too.
            own = which if which < len(losses) else 0
            with num.zero_side(side):
                guard = _guard_loss(s, guards if bad == target else set(), env, shadows, (bad, own))
        value = math.inf if loss is None else float(loss.detach())
        if pending is not None:
            broke = s.rank[bad] < s.rank[pending.target]
            # Worse: an earlier loss of the target violated again, or the same one grown.
            worse = bad == pending.target and (which, -value) < (pending.which, -pending.loss)
            culprit = loss
            if worse and which == pending.which and terms is not None:  # (so pending.terms is too)
                # Only the elements that grew blame the leaves they depend on: in
                # Log2(Sin(x / w)) over 2,000 elements, one that overshot takes back its own
                # move, not the move of every other.
                culprit = torch.where(terms.detach() > pending.terms, terms, 0).sum()
            if broke or worse:
                opt.boost = 1.0  # the plateau ended the wrong way
                if broke and s.runner.spec(bad).vulnerable:
                    guards.add(bad)  # it guards the target from now on
                # Move back the elements the violated loss depends on, trusting them half
                # as far from now on; the others keep their move. A target whose gradient
                # through the broken op is huge (Acos' slope at +-1) breaks it at any step
                # length of that op's leaves, while other leaves can fix the target alone.
                if _back_off(s, opt, pending, culprit):
                    continue
                # Nothing of the step is left: take it again as far as each element is
                # trusted now, without Adam's momentum (a first Adam step goes along
                # sign(gradient), which a short enough step descends), unless a new guard
                # changes the gradient.
                if not opt.trusted(pending.grads):
                    if not redraw_own(pending.grads):
                        give_up(pending.target)
                    continue
                opt.restart()
                if broke and bad in guards:
                    pending = None
                    continue
                _take(s, opt, pending)
                continue
            opt.reward(pending.moved)
            # The same loss, to the bit, after a kept step: a plateau its proxies lead
            # across (Log2 of Floor(Acos(Sign(x))) is the same for every x > 0); the next
            # step goes twice as far.
            opt.boost = min(opt.boost * 2, MAX_BOOST) if bad == pending.target and value == pending.loss else 1.0
            pending = None
        if loss is None or not loss.requires_grad:
            give_up(bad)  # no loss explains the NaN/Inf, or no value upstream can move
            continue
        if target != bad and (bad, s.restarts) not in scaled:  # a new target: one common scale first
            scaled.add((bad, s.restarts))
            _, runs = s.scale_down(bad, env, (max_iters or math.inf) - iters, deadline)
            if runs:  # the leaves were written (if only to undo): run again from them
                iters += runs
                target, pending = None, None
                continue
        if target != bad:  # a new target resets Adam, its step control and the guards
            target, opt, steps, best, stall = bad, MaskedAdam(s.trainable(), lr, s.jitter), 0, math.inf, 0
            guards, aim = set(), which
        elif which != aim:  # another of its losses: a new objective, without the last one's momentum
            opt, aim = MaskedAdam(s.trainable(), lr, s.jitter), which
        steps += 1
        stall = 0 if value < best * (1 - 1e-3) else stall + 1
        best = min(best, value)
        if stall > patience or steps > max_steps:
            if not redraw_own(list(torch.autograd.grad(loss, s.trainable(), retain_graph=True, allow_unused=True))):
                redraws = 0
                s.resample()
                target = None
            continue
        grads = _step_grads(s.trainable(), loss, guard)
        if not any(g is not None and bool(g.any()) for g in grads):
            give_up(bad)  # zero gradient: nothing to follow
            continue
        pending = _Step(bad, which, value, s.save(), grads, terms=None if terms is None else terms.detach())
        _take(s, opt, pending)


def _take(s: _Search, opt: MaskedAdam, step: _Step) -> None:
    """Take `step` from its start: one Adam step along its gradients."""
    opt.step(step.grads)
    s.clamp_masters()
    if not all(_finite(p) for p, g in zip(s.trainable(), step.grads) if g is not None):  # what moved
        s.resample(only_bad=True)
    starts = [step.start[v] for v in s.trainable_leaves()]
    step.moved = [None if g is None else p.detach() != a for p, a, g in zip(s.trainable(), starts, step.grads)]


def _back_off(s: _Search, opt: MaskedAdam, step: _Step, culprit: torch.Tensor | None) -> bool:
    """After `step` made `culprit` (the loss now violated) positive: move the moved
    elements it depends on back to where the step started and halve their trust.
    With no gradient to tell them (NaN, no loss), all of them. Returns whether any
    element is still moved."""
    params = s.trainable()
    grads: list = [None] * len(params)
    if culprit is not None and culprit.requires_grad:
        gs = torch.autograd.grad(culprit, params, retain_graph=True, allow_unused=True)
        grads = [None if g is None else _tame(g) for g in gs]
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


def _guard_loss(s: _Search, guards: set[int], env, shadows, own: tuple[int, int]) -> torch.Tensor | None:
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


def _step_grads(params: list[torch.Tensor], loss: torch.Tensor, guard: torch.Tensor | None) -> list:
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
        # Kept: parts of the graph are reused by the next run (`_Search._run`).
        gs = torch.autograd.grad(x, params, retain_graph=True, allow_unused=True)
        return [None if g is None else _tame(g) for g in gs]

    active = guard is not None and guard.requires_grad and bool(guard.detach() > 0)
    g_t = grad(loss)
    if not active:
        return g_t
    held = [t if g is None or t is None else torch.where(t * g < 0, 0, t) for t, g in zip(g_t, grad(guard))]
    return held if any(h is not None and bool(h.any()) for h in held) else g_t


def _result(
    s: _Search, ok: bool, iters: int, t0: float, failed: str | None, env: dict[int, torch.Tensor] | None = None
) -> SearchResult:
    values = s.numpy_values()
    oracle: dict[int, np.ndarray] = {}
    if ok and env is not None:
        # The pass that found every op valid computed the outputs: proxies change
        # gradients only, so these are the plain functions' values (tested).
        oracle = {v: env[v].detach().numpy().copy() for v in s.graph.outputs}
    return SearchResult(ok, values, oracle, iters, s.restarts, (time.perf_counter() - t0) * 1000, failed)
