#!/usr/bin/env python3
"""Benchmark of the valid-graph generator: validity rates, failures by op, speed, binning effect.

For each seed: generate (timed), materialize + export (timed), then check that
PyTorch runs, the ONNX checker passes with full_check, and ONNX shape inference
derives the GraphIR's type for every value. Then the binning effect: unique
operator instances (op + input types + attributes) with and without binning.

    python scripts/bench_generate.py                 # 1,000 seeds at 10 nodes
    python scripts/bench_generate.py --count 200 --nodes 20
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import numpy as np

from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.materialize.onnx_export import ExportError
from nnsmith_cov.materialize.validate import check_agreement
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.search.sampling import sample_values


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.1f}%)" if d else "0/0"


def quantiles(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    return f"median {statistics.median(xs):.1f} ms, p90 {float(np.percentile(xs, 90)):.1f} ms"


def validity(count: int, nodes: int, seed0: int) -> set[str]:
    cfg = GenConfig(nodes=nodes, ops=ALL_OPS)
    made = full = exported = checker_ok = agree = torch_ok = 0
    gen_ms: list[float] = []
    total_ms: list[float] = []
    fail_ops: collections.Counter[str] = collections.Counter()
    export_fail: collections.Counter[str] = collections.Counter()
    hist: collections.Counter[str] = collections.Counter()
    gen_errors: collections.Counter[str] = collections.Counter()
    instances: set[str] = set()
    for seed in range(seed0, seed0 + count):
        t0 = time.perf_counter()
        try:
            gen = generate(cfg, seed)
        except GenerationError as e:
            gen_errors[str(e)] += 1
            continue
        t_gen = time.perf_counter()
        made += 1
        full += len(gen.graph.insts) == nodes
        gen_ms.append((t_gen - t0) * 1000)
        hist.update(gen.graph.op_counts())
        instances.update(gen.graph.instance_keys())
        values = sample_values(gen.graph, seed)
        try:
            materialize_and_export(gen.graph, values)
        except ExportError as e:
            export_fail[str(e)[:100]] += 1
            continue
        total_ms.append((time.perf_counter() - t0) * 1000)
        exported += 1
        a = check_agreement(gen.graph, values)
        checker_ok += a.checker_error is None
        torch_ok += not a.torch_errors
        agree += not a.onnx_errors
        fail_ops.update(set(a.culprits(gen.graph)))
    print(f"== validity: {count} seeds from {seed0}, {nodes} nodes, {len(ALL_OPS)} operator specs")
    print(f"graph produced:                    {pct(made, count)}  (with all {nodes} nodes: {pct(full, made)})")
    print(f"exported to ONNX:                  {pct(exported, made)}")
    print(f"onnx.checker full_check passes:    {pct(checker_ok, exported)}")
    print(f"torch runs, shapes match GraphIR:  {pct(torch_ok, exported)}")
    print(f"ONNX inference agrees, all values: {pct(agree, exported)}")
    print(f"generation alone:                  {quantiles(gen_ms)}")
    print(f"generation + materialize + export: {quantiles(total_ms)}")
    for what, counter in (("generation failures", gen_errors), ("exporter failures", export_fail)):
        if counter:
            print(f"{what}: " + "; ".join(f"{k} x{n}" for k, n in counter.most_common(5)))
    print("disagreements by op: " + (", ".join(f"{k} {n}" for k, n in fail_ops.most_common()) or "none"))
    print(f"operator histogram ({sum(hist.values())} instances, {len(hist)}/{len(ALL_OPS)} ops used):")
    items = hist.most_common()
    for i in range(0, len(items), 6):
        print("  " + "  ".join(f"{k:<14}{n:>5}" for k, n in items[i : i + 6]))
    unused = sorted(o.name() for o in ALL_OPS if o.name() not in hist)
    if unused:
        print("never generated: " + ", ".join(unused))
    print(op_shares(hist, [o.name() for o in ALL_OPS]))
    return instances


def op_shares(hist: collections.Counter[str], names: list[str]) -> str:
    """Min / median / max of each op's share of all instances, as a multiple of its fair
    share (1/len(names)), and the ops below a third of fair (issue 29's reach goal)."""
    total = sum(hist.values())
    if not total or not names:
        return "op shares: no instances"
    fair = total / len(names)
    share = sorted((hist.get(n, 0) / fair, n) for n in names)
    low = [f"{n} {hist.get(n, 0)}" for r, n in share if r < 1 / 3]
    return (
        f"op shares of fair ({fair:.1f} instances each): min {share[0][0]:.2f} ({share[0][1]}), "
        f"median {statistics.median(r for r, _ in share):.2f}, max {share[-1][0]:.2f} ({share[-1][1]})\n"
        f"below a third of fair: {len(low)}" + (" - " + ", ".join(low) if low else "")
    )


def diversity(count: int, nodes: int, seed0: int, binning: bool) -> tuple[set[str], set[tuple], list[int]]:
    """Unique op instances, unique (op, input shapes) pairs, and every dim of every value."""
    cfg = GenConfig(nodes=nodes, ops=ALL_OPS, binning=binning)
    keys: set[str] = set()
    shaped: set[tuple] = set()
    dims: list[int] = []
    for seed in range(seed0, seed0 + count):
        try:
            g = generate(cfg, seed).graph
        except GenerationError:
            continue
        keys.update(g.instance_keys())
        shaped.update((i.op, tuple(g.types[v].shape for v in i.inputs)) for i in g.insts)
        dims.extend(d for t in g.types for d in t.shape)
    return keys, shaped, dims


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    validity(args.count, args.nodes, args.seed)
    on = diversity(args.count, args.nodes, args.seed, binning=True)
    off = diversity(args.count, args.nodes, args.seed, binning=False)
    print(f"== binning effect over {args.count} models (binning / no binning)")
    print(
        f"unique operator instances (op + input types + attributes): {len(on[0])} / {len(off[0])}, "
        f"ratio {len(on[0]) / max(1, len(off[0])):.2f}x (paper: 2.07x)"
    )
    print(
        f"unique (op, input shapes) pairs: {len(on[1])} / {len(off[1])}, ratio {len(on[1]) / max(1, len(off[1])):.2f}x"
    )
    for label, (_, _, dims) in (("binning", on), ("no binning", off)):
        small = sum(d <= 2 for d in dims) / max(1, len(dims))
        print(f"{label:>10}: {len(set(dims))} distinct dim sizes, {100 * small:.0f}% of dims are 1 or 2")


if __name__ == "__main__":
    main()
