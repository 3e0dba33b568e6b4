#!/usr/bin/env python3
"""Cost of coverage collection: per-test overhead of a collector, map bookkeeping, universe size.

For the python collector: generated 10-node models (ops TVM accepts, per the cached
op-support probe), each exported with torch.onnx and compiled + run by TVM at OPT, in
this process, once plain and once under the collector, alternating, after a warm-up
pass. Prints the universe (size, files, pass-only share, time to analyse and to load
from cache), median and total time with and without the collector, arcs per test,
and the parent's per-test bookkeeping (wire encode/decode, map update).

    python scripts/bench_coverage.py [--models 40] [--nodes 10] [--seed 0]

Native (llvm) collection of a real graph optimizer: scripts/bench_coverage_llvm.py.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from nnsmith_cov.backends.base import Opt
from nnsmith_cov.backends.op_support import default_cache_dir, load_or_probe, restrict_ops
from nnsmith_cov.backends.registry import load_backend
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.coverage.collector import PASS_FILTERS
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.coverage.python_collector import PythonCollector
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.search.valid_graphs import valid_graphs


def tvm_ops() -> list:
    with tempfile.TemporaryDirectory() as tmp:
        worker = WorkerHandle(["tvm"], Path(tmp) / "worker.log")
        try:
            worker.start()
            tables = load_or_probe(worker, ["tvm"], ALL_OPS, default_cache_dir())
        finally:
            worker.close()
    return restrict_ops(ALL_OPS, tables.values())


def models(count: int, nodes: int, seed: int) -> list:
    cfg = GenConfig(nodes=nodes, ops=tvm_ops())
    found = valid_graphs(cfg, seed)
    return [(graph, search.values, search.oracle) for _, graph, search in itertools.islice(found, count)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=40)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        PythonCollector([], cache_dir=Path(tmp)).universe()
        analyse_s = time.perf_counter() - t0
    collector = PythonCollector([])
    t0 = time.perf_counter()
    u = collector.universe()
    load_s = time.perf_counter() - t0
    passes = u.file_mask(PASS_FILTERS["python"])
    print(f"universe {u.ident}: {len(u)} arcs in {len(u.files)} files of {', '.join(collector.packages)}")
    print(f"  pass-only: {int(passes.sum())} arcs ({100 * passes.mean():.1f}%)")
    print(f"  analysis from scratch {analyse_s:.1f} s, from the cache {load_s * 1e3:.0f} ms")

    tvm = load_backend("tvm")
    cases = models(args.models, args.nodes, args.seed)

    def one(graph, values) -> None:
        onnx_bytes = materialize_and_export(graph, values).onnx
        try:
            exe = tvm.compile(tvm.load(onnx_bytes), Opt.OPT)
            inputs = {f"i{v}": values[v] for v in graph.inputs}
            tvm.run(exe, inputs)
        except Exception:  # a TVM finding: the time it took still counts
            pass

    for graph, values, _ in cases:  # warm-up: lazy imports and caches out of the measurement
        one(graph, values)
    plain, covered, arcs, stop_ms = [], [], [], []
    for graph, values, _ in cases:
        t0 = time.perf_counter()
        one(graph, values)
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        collector.start()
        one(graph, values)
        t1 = time.perf_counter()
        hits = collector.stop()
        covered.append(time.perf_counter() - t0)
        stop_ms.append((time.perf_counter() - t1) * 1e3)
        arcs.append(hits)

    vmap = VirginMap(len(u))
    wire_ms, update_ms, new = [], [], []
    for hits in arcs:
        t0 = time.perf_counter()
        back = Hits.from_wire(hits.to_wire(), len(u))
        t1 = time.perf_counter()
        novelty = vmap.update(back)
        t2 = time.perf_counter()
        wire_ms.append((t1 - t0) * 1e3)
        update_ms.append((t2 - t1) * 1e3)
        new.append(novelty.new_branches)

    med = lambda xs: statistics.median(xs)
    print(f"\n{len(cases)} models of {args.nodes} nodes: export + TVM import/compile/run, in process")
    print(f"  plain:            median {med(plain) * 1e3:7.1f} ms   total {sum(plain):6.2f} s")
    print(f"  under collector:  median {med(covered) * 1e3:7.1f} ms   total {sum(covered):6.2f} s")
    overhead = [c / p - 1 for c, p in zip(covered, plain)]
    print(
        f"  overhead: total {100 * (sum(covered) / sum(plain) - 1):+.1f}%, "
        f"median per model {100 * med(overhead):+.1f}%  (of which stop(): median {med(stop_ms):.1f} ms)"
    )
    sizes = [len(h) for h in arcs]
    print(f"  arcs per test: median {med(sizes):.0f}, min {min(sizes)}, max {max(sizes)}")
    print(f"  all {len(cases)} together: {vmap.count()} arcs ({100 * vmap.count() / len(u):.2f}%), ")
    print(f"    pass-only {vmap.count(passes)}; tests that found new arcs: {int(np.count_nonzero(new))}")
    print(f"parent bookkeeping per test: wire decode {med(wire_ms):.3f} ms, map update {med(update_ms):.3f} ms")


if __name__ == "__main__":
    main()
