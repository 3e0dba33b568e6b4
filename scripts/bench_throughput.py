#!/usr/bin/env python3
"""Throughput of the unguided loop: tests per hour on ORT alone, TVM alone and both,
with the median time of each stage (generate, search, export, compile, run, compare).

Runs the same code as `nnsmith-cov fuzz` (one worker, op support probed and cached)
for a fixed number of 10-node test cases per backend set, into throw-away run folders.

    python scripts/bench_throughput.py                  # 60 tests per backend set
    python scripts/bench_throughput.py --tests 200 --sets ort ort,tvm
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.op_support import default_cache_dir, load_or_probe, restrict_ops
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import ALL_OPS


def median(xs: list[float]) -> str:
    return f"{statistics.median(xs):8.1f}" if xs else "     n/a"


def bench(backends: list[str], tests: int, nodes: int, seed: int, root: Path) -> None:
    run = RunDir(root / "-".join(backends))
    worker = WorkerHandle(backends, run.worker_log(0))
    worker.start()
    ops = restrict_ops(ALL_OPS, load_or_probe(worker, backends, ALL_OPS, default_cache_dir()).values())
    cfg = FuzzConfig(GenConfig(nodes=nodes, ops=ops), CaseSettings(backends), seed=seed, max_tests=tests)
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None)
    fuzzer.start()
    try:
        while not fuzzer.done():
            fuzzer.step()
    finally:
        worker.close()
    st = fuzzer.stats
    ms = st.stage_ms
    per_backend = {
        stage: [sum(v) for v in zip(*(ms.get(f"{b}.{s}", []) for b in backends for s in parts))]
        for stage, parts in (("compile", ("import", "compile")), ("run", ("execute",)), ("compare", ("compare",)))
    }
    print(f"\n== {','.join(backends)}: {st.tests} tests in {st.elapsed():.0f} s")
    print(f"tests/hour {3600 * st.tests / st.elapsed():8.0f}   executed/hour {3600 * st.executed / st.elapsed():8.0f}")
    print(f"passed {st.passed}, no-values {st.no_values}, not generated {st.gen_failed}, restarts {st.restarts}")
    print(f"findings {sum(st.findings.values())} ({len(st.signatures)} unique)")
    print(
        "median ms: "
        + "  ".join(
            f"{k} {median(v).strip()}"
            for k, v in (
                ("generate", ms.get("generate", [])),
                ("search", ms.get("search", [])),
                ("export", ms.get("export", [])),
                *per_backend.items(),
            )
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=60)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sets", nargs="+", default=["ort", "tvm", "ort,tvm"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for s in args.sets:
            bench(s.split(","), args.tests, args.nodes, args.seed, Path(tmp))


if __name__ == "__main__":
    main()
