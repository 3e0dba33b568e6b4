#!/usr/bin/env python3
"""Local worker processes against Ray actors (`fuzz --cluster ray`): tests/s with 1 and 2
workers, and what the driver (the campaign process) spends per test, from which how many
workers one driver core can keep busy.

Each arm runs the campaign loop in this process (`Fuzzer.run_workers`, as `nnsmith-cov fuzz`
does) on ONNX Runtime, without a collector, into a throw-away folder. Worker start-up and a
few warm-up tests are left out of the measured window; the driver's CPU is this process's
own (resource.getrusage(RUSAGE_SELF): the workers and actors are other processes), so it is
what one driver core pays per test. Generation runs in the workers (`campaign.proposal`); the
driver's share of it (building the proposal: the parent's mutation or growth calls and the
configs as JSON) is reported apart, as the driver threads' CPU time inside `Fuzzer._proposal`.

    python scripts/bench_cluster.py                         # 24 tests per arm
    python scripts/bench_cluster.py --tests 60 --tvm-test-s 0.4
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from nnsmith_cov.campaign.cluster import ClusterSpec, RayWorkerHandle, connect, shutdown
from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import select_ops

OPS = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid", "MatMul", "Softmax"]
WARM_UP = 3  # tests run before the measured window (first imports, first compiles)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _time_generation(fuzzer: Fuzzer) -> list[float]:
    """Count the CPU seconds the driver's threads spend proposing tests (thread CPU time, so
    the other thread's work and the waits for workers are not in it)."""
    total = [0.0]
    lock = threading.Lock()
    proposal = fuzzer._proposal

    def timed(test: Any) -> Any:
        t0 = time.thread_time()
        try:
            return proposal(test)
        finally:
            with lock:
                total[0] += time.thread_time() - t0

    fuzzer._proposal = timed  # type: ignore[method-assign]
    return total


def arm(kind: str, workers: int, tests: int, nodes: int, seed: int, root: Path) -> dict[str, Any]:
    """One campaign of `workers` handles of `kind` ("local" or "ray"): its measured figures."""
    handle = RayWorkerHandle if kind == "ray" else WorkerHandle
    run = RunDir(root / f"{kind}-{workers}")
    pool = [handle(["ort"], run.worker_log(i)) for i in range(workers)]
    settings = CaseSettings(["ort"], localize=False)
    cfg = FuzzConfig(GenConfig(nodes=nodes, ops=select_ops(OPS)), settings, seed=seed, max_tests=WARM_UP)
    fuzzer = Fuzzer(cfg, run, pool[0], lambda ev: None)
    try:
        fuzzer.start()
        for w in pool[1:]:
            w.start()
        fuzzer.run_workers(pool[1:], lambda: None, threading.Event())
        gen_cpu = _time_generation(fuzzer)
        fuzzer.cfg.max_tests = WARM_UP + tests
        wall0, cpu0 = time.perf_counter(), cpu_s()
        fuzzer.run_workers(pool[1:], lambda: None, threading.Event())
        wall, cpu = time.perf_counter() - wall0, cpu_s() - cpu0
    finally:
        fuzzer.close()
        for w in pool:
            w.close()
    done = fuzzer.stats.tests - WARM_UP
    return {
        "cluster": kind,
        "workers": workers,
        "tests": done,
        "wall_s": wall,
        "tests_per_s": done / wall,
        "driver_cpu_ms_per_test": 1e3 * cpu / done,
        "propose_ms_per_test": 1e3 * gen_cpu[0] / done,
        "internal_errors": fuzzer.stats.internal_errors,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=24, help="measured tests per arm (default 24)")
    ap.add_argument("--nodes", type=int, default=5, help="operators per graph (default 5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1, help="times each arm runs, interleaved (default 1)")
    ap.add_argument("--tvm-test-s", type=float, default=0.4, help="a TVM test's time in a worker (default 0.4 s)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    connect(ClusterSpec("ray"), num_cpus=2)  # a local Ray instance of 2 CPUs, as the tests use
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            for r in range(args.rounds):
                for workers in (1, 2):
                    for kind in ("local", "ray"):  # interleaved: load on the machine hits both alike
                        row = arm(kind, workers, args.tests, args.nodes, args.seed + r, Path(tmp) / str(r))
                        rows.append(row)
                        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}))
    finally:
        shutdown()
    print(f"\n{'cluster':8} {'workers':>7} {'tests/s':>8} {'driver ms/test':>15} {'of it proposing':>16}")
    for row in rows:
        print(
            f"{row['cluster']:8} {row['workers']:7d} {row['tests_per_s']:8.2f} "
            f"{row['driver_cpu_ms_per_test']:15.1f} {row['propose_ms_per_test']:16.1f}"
        )
    for kind in ("local", "ray"):
        mine = [row for row in rows if row["cluster"] == kind]
        per_test = sum(row["driver_cpu_ms_per_test"] for row in mine) / len(mine)
        tvm_ms = 1e3 * args.tvm_test_s
        print(
            f"{kind}: one driver core at {per_test:.1f} ms of CPU per test (generation in the workers) "
            f"feeds {tvm_ms / per_test:.0f} workers of {tvm_ms:.0f} ms TVM tests"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
