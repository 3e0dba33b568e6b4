#!/usr/bin/env python3
"""The feedback scheduler in simulated campaigns: how fast it finds a rewarding arm, follows a switch, stays calm.

No Z3, no backends: records are drawn from each proposal's weights
(`nnsmith_cov.feedback.simulate`) and a rule says how likely a test is to be
interesting. Each scenario runs with feedback and without (plain NNSmith) over
the same seeds and prints the interesting rate and the probability the
scheduler gives the rewarding arm, as a multiple of its uniform share, in
windows of the run. The last, "dense", has every test add some branches (tests
with Conv2d four times as many, as on ORT's binary collector where nearly every
test is interesting) and compares the ranked reward with the saturating one
(window 0) and with no feedback: new branches per test and Conv2d's share. The
last, "fit", has the rewarding op go in at 4 tries in 100 after a graph's first
op, and compares the scheduler with and without its pick of the first op.

    python scripts/sim_scheduler.py [--tests 2000] [--seeds 3] [--ops 103]
                                    [--discount 0.997] [--prior-tests 4] [--lift-cap 32] [--floor 0.2]
                                    [--window 256] [--hedge 0.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Callable

import numpy as np

from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback import BanditParams, Scheduler
from nnsmith_cov.feedback.simulate import NoveltyRule, SharesOnly, Trace, run, run_novelty
from nnsmith_cov.gen.generator import GenRecord


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ops", type=int, default=103, help="number of operator arms (as in ALL_OPS)")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--discount", type=float, default=BanditParams.discount)
    ap.add_argument("--prior-tests", type=float, default=BanditParams.prior_tests)
    ap.add_argument("--lift-cap", type=float, default=BanditParams.lift_cap)
    ap.add_argument("--floor", type=float, default=BanditParams.floor)
    ap.add_argument("--window", type=int, default=BanditParams.window)
    ap.add_argument("--hedge", type=float, default=BanditParams.hedge, help="share of tests drawn uniformly")
    args = ap.parse_args()
    params = BanditParams(
        args.discount, args.prior_tests, args.lift_cap, args.floor, window=args.window, hedge=args.hedge
    )
    names = ["Conv2d", "Relu"] + [f"Op{i}" for i in range(args.ops - 2)]
    T, half = args.tests, args.tests // 2
    n_ops = len(names)

    def op_rule(hi: float, lo: float, switch: bool) -> Callable[[GenRecord, int], float]:
        def rule(rec: GenRecord, t: int) -> float:
            target = "Relu" if switch and t >= half else "Conv2d"
            return hi if target in rec.ops else lo

        return rule

    def backward_majority(rec: GenRecord, t: int) -> float:
        return 0.3 if rec.directions.count("backward") * 2 > len(rec.directions) else 0.02

    def zero_pad(rec: GenRecord, t: int) -> float:
        return 0.4 if any(b.kept and b.kind == "pad" and b.bin == 0 for b in rec.bins) else 0.02

    Reader = Callable[[Trace, int, int | None], float]
    windows = [(half - 300, half), (half + 100, half + 400), (T - 300, T)]
    scenarios: list[tuple[str, Callable[[GenRecord, int], float], list[tuple[str, Reader, float]]]] = [
        (
            "op: Conv2d 0.5 else 0.02, Relu from mid-run",
            op_rule(0.5, 0.02, True),
            [
                ("Conv2d", lambda tr, lo, hi: tr.op_prob("Conv2d", lo, hi), n_ops),
                ("Relu", lambda tr, lo, hi: tr.op_prob("Relu", lo, hi), n_ops),
            ],
        ),
        (
            "op (sparse): Conv2d 0.1 else 0.01",
            op_rule(0.1, 0.01, False),
            [("Conv2d", lambda tr, lo, hi: tr.op_prob("Conv2d", lo, hi), n_ops)],
        ),
        (
            "direction: majority backward 0.3 else 0.02",
            backward_majority,
            [("backward", lambda tr, lo, hi: 1.0 - tr.forward_prob(lo, hi), 2)],
        ),
        (
            "bin: a kept zero padding 0.4 else 0.02",
            zero_pad,
            [("pad 0", lambda tr, lo, hi: tr.bin_prob(AttrKind.PAD, 0, lo, hi), 8)],
        ),
        (
            "null: every test 0.03",
            lambda rec, t: 0.03,
            [
                ("Conv2d", lambda tr, lo, hi: tr.op_prob("Conv2d", lo, hi), n_ops),
                ("backward", lambda tr, lo, hi: 1.0 - tr.forward_prob(lo, hi), 2),
            ],
        ),
    ]
    span = ", ".join(f"[{lo},{hi})" for lo, hi in windows)
    print(f"{T} tests, {n_ops} ops, {args.seeds} seeds, {params}")
    print(f"probabilities as multiples of the uniform share, mean over seeds, in windows {span}\n")
    for title, rule, readers in scenarios:
        print(title)
        for feedback in (True, False):
            traces = []
            for seed in range(args.seeds):
                s = Scheduler(names, args.nodes, 7, seed, feedback=feedback, params=params)
                traces.append(run(s, rule, T, seed=1000 + seed))
            cells = [f"rate {statistics.mean(tr.rate() for tr in traces):.3f}"]
            for label, read, arms in readers:
                xs = [statistics.mean(read(tr, lo, hi) * arms for tr in traces) for lo, hi in windows]
                cells.append(f"{label} " + " ".join(f"{x:5.1f}" for x in xs))
            print(f"  {'feedback' if feedback else 'plain   '}  " + "   ".join(cells))
        print()
    dense_scenario(args, names, params, windows)
    bucket_scenario(args, names, params, windows)
    fit_scenario(args, names, params, windows)


def novelty_traces(
    args: argparse.Namespace, names: list[str], params: BanditParams, feedback: bool, rule: NoveltyRule
) -> list[Trace]:
    """One simulated campaign per seed, `rule` saying what each test adds."""
    traces = []
    for seed in range(args.seeds):
        s = Scheduler(names, args.nodes, 7, seed, feedback=feedback, params=params)
        traces.append(run_novelty(s, rule, args.tests, seed=1000 + seed))
    return traces


def window_means(
    traces: list[Trace], read: Callable[[Trace, int, int], float], windows: list[tuple[int, int]], fmt: str
) -> str:
    """`read` per window, the mean over the traces, as one line of numbers in format `fmt`."""
    return " ".join(format(statistics.mean(read(tr, lo, hi) for tr in traces), fmt) for lo, hi in windows)


def branches_per_test(tr: Trace, lo: int, hi: int) -> float:
    return statistics.mean(tr.added[lo:hi])


def op_share(op: str, n_ops: int) -> Callable[[Trace, int, int], float]:
    """A reader of `op`'s probability as a multiple of its uniform share."""
    return lambda tr, lo, hi: tr.op_prob(op, lo, hi) * n_ops


def bucket_scenario(
    args: argparse.Namespace, names: list[str], params: BanditParams, windows: list[tuple[int, int]]
) -> None:
    """Native code minutes into a campaign: every test adds new hit-count buckets (tensor sizes
    change loop counts), a decoy op many more, and new branches are rare, likelier with one op."""

    def buckets(rec: GenRecord, t: int, rng: np.random.Generator) -> Novelty:
        branch = rng.random() < (0.2 if "Conv2d" in rec.ops else 0.02)
        return Novelty(int(branch), int(rng.poisson(200 if "Relu" in rec.ops else 40)))

    print("buckets: a new branch with probability 0.2 with Conv2d else 0.02; Poisson(40) new buckets, 200 with Relu")
    for label, feedback in (("feedback", True), ("plain", False)):
        traces = novelty_traces(args, names, params, feedback, buckets)
        rates = window_means(traces, branches_per_test, windows, "5.3f")
        shares = [
            f"{op} " + window_means(traces, op_share(op, len(names)), windows, "5.1f") for op in ("Conv2d", "Relu")
        ]
        print(f"  {label:<10}  tests with a new branch {rates}   " + "   ".join(shares))


def fit_scenario(
    args: argparse.Namespace, names: list[str], params: BanditParams, windows: list[tuple[int, int]]
) -> None:
    """An op that pays but rarely fits: a try after the first puts Conv2d in 4 times in 100 (GridSample
    on ORT: 0.03 % of the ops of off-var's graphs for 0.7 % of the tries), the first op always goes in."""

    def conv(rec: GenRecord, t: int) -> float:
        return 0.5 if "Conv2d" in rec.ops else 0.02

    fit = {"Conv2d": 0.04}
    print("fit: Conv2d 0.5 else 0.02; a try after the first puts Conv2d in with probability 0.04")
    variants = (("first op", Scheduler, True), ("shares", SharesOnly, True), ("plain", Scheduler, False))
    for label, kind, feedback in variants:
        traces = []
        for seed in range(args.seeds):
            s = kind(names, args.nodes, 7, seed, feedback=feedback, params=params)
            traces.append(run(s, conv, args.tests, seed=1000 + seed, fit=fit))
        rates = window_means(traces, lambda tr, lo, hi: tr.rate(lo, hi), windows, "5.3f")
        held = window_means(traces, lambda tr, lo, hi: tr.held("Conv2d", lo, hi), windows, "5.2f")
        print(f"  {label:<10}  interesting {rates}   tests holding Conv2d {held}")


def dense_scenario(
    args: argparse.Namespace, names: list[str], params: BanditParams, windows: list[tuple[int, int]]
) -> None:
    def dense(rec: GenRecord, t: int, rng: np.random.Generator) -> Novelty:
        return Novelty(int(rng.poisson(12 if "Conv2d" in rec.ops else 3)), int(rng.poisson(5)))

    print("dense: every test adds Poisson(3) branches, Poisson(12) with Conv2d, and Poisson(5) buckets")
    saturating = dataclasses.replace(params, window=0)
    for label, feedback, p in (("ranked", True, params), ("saturating", True, saturating), ("plain", False, params)):
        traces = novelty_traces(args, names, p, feedback, dense)
        added = window_means(traces, branches_per_test, windows, "5.2f")
        conv = window_means(traces, op_share("Conv2d", len(names)), windows, "5.1f")
        print(f"  {label:<10}  branches/test {added}   Conv2d {conv}")


if __name__ == "__main__":
    main()
