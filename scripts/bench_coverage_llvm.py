#!/usr/bin/env python3
"""Native coverage of onnxoptimizer (the instrumented build of `make instrumented`) under the llvm collector.

Prints the build time (from the build's marker), the counters in the universe (all
and in `onnxoptimizer/passes/`), the counters covered by N generated 10-node models
(each exported, then optimized with the default pass list), and the per-test cost
of the collector: optimize() alone vs start() + optimize() + stop(), each the best
of `--reps` runs per model.

    python scripts/bench_coverage_llvm.py [--models 100] [--seed 0] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LlvmBench:
    build_s: float
    counters: int
    counters_in_passes: int
    models: int = 0
    not_exported: int = 0
    optimizer_errors: int = 0
    covered: int = 0
    covered_in_passes: int = 0
    hits_per_test: list[int] = field(default_factory=list)
    optimize_ms: list[float] = field(default_factory=list)
    with_collector_ms: list[float] = field(default_factory=list)
    bookkeeping_ms: list[float] = field(default_factory=list)
    generate_s: float = 0.0
    top_pass_files: list[tuple[str, int]] = field(default_factory=list)


def bench_onnxoptimizer(models: int = 100, seed: int = 0, reps: int = 3, nodes: int = 10) -> LlvmBench:
    """Measure the llvm collector on the instrumented onnxoptimizer in this process.

    Construct nothing instrumented before calling: the collector must load its runtime
    before the optimizer's extension module is imported."""
    from nnsmith_cov.coverage.llvm_builds import find_build
    from nnsmith_cov.coverage.llvm_collector import LlvmCollector

    build = find_build()
    if build is None:
        raise SystemExit("no instrumented onnxoptimizer (run make instrumented)")
    collector = LlvmCollector(["onnx_opt_cpp2py_export*"])
    from nnsmith_cov.backends.onnxoptimizer import import_instrumented

    optimizer = import_instrumented()
    import onnx

    from nnsmith_cov.coverage.covmap import VirginMap
    from nnsmith_cov.gen.generator import GenConfig, generate
    from nnsmith_cov.materialize.model_dir import materialize_and_export
    from nnsmith_cov.ops import ALL_OPS
    from nnsmith_cov.search.gradient import search_values

    universe = collector.universe()
    in_passes = universe.file_mask(["onnxoptimizer/passes/"])
    out = LlvmBench(build.build_s, len(universe), int(in_passes.sum()))
    virgin = VirginMap(len(universe))
    passes = optimizer.get_fuse_and_elimination_passes()
    cfg = GenConfig(nodes=nodes, ops=ALL_OPS)
    t_gen = 0.0
    for k in range(models):
        t0 = time.perf_counter()
        try:
            graph = generate(cfg, seed + k).graph
            values = search_values(graph, seed + k).values
            data = materialize_and_export(graph, values).onnx
        except Exception:  # a model the generator or exporter gives up on is not this benchmark's subject
            out.not_exported += 1
            continue
        finally:
            t_gen += time.perf_counter() - t0
        model = onnx.load_from_string(data)
        out.models += 1
        try:
            collector.start()
            optimizer.optimize(model, passes)
            hits = collector.stop()
        except Exception:  # an optimizer failure is a finding elsewhere; here it only counts
            out.optimizer_errors += 1
            continue
        virgin.update(hits)
        out.hits_per_test.append(len(hits))
        plain, covered, book = [], [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            optimizer.optimize(model, passes)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            collector.start()
            t1 = time.perf_counter()
            optimizer.optimize(model, passes)
            t2 = time.perf_counter()
            collector.stop()
            t3 = time.perf_counter()
            covered.append(t3 - t0)
            book.append((t1 - t0) + (t3 - t2))
        out.optimize_ms.append(min(plain) * 1e3)
        out.with_collector_ms.append(min(covered) * 1e3)
        out.bookkeeping_ms.append(min(book) * 1e3)
    out.generate_s = t_gen
    reached = virgin.covered()
    out.covered = len(reached)
    out.covered_in_passes = int(in_passes[reached].sum())
    per_file = universe.per_file(reached[in_passes[reached]])
    out.top_pass_files = sorted(per_file.items(), key=lambda kv: -kv[1])[:8]
    return out


def _pct(a: int, b: int) -> str:
    return f"{a:,}/{b:,} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=10)
    args = ap.parse_args()
    b = bench_onnxoptimizer(args.models, args.seed, args.reps, args.nodes)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    print(f"build (make instrumented)   {b.build_s:.0f} s")
    print(f"counters                    {b.counters:,}, in onnxoptimizer/passes/ {b.counters_in_passes:,}")
    print(
        f"models                      {b.models} optimized ({b.not_exported} not generated/exported, "
        f"{b.optimizer_errors} optimizer errors); generation+search+export {b.generate_s:.0f} s"
    )
    print(f"covered, all                {_pct(b.covered, b.counters)}")
    print(f"covered, passes/            {_pct(b.covered_in_passes, b.counters_in_passes)}")
    if b.hits_per_test:
        print(
            f"counters hit per test       median {med(b.hits_per_test):.0f}, "
            f"min {min(b.hits_per_test)}, max {max(b.hits_per_test)}"
        )
    opt, cov, book = med(b.optimize_ms), med(b.with_collector_ms), med(b.bookkeeping_ms)
    print(f"optimize() per test         {opt:.3f} ms median (instrumented build, no collector)")
    print(f"  + start()/stop()          {cov:.3f} ms median (+{100 * (cov - opt) / opt:.1f}%)")
    print(f"  start()+stop() alone      {book:.3f} ms median, {np.mean(b.bookkeeping_ms):.3f} ms mean")
    print("most covered pass files:")
    for f, n in b.top_pass_files:
        print(f"  {n:5d}  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
