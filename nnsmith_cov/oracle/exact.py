"""A higher-precision reference for a graph: its values re-run in float64, and what each
discontinuous op gives when its input moves within rounding of where PyTorch computed it.

`precision.py` judges a mismatch with it. Every op runs in float64 where its forward accepts
that; one that does not runs at its own dtype on the float64 inputs rounded to it, its outputs
widened again (named in `Exact.own_dtype`); one that fails even so leaves no exact reference.

It runs in the parent, not in a worker request: the parent has torch and the op specs loaded,
these are PyTorch's own forwards that just ran at the graph's dtypes in the worker on the same
values (no compiler under test is involved), and it runs only for tests that mismatched, on one
thread, under a time budget checked between steps. An exception here is caught and reported as
"no exact reference"; only a crash of PyTorch itself would reach the campaign.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.materialize.torch_module import GraphModule, input_name, output_name, to_tensor, weight_name
from nnsmith_cov.ops import op_by_name

# Float ops whose output jumps somewhere (FakeQuantize rounds, Shrink and ThresholdedRelu step at
# their threshold). Every op that takes a float and returns an integer or a bool (comparisons,
# ArgMax/ArgMin, TopK's indices, casts to integers, IsNaN...) jumps as well.
JUMPING = frozenset(
    {"Round", "Floor", "Ceil", "Sign", "FakeQuantize", "FakeQuantizePerChannel", "Shrink", "ThresholdedRelu"}
)

# How far an op's input may plausibly sit from PyTorch's value in another compiler, in multiples
# of the rounding PyTorch's own run shows there (or of the dtype's epsilon at that magnitude).
ROUNDING_SLACK = 4.0
# Perturbations per discontinuous op: every input down; every input up; the first input against
# the others, each way (comparisons of near-equal values); a ramp along each axis, each way (ties
# go to the first or the last index); signs by one bit of each element's coordinate along one
# axis, either polarity (two tied elements along an axis move apart in some trial: ArgMax, TopK);
# then a few random signs.
AXIS_PATTERNS = 12
RANDOM_TRIALS = 2
# Seconds for one graph's re-run and flips, checked between steps: past it the flips tried so far
# decide (the verdict says so).
BUDGET_S = 2.0


class NoExactReference(Exception):
    """The graph cannot be re-run in float64, not even with the failing op at its own dtype."""


@dataclass
class Flip:
    """The graph's outputs after one discontinuous op's input moved within rounding."""

    op: str  # "Round#3": op and instruction index
    jumps: int  # elements of the op's outputs that jumped
    outputs: dict[str, np.ndarray]


@dataclass
class Exact:
    """The float64 re-run of a graph."""

    outputs: dict[str, np.ndarray]  # o<v>: float64 for float outputs, the graph's dtype otherwise
    own_dtype: list[str] = field(default_factory=list)  # ops with no float64 kernel, run at their dtype
    flips: list[Flip] = field(default_factory=list)  # only perturbations that changed their op's output
    jumping: list[str] = field(default_factory=list)  # the discontinuous ops that were tried
    cut: bool = False  # the time budget ended the trials early


def is_jumping(graph: GraphIR, inst: Inst) -> bool:
    """Whether `inst` is discontinuous in a float input."""
    if not any(graph.types[v].dtype.is_float for v in inst.inputs):
        return False
    return inst.op in JUMPING or any(not graph.types[v].dtype.is_float for v in inst.outputs)


class _Runner:
    """Runs instructions of one graph on value environments, at float64 or at the graph's dtypes."""

    def __init__(self, graph: GraphIR, leaves: Mapping[int, np.ndarray]) -> None:
        self.graph = graph
        self.module = GraphModule(graph, op_by_name, {v: leaves[v] for v in graph.weights})
        self.own_dtype: list[str] = []

    def label(self, k: int) -> str:
        return f"{self.graph.insts[k].op}#{k}"

    def step(self, k: int, env: dict[int, torch.Tensor], wide: bool) -> None:
        """Instruction k on `env` (new entries only: tensors already there are never changed)."""
        graph, inst = self.graph, self.graph.insts[k]
        if not wide:
            self.module.run_inst(k, env)
            return
        try:
            outs = self.module.run_inst(k, dict(env))
        except Exception:  # no float64 kernel, or a dtype check: widen only what is around this op
            narrow = {v: env[v].to(graph.types[v].dtype.torch) for v in inst.inputs}
            try:
                outs = self.module.run_inst(k, dict(env) | narrow)
            except Exception as e:
                raise NoExactReference(f"{self.label(k)} failed in float64 and at its own dtype: {e}") from e
            if self.label(k) not in self.own_dtype:
                self.own_dtype.append(self.label(k))
        for v, t in zip(inst.outputs, outs):
            dt = graph.types[v].dtype
            env[v] = t.to(torch.float64 if dt.is_float else dt.torch)

    def run(self, env: dict[int, torch.Tensor], wide: bool, start: int = 0) -> dict[int, torch.Tensor]:
        for k in range(start, len(self.graph.insts)):
            self.step(k, env, wide)
        return env

    def outputs(self, env: Mapping[int, torch.Tensor]) -> dict[str, np.ndarray]:
        return {output_name(v): env[v].numpy() for v in self.graph.outputs}


def leaf_arrays(graph: GraphIR, values: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Inputs and weights by value id, from their wire names (i<v>, w<v>)."""
    named = {v: input_name(v) for v in graph.inputs} | {v: weight_name(v) for v in graph.weights}
    missing = [name for name in named.values() if name not in values]
    if missing:
        raise NoExactReference(f"no values for {', '.join(missing)}")
    return {v: np.asarray(values[name]) for v, name in named.items()}


def _differ(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements where a and b differ (NaN equal to NaN)."""
    same = a == b
    if a.is_floating_point():
        same |= a.isnan() & b.isnan()
    return int((~same).sum())


def _delta(graph: GraphIR, v: int, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """How far value v may move under rounding: its float64 drift in PyTorch's run or the dtype's
    epsilon at the element's magnitude, times the slack. (Near zero, after a cancellation, only
    the drift speaks: a floor from the tensor's typical magnitude moved large elements by more
    than a Round's half step.)"""
    eps = float(np.finfo(graph.types[v].dtype.numpy).eps)
    mag = high.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    drift = (low.to(torch.float64) - high).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    return ROUNDING_SLACK * torch.maximum(drift, eps * mag)


def _keep_jumps(
    graph: GraphIR, inst: Inst, env: dict[int, torch.Tensor], high: Mapping[int, torch.Tensor], delta: torch.Tensor
) -> None:
    """Undo in `env` the continuous drift the perturbation caused in `inst`'s outputs, keeping
    only its jumps: a flip is then told apart (and deduplicated) by the jumps alone, and the
    rest of the graph runs again only for a new pattern of them."""
    integral = any(not graph.types[o].dtype.is_float for o in inst.outputs)
    for o in inst.outputs:
        if not graph.types[o].dtype.is_float:
            continue
        if integral:  # TopK's values beside its indices: the indices carry the jump
            env[o] = high[o]
        elif env[o].shape == high[o].shape == delta.shape:  # an element-wise jump (Round, Shrink...)
            env[o] = torch.where((env[o] - high[o]).abs() > 2 * delta, env[o], high[o])


def _patterns(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """(axis, bit) pairs: an element moves up in a pattern's trial when that bit of its
    coordinate along that axis is set; at most AXIS_PATTERNS, low bits of every axis first."""
    bits = [(axis, bit) for axis, n in enumerate(shape) for bit in range(max(int(n) - 1, 0).bit_length())]
    return sorted(bits, key=lambda ab: (ab[1], ab[0]))[:AXIS_PATTERNS]


def _trials(shape: tuple[int, ...]) -> int:
    return 4 + 2 * len(shape) + 2 * len(_patterns(shape)) + RANDOM_TRIALS


def _signs(
    trial: int, j: int, shape: tuple[int, ...], patterns: list[tuple[int, int]], rng: np.random.Generator
) -> torch.Tensor:
    """The direction each element of input j moves in perturbation number `trial`."""
    if trial < 4:
        up = trial % 2 == 1 if trial < 2 else (j == 0) == (trial == 3)
        return torch.full(shape, 1.0 if up else -1.0, dtype=torch.float64)
    trial -= 4
    if trial < 2 * len(shape):  # a ramp along one axis, each way: ties resolve to the first or the last
        axis, n = trial // 2, shape[trial // 2]
        ramp = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
        ramp = ramp.reshape([-1 if a == axis else 1 for a in range(len(shape))])
        return torch.from_numpy(np.broadcast_to(ramp if trial % 2 else -ramp, shape).copy())
    trial -= 2 * len(shape)
    if trial < 2 * len(patterns):
        axis, bit = patterns[trial // 2]
        if axis < len(shape):
            coord = np.arange(shape[axis]).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        else:  # an input of lower rank than the first: its flat index stands in
            coord = np.arange(int(np.prod(shape))).reshape(shape)
        up = np.broadcast_to((coord >> bit) & 1 == trial % 2, shape)
        return torch.from_numpy(np.where(up, 1.0, -1.0))
    return torch.from_numpy(rng.choice([-1.0, 1.0], size=shape))


_threads_lock = threading.Lock()
_threads_users = [0, 0]  # runs under `_one_thread` now, and the thread count to restore after them


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run PyTorch on one thread meanwhile: these tensors are small, and on a busy machine its
    thread pool waiting for cores made element-wise ops 25x slower (as the worker, which runs
    on one thread)."""
    with _threads_lock:
        if _threads_users[0] == 0:
            _threads_users[1] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads_users[0] += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_users[0] -= 1
            if _threads_users[0] == 0:
                torch.set_num_threads(_threads_users[1])


def exact_reference(
    graph: GraphIR, values: Mapping[str, np.ndarray], seed: int = 0, budget_s: float = BUDGET_S
) -> Exact:
    """The graph re-run in float64 from `values` (i<v>, w<v>), and the flips of its discontinuous
    ops; raises NoExactReference when some op runs neither in float64 nor at its own dtype."""
    deadline = time.perf_counter() + budget_s
    leaves = leaf_arrays(graph, values)
    runner = _Runner(graph, leaves)
    with torch.no_grad(), _one_thread():
        base = {v: to_tensor(a) for v, a in leaves.items()}
        try:
            low = runner.run(dict(base), wide=False)
        except Exception as e:  # it ran in the worker; here it may not (memory, threads)
            raise NoExactReference(f"PyTorch's own run failed in the parent: {type(e).__name__}: {e}") from e
        wide0 = {v: t.to(torch.float64) if t.is_floating_point() else t for v, t in base.items()}
        high = runner.run(wide0, wide=True)
        exact = Exact(runner.outputs(high))
        rng = np.random.default_rng(seed)
        for k, inst in enumerate(graph.insts):
            if is_jumping(graph, inst):
                exact.jumping.append(runner.label(k))
                if not _flip(runner, k, low, high, rng, deadline, exact):
                    exact.cut = True
                    break
    exact.own_dtype = runner.own_dtype
    return exact


def _flip(
    runner: _Runner,
    k: int,
    low: Mapping[int, torch.Tensor],
    high: dict[int, torch.Tensor],
    rng: np.random.Generator,
    deadline: float,
    exact: Exact,
) -> bool:
    """Move discontinuous instruction k's float inputs within rounding, each way in turn, and add
    to `exact.flips` the outputs of every new pattern of jumps; False when the deadline cut it."""
    graph, inst = runner.graph, runner.graph.insts[k]
    floats = [v for v in dict.fromkeys(inst.inputs) if graph.types[v].dtype.is_float]
    deltas = {v: _delta(graph, v, low[v], high[v]) for v in floats}
    seen = {tuple(high[o].numpy().tobytes() for o in inst.outputs)}  # bytes: NaNs compare equal
    patterns = _patterns(tuple(high[floats[0]].shape))
    for trial in range(_trials(tuple(high[floats[0]].shape))):
        if time.perf_counter() > deadline:
            return False
        env = dict(high)
        for j, v in enumerate(floats):
            env[v] = high[v] + _signs(trial, j, tuple(high[v].shape), patterns, rng) * deltas[v]
        try:
            runner.step(k, env, wide=True)
            _keep_jumps(graph, inst, env, high, deltas[floats[0]])
            key = tuple(env[o].numpy().tobytes() for o in inst.outputs)
            if key in seen:
                continue  # no element within rounding of a jump, or the same jumps as before
            seen.add(key)
            runner.run(env, wide=True, start=k + 1)
        except NoExactReference:
            continue  # a moved value some later op refuses: this move tells nothing
        jumps = sum(_differ(env[o], high[o]) for o in inst.outputs)
        exact.flips.append(Flip(runner.label(k), jumps, runner.outputs(env)))
    return True
