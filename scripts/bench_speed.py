#!/usr/bin/env python3
"""Speed in two numbers: generation time per graph (median, p90) and the ORT loop's tests/s.

Generation is timed in-process over `--count` seeds with the full op set and binning on;
next to the times it prints the deterministic cost (Z3 checks and Z3 work units per
graph), which does not move with the machine's load. The loop runs `nnsmith-cov fuzz
--backends ort` (or `--backends tvm`) for `--time` per setting (each collector, each worker count, each
`--gen-process`) into a throw-away folder and reads tests and elapsed seconds from its
stats.json.

    python scripts/bench_speed.py                          # 300 seeds, loops of 60 s
    python scripts/bench_speed.py --count 100 --time 30s --collectors none --workers 1 --gen-process on
    python scripts/bench_speed.py --no-loop                # generation only
    python scripts/bench_speed.py --count 10 --collectors binary --workers 1 --gen-process auto --feedback off
    python scripts/bench_speed.py --count 10 --backends tvm --collectors none --workers 1 2 --gen-process off

With `--feedback off` (plain NNSmith: every graph of `--nodes`) a seed runs the same tests
whatever the loop's speed, so two versions compare test for test; with feedback on (a
campaign's default under a collector) the scheduler's choices follow the tests' times and
sizes, and a minute's rate moves by a fifth between runs of one version.

On a shared machine run it with `nice` and compare only numbers taken side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.ops import ALL_OPS


def generation(count: int, nodes: int, seed0: int) -> None:
    cfg = GenConfig(nodes=nodes, ops=ALL_OPS)
    ms: list[float] = []
    checks: list[int] = []
    work: list[int] = []
    kept = drawn = 0
    failed = 0
    for seed in range(seed0, seed0 + count):
        t0 = time.perf_counter()
        try:
            rec = generate(cfg, seed).record
        except GenerationError:
            failed += 1
            continue
        ms.append((time.perf_counter() - t0) * 1000)
        checks.append(rec.solver_checks)
        work.append(rec.solver_work)
        kept += sum(b.kept for b in rec.bins)
        drawn += len(rec.bins)
    if not ms:
        print(f"generation: no graph out of {count} seeds")
        return
    print(f"== generation: {count} seeds from {seed0}, {nodes} nodes, {len(ALL_OPS)} ops, binning on")
    print(
        f"time per graph: median {statistics.median(ms):.1f} ms, p90 {float(np.percentile(ms, 90)):.1f} ms"
        f" (failed {failed})"
    )
    print(
        f"Z3 checks per graph: mean {statistics.mean(checks):.1f}; Z3 work units per graph: "
        f"median {statistics.median(work):.0f}, p90 {float(np.percentile(work, 90)):.0f}, "
        f"mean {statistics.mean(work):.0f}"
    )
    # What the cheaper binning gives up: bins left out (conflicting, over a cap or the budget).
    print(f"bins kept: {kept}/{drawn} ({100 * kept / max(drawn, 1):.1f}%)")


def loop(
    backend: str, collector: str, workers: int, gen_process: str, duration: str, nodes: int, seed: int, feedback: str
) -> None:
    what = f"collector {collector:<6} {workers} worker(s), --gen-process {gen_process:<4} --feedback {feedback:<3}"
    with tempfile.TemporaryDirectory(prefix="bench_speed_") as tmp:
        out = Path(tmp) / "run"
        cmd = [
            *(sys.executable, "-m", "nnsmith_cov.cli", "fuzz"),
            *("--backends", backend, "--collector", collector, "--workers", str(workers)),
            *("--gen-process", gen_process, "--feedback", feedback),
            *("--time", duration, "--nodes", str(nodes), "--seed", str(seed), "-o", str(out)),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        stats_file = out / "stats.json"
        if done.returncode != 0 or not stats_file.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            print(f"{backend.upper()} loop, {what}: failed ({tail[0]})")
            return
        st = json.loads(stats_file.read_text())
        ahead = (out / "workers" / "g0.log").exists()
    rate = st["tests"] / max(st["elapsed_s"], 1e-9)
    print(
        f"{backend.upper()} loop, {what}: {rate:5.1f} tests/s ({st['tests']} tests in {st['elapsed_s']:.0f} s; "
        f"generator {'used' if ahead else 'not used'})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300, help="seeds to generate")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time", default="60s", help="length of each loop run (as fuzz --time)")
    ap.add_argument("--collectors", nargs="+", default=["none", "binary"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument(
        "--gen-process", nargs="+", default=["off", "auto"], choices=["auto", "on", "off"], help="as fuzz --gen-process"
    )
    ap.add_argument("--feedback", default="on", choices=["on", "off"], help="as fuzz --feedback (none: always off)")
    ap.add_argument("--backends", default="ort", choices=["ort", "tvm"], help="the loop's backend (default ort)")
    ap.add_argument("--no-loop", action="store_true", help="time generation only")
    args = ap.parse_args()
    if args.count < 1 or args.nodes < 1 or any(w < 1 for w in args.workers):
        sys.exit("bench_speed: --count, --nodes and --workers must be at least 1")
    generation(args.count, args.nodes, args.seed)
    if args.no_loop:
        return
    print(f"== {args.backends.upper()} loop (fuzz --backends {args.backends})")
    for collector in args.collectors:
        for workers in args.workers:
            for gen_process in args.gen_process:
                feedback = args.feedback if collector != "none" else "off"
                loop(args.backends, collector, workers, gen_process, args.time, args.nodes, args.seed, feedback)


if __name__ == "__main__":
    main()
