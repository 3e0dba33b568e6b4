"""The mutable state of one value search: the leaves' masters, how the graph runs on them.

`SearchState` holds one float *master* per leaf (see `search.gradient`), the
runner that executes the graph on the values made from them, the seeded rng of
every draw, and what the masters may not leave (`clamp_masters`). It runs the
graph in its repair order up to the first invalid op (`first_invalid`), reusing
an instruction's last outputs while no master of its cone was written. What the
search does with that (steps, restarts, a common scale) is `search.gradient`'s.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import NamedTuple

import numpy as np
import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.search.demand import demand_order
from nnsmith_cov.search.relaxed import Runner, Shadows
from nnsmith_cov.search.sampling import sample_tensor

CAP_HALVINGS = 24  # `SearchState.fitting_cap` looks as far as 2**-24 of the largest input
BOOL_MASTER = (0.25, 0.75)  # masters of False and True: one step of lr 0.5 flips them


def finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in `t`: its min and max are finite (both propagate NaN). One fused
    reduction with no temporary: far cheaper than isfinite(t).all() per op."""
    if not t.is_floating_point() or t.numel() == 0:
        return True
    lo, hi = torch.aminmax(t.detach())
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


class _Ran(NamedTuple):
    """An instruction's last run (`SearchState._run`): under which key, its outputs (value id,
    tensor, shadow), and whether they were free of NaN/Inf."""

    key: tuple
    outputs: list[tuple[int, torch.Tensor, torch.Tensor | None]]
    finite: bool


class SearchState:
    """Mutable state of one search: masters of the leaves, the runner, the rng. Where float
    masters are kept and which vulnerable ops run first are the search's to say (`boxes`,
    `narrow`); `search.gradient._Search` adds its decisions to this class."""

    def __init__(
        self,
        graph: GraphIR,
        seed: int,
        init: tuple[float, float],
        proxy: bool,
        boxes: dict[int, tuple[float, float]],
        narrow: Mapping[str, int],
    ) -> None:
        """`boxes`: the intervals float leaves are kept in (`clamp_masters`); `narrow`: the
        rank of each vulnerable op by how narrow its domain is (lowest is repaired first)."""
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
        self.boxes = boxes
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
        vulnerable.sort(key=lambda k: narrow.get(graph.insts[k].op, len(narrow)))
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

    def redraw(self, draw: str, leaves: Collection[int] | None = None) -> None:
        """New random values for `leaves` (all by default), integers and bools drawn as
        `draw` says (`sample_tensor`). Counting restarts is the search's."""
        with torch.no_grad():
            for v, m in self.masters.items():
                if leaves is not None and v not in leaves:
                    continue
                m.copy_(self._draw(v, draw))

    def redraw_non_finite(self) -> None:
        """Replace just the NaN/Inf elements of float masters with wide draws."""
        with torch.no_grad():
            for v, m in self.masters.items():
                if not self._dtype(v).is_float:
                    continue
                fresh = self._draw(v, "wide")
                m.copy_(torch.where(torch.isfinite(m), m, fresh))

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
        masters within the domains of the ops that read them directly (`boxes`). A master
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
        clean = all(finite(o) for o in outs)
        self._cache[k] = _Ran(key, kept, clean)
        return clean

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
