"""Graphs per second of each generator (nnsmith, graphfuzzer, lemon) on the whole op set.

    .venv/bin/python scripts/bench_baselines.py [--count 50] [--nodes 10]

Prints, per generator: graphs/s, median and p90 generation time, mean operators
per graph and failures. Generation only: no value search, export or backends.
"""

from __future__ import annotations

import argparse
import statistics
import time

from nnsmith_cov.baselines import GENERATORS, generate_with
from nnsmith_cov.gen.generator import GenConfig, GenerationError
from nnsmith_cov.ops import ALL_OPS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=10)
    args = ap.parse_args()
    cfg = GenConfig(nodes=args.nodes, ops=ALL_OPS)
    for name in GENERATORS:
        times, sizes, failed = [], [], 0
        t0 = time.perf_counter()
        for seed in range(args.count):
            t = time.perf_counter()
            try:
                gen = generate_with(name, cfg, seed)
            except GenerationError:
                failed += 1
                continue
            times.append((time.perf_counter() - t) * 1000)
            sizes.append(len(gen.graph.insts))
        total = time.perf_counter() - t0
        p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else float("nan")
        print(
            f"{name:<12} {args.count / total:6.2f} graphs/s  median {statistics.median(times):7.1f} ms  "
            f"p90 {p90:7.1f} ms  ops/graph {statistics.mean(sizes):5.1f}  failed {failed}"
        )


if __name__ == "__main__":
    main()
