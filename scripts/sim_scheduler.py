#!/usr/bin/env python3
"""The feedback scheduler in simulated campaigns: how fast it finds a rewarding arm, follows a switch, stays calm.

No Z3, no backends: records are drawn from each proposal's weights
(`nnsmith_cov.feedback.simulate`) and a rule says how likely a test is to be
interesting. Each scenario runs with feedback and without (plain NNSmith) over
the same seeds and prints the interesting rate and the probability the
scheduler gives the rewarding arm, as a multiple of its uniform share, in
windows of the run.

    python scripts/sim_scheduler.py [--tests 2000] [--seeds 3] [--ops 103]
                                    [--discount 0.997] [--prior-tests 4] [--lift-cap 32] [--floor 0.2]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.feedback import BanditParams, Scheduler
from nnsmith_cov.feedback.simulate import Trace, run
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
    args = ap.parse_args()
    params = BanditParams(args.discount, args.prior_tests, args.lift_cap, args.floor)
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


if __name__ == "__main__":
    main()
