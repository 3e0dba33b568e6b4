"""Value search (Algorithm 3): inputs and weights that keep every operator free of NaN/Inf.

Three methods share one entry point so the ablation compares like with like:
`gradient` (Adam on the first failing operator's domain loss, with or without
proxy derivatives), `sampling` (fresh random values until valid) and `none`
(one draw, checked). Every method starts from the same seeded initial values.
The result carries PyTorch's outputs: the oracle later stages compare with.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.torch_module import GraphModule, input_tensors, to_tensor
from nnsmith_cov.ops import op_by_name
from nnsmith_cov.search.sampling import sample_tensor

METHODS = ("gradient", "sampling", "none")
DEFAULT_INIT = (-1.0, 1.0)  # where the gradient search starts
SAMPLING_INIT = (1.0, 9.0)  # the paper's sampling baseline


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


def overflow_guard(ins: list[torch.Tensor]) -> list[torch.Tensor]:
    """Losses for ops with no domain of their own whose result overflowed (float16 sums and
    products, say): each float input's magnitude at most sqrt(max) of its dtype, which keeps
    products and sums of two such values finite."""
    return [num.le0(x.abs() - math.sqrt(torch.finfo(x.dtype).max)) for x in ins if x.is_floating_point()]


def _finite(t: torch.Tensor) -> bool:
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


class _Search:
    """Mutable state of one search: leaves, the module, the rng."""

    def __init__(self, graph: GraphIR, seed: int, init: tuple[float, float], proxy: bool) -> None:
        self.graph = graph
        self.rng = np.random.default_rng(seed)
        self.init = init
        self.restarts = 0
        start = {v: sample_tensor(self.rng, graph.types[v], *init) for v in (*graph.inputs, *graph.weights)}
        self.module = GraphModule(graph, op_by_name, start, proxy=proxy)
        # float16 values are optimized through float32 masters: Adam's steps
        # and epsilon underflow in half precision.
        self.leaves = {v: to_tensor(a) for v, a in start.items()}
        for v, t in self.leaves.items():
            if t.dtype == torch.float16:
                self.leaves[v] = t = t.float()
            t.requires_grad_(t.is_floating_point())

    def float_leaves(self) -> list[torch.Tensor]:
        return [t for t in self.leaves.values() if t.is_floating_point()]

    def env(self) -> dict[int, torch.Tensor]:
        """Leaf values in their GraphIR dtypes (masters cast back)."""
        return {v: t.to(self.graph.types[v].dtype.torch) for v, t in self.leaves.items()}

    def numpy_values(self) -> dict[int, np.ndarray]:
        return {v: t.detach().numpy().copy() for v, t in self.env().items()}

    def resample(self, only_bad: bool = False) -> None:
        """A restart: new random values for every leaf (integers and bools too,
        which are sampled, never optimized), every other one drawn narrow; with
        `only_bad`, replace just the non-finite elements of float leaves."""
        self.restarts += not only_bad
        narrow = not only_bad and self.restarts % 2 == 0
        with torch.no_grad():
            for v, t in self.leaves.items():
                if only_bad and not t.is_floating_point():
                    continue
                fresh = sample_tensor(self.rng, self.graph.types[v], *self.init, narrow=narrow)
                fresh = torch.from_numpy(fresh).to(t.dtype)
                t.copy_(torch.where(torch.isfinite(t), t, fresh) if only_bad else fresh)

    def first_invalid(self) -> tuple[int | None, dict[int, torch.Tensor]]:
        """Run in topological order; stop at the first op with a NaN/Inf output."""
        env = self.env()
        for k in range(len(self.graph.insts)):
            if not all(_finite(o) for o in self.module.run_inst(k, env)):
                return k, env
        return None, env


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

    Beyond Algorithm 3's restarts on a zero gradient, the gradient method also
    restarts when one target's loss has not improved for `patience` steps or
    after `max_steps` steps on it: losses such as Sqrt(1 / x) for negative x
    slope towards the pole, never across it, so following them longer does
    not help.
    """
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r} (choose from {', '.join(METHODS)})")
    if init is None:
        init = SAMPLING_INIT if method == "sampling" else DEFAULT_INIT
    t0 = time.perf_counter()
    s = _Search(graph, seed, init, proxy=proxy and method == "gradient")
    deadline = t0 + budget_ms / 1000
    iters = 0
    target: int | None = None
    while True:
        iters += 1
        with torch.set_grad_enabled(method == "gradient"):
            bad, env = s.first_invalid()
        if bad is None:
            return _result(s, True, iters, t0, None)
        out_of_time = time.perf_counter() >= deadline or (max_iters is not None and iters >= max_iters)
        if method == "none" or out_of_time:
            return _result(s, False, iters, t0, graph.insts[bad].op)
        if method == "sampling":
            s.resample()
            continue
        ins = [env[v] for v in graph.insts[bad].inputs]
        losses = s.module.spec(bad).domain(s.module.attrs(bad), *ins) + overflow_guard(ins)
        loss = next((x for x in losses if bool(x > 0)), None)
        if loss is None or not loss.requires_grad:
            # No loss explains the NaN/Inf, or no float value upstream can move: start over.
            s.resample()
            target = None
            continue
        if target != bad:  # a new target resets Adam's learning rate
            target, opt, steps, best, stall = bad, torch.optim.Adam(s.float_leaves(), lr=lr), 0, math.inf, 0
        value = float(loss.detach())
        steps += 1
        stall = 0 if value < best * (1 - 1e-3) else stall + 1
        best = min(best, value)
        if stall > patience or steps > max_steps:
            s.resample()
            target = None
            continue
        opt.zero_grad()
        loss.backward()
        grads = [t.grad for t in s.float_leaves() if t.grad is not None]
        if not grads or all(not bool(g.any()) for g in grads):
            s.resample()  # zero gradient: nothing to follow
            target = None
            continue
        opt.step()
        if not all(_finite(t) for t in s.float_leaves()):
            s.resample(only_bad=True)


def _result(s: _Search, ok: bool, iters: int, t0: float, failed: str | None) -> SearchResult:
    values = s.numpy_values()
    oracle: dict[int, np.ndarray] = {}
    if ok:
        # The oracle comes from the plain module (true, not proxy, functions).
        module = GraphModule(s.graph, op_by_name, values)
        with torch.no_grad():
            env = module.run(*input_tensors(s.graph, values))
        if not all(_finite(t) for t in env.values()):
            raise AssertionError("values valid under proxy execution but not under the plain module")
        oracle = {v: env[v].numpy().copy() for v in s.graph.outputs}
    return SearchResult(ok, values, oracle, iters, s.restarts, (time.perf_counter() - t0) * 1000, failed)
