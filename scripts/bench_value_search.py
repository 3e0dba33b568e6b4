#!/usr/bin/env python3
"""Gradient ablation (NNSmith Section 5.3): success rate of value search vs search time.

Three groups of generated models (10, 20, 30 nodes), each model holding at
least one vulnerable operator. Methods: Sampling (values from [1, 9]),
Gradient without proxy derivatives, Gradient with proxy derivatives, all from
the same initial values. Each model is searched once per method with the
largest budget; success at a smaller budget B means success within B ms.

The generator drops graphs that the range analysis of `gen.feasibility`
proves to have no NaN/Inf-free values at all (Log of a LogSoftmax, a divisor
out of Tril, ...), or finds valid only where an input holds one exact value
(Acos(Exp(Sqrt(x))) needs x = 0), and draws another from the same seed; the
script prints how many it dropped, by reason. Mean search time at budget B counts a model that
was not solved within B as B.

    python scripts/bench_value_search.py [--models 512] [--png docs/value_search.png]
    python scripts/bench_value_search.py --iterations 25 50 100 200 [--sizes 30]
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
from pathlib import Path

import numpy as np
import torch

from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.torch_module import GraphModule, input_tensors
from nnsmith_cov.ops import ALL_OPS, op_by_name
from nnsmith_cov.search.gradient import search_values

METHODS = {  # label -> (method, proxy)
    "Sampling": ("sampling", False),
    "Gradient": ("gradient", False),
    "Gradient (Proxy Deriv.)": ("gradient", True),
}
INIT = (1.0, 9.0)
BUDGETS = [8 * i for i in range(1, 9)]


def vulnerable_graphs(
    nodes: int, count: int, seed0: int, dropped: collections.Counter | None = None
) -> list[tuple[int, GraphIR]]:
    """`count` generated graphs holding a vulnerable op; `dropped` counts, by reason, the
    graphs the generator made again as proven to have no valid values."""
    cfg = GenConfig(nodes=nodes, ops=ALL_OPS)
    out, seed = [], seed0
    while len(out) < count:
        try:
            gen = generate(cfg, seed)
        except GenerationError:
            gen = None
        if gen is not None and any(op_by_name(i.op).vulnerable for i in gen.graph.insts):
            out.append((seed, gen.graph))
            if dropped is not None:
                dropped.update(_reason(r) for r in gen.record.infeasible)
        seed += 1
    return out


def _reason(why: str) -> str:
    """A drop's reason without its details; an exact-value-only graph marked as such."""
    head = why.split(":")[0]
    return f"{head} (exact value only)" if "valid only where" in why else head


def invalid_under_default_init(graph: GraphIR, seed: int) -> bool:
    """NaN/Inf anywhere with torch.randn-like values (PyTorch's default input init)."""
    rng = np.random.default_rng(seed)
    values = {}
    for v in (*graph.inputs, *graph.weights):
        t = graph.types[v]
        if t.dtype.is_float:
            values[v] = rng.standard_normal(t.shape).astype(t.dtype.numpy)
        else:
            values[v] = rng.integers(0, 2 if t.dtype.name == "bool" else 5, t.shape).astype(t.dtype.numpy)
    module = GraphModule(graph, op_by_name, values)
    with torch.no_grad():
        env = module.run(*input_tensors(graph, values))
    return any(t.is_floating_point() and not torch.isfinite(t).all() for t in env.values())


def curve(rows: list[tuple[bool, float]]) -> tuple[list[float], list[float]]:
    """Per budget: the mean search time (a model unsolved within it counts as the budget)
    and the success rate (%)."""
    means = [statistics.mean(min(t, b) for _, t in rows) for b in BUDGETS]
    rates = [100 * sum(ok and t <= b for ok, t in rows) / len(rows) for b in BUDGETS]
    return means, rates


def by_iterations(sizes: list[int], models: int, seed0: int, counts: list[int]) -> None:
    """Print, per size, how many graphs the full method solves within each iteration
    count: the same graphs and initial values as the ablation, with no time limit."""
    print(f"solved by Gradient (Proxy Deriv.) within N iterations; {models} models per group")
    print(f"{'nodes':>5}  " + "".join(f"{n:>7}" for n in counts))
    for nodes in sizes:
        graphs = vulnerable_graphs(nodes, models, seed0)
        runs = [search_values(g, s, "gradient", budget_ms=math.inf, init=INIT, max_iters=counts[-1]) for s, g in graphs]
        print(f"{nodes:>5}  " + "".join(f"{sum(r.ok and r.iterations <= n for r in runs):>7}" for n in counts))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=512, help="models per group")
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 30])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--png", type=Path, default=Path("docs/value_search.png"))
    p.add_argument(
        "--iterations",
        type=int,
        nargs="+",
        metavar="N",
        help="instead of the ablation: success of Gradient (Proxy Deriv.) within N search iterations, "
        "free of the machine's speed (to compare changes to the search)",
    )
    args = p.parse_args()
    if args.iterations and min(args.iterations) < 1:
        p.error("--iterations takes positive counts")
    torch.set_num_threads(1)
    if args.iterations:
        by_iterations(args.sizes, args.models, args.seed, sorted(args.iterations))
        return

    # Warm up torch's kernels so the first models do not pay for lazy init.
    for seed, g in vulnerable_graphs(10, 20, 10**6):
        search_values(g, seed, "gradient", budget_ms=BUDGETS[-1], init=INIT)

    results: dict[tuple[int, str], list[tuple[bool, float]]] = {}
    dropped: dict[int, collections.Counter] = {}
    for nodes in args.sizes:
        dropped[nodes] = collections.Counter()
        graphs = vulnerable_graphs(nodes, args.models, args.seed, dropped[nodes])
        if nodes == 20:
            bad = sum(invalid_under_default_init(g, s) for s, g in graphs)
            print(
                f"NaN/Inf under default (randn) initialization, {nodes} nodes: {bad}/{len(graphs)} "
                f"({100 * bad / len(graphs):.1f}%; paper 56.8%)"
            )
        for label, (method, proxy) in METHODS.items():
            results[(nodes, label)] = [
                (r.ok, r.elapsed_ms)
                for r in (search_values(g, s, method, budget_ms=BUDGETS[-1], proxy=proxy, init=INIT) for s, g in graphs)
            ]

    print(f"\nsuccess rate (%) and mean search time (ms) by budget (ms); {args.models} models per group")
    print(f"{'nodes':>5}  {'method':<24} {'':<7}" + "".join(f"{b:>7}" for b in BUDGETS))
    curves = {key: curve(rows) for key, rows in results.items()}
    for (nodes, label), (means, rates) in curves.items():
        print(f"{nodes:>5}  {label:<24} {'success':<7}" + "".join(f"{r:>7.1f}" for r in rates))
        print(f"{'':>5}  {'':<24} {'mean ms':<7}" + "".join(f"{m:>7.2f}" for m in means))

    print("\ngraphs the generator dropped (no NaN/Inf-free values, or only at an exact value), by reason:")
    for nodes in args.sizes:
        d = dropped[nodes]
        print(f"{nodes:>5}  {sum(d.values())} dropped: " + ", ".join(f"{k} {n}" for k, n in d.most_common()))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.sizes), figsize=(4 * len(args.sizes), 3.2), sharey=True)
    for ax, nodes in zip(np.atleast_1d(axes), args.sizes):
        for label in METHODS:
            ax.plot(*curves[(nodes, label)], marker="o", label=label)
        ax.set_title(f"{nodes} nodes")
        ax.set_xlabel("mean search time (ms)")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("success rate (%)")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    args.png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=150)
    print(f"\nfigure: {args.png}")


if __name__ == "__main__":
    main()
