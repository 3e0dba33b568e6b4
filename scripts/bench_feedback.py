#!/usr/bin/env python3
"""Feedback on vs off at equal wall time: TVM under the python collector by default.

Runs two campaigns side by side, one process each, so that they share the machine
fairly (one worker each; with 2 cores, one core each): `--feedback on` and
`--feedback off`, same seed, same time. Then reads both corpora and prints each
timeline, total, pass-only and unique branches (reached by one campaign only), and
writes `nnsmith-cov report`'s table and figures into OUT/report.

    python scripts/bench_feedback.py [--time 30m] [--seed 1] [--out out/bench-feedback]
    python scripts/bench_feedback.py --backends ort --collector binary --time 15m   # ORT's binary
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from nnsmith_cov.report.command import ReportOptions, load_campaigns, make_report
from nnsmith_cov.report.compare import unique_counts
from nnsmith_cov.report.model import ReportError


def run_pair(out: Path, time_spec: str, seed: int, backends: str, collector: str) -> dict[str, Path]:
    folders = {mode: out / f"feedback-{mode}" for mode in ("on", "off")}
    procs = []
    for mode, folder in folders.items():
        argv = [sys.executable, "-m", "nnsmith_cov.cli", "fuzz", "-o", str(folder), "--backends", backends]
        argv += ["--collector", collector, "--feedback", mode, "--time", time_spec, "--seed", str(seed)]
        log = open(out / f"feedback-{mode}.log", "w")
        procs.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait()
        log.close()
        if proc.returncode != 0:
            sys.exit(f"a campaign failed (exit {proc.returncode}); see {log.name}")
    return folders


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", default="30m", help="wall time of each campaign (default 30m)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backends", default="tvm")
    ap.add_argument("--collector", default="python")
    ap.add_argument("--out", type=Path, default=Path("out/bench-feedback"))
    ap.add_argument("--reuse", action="store_true", help="only report on campaigns already in --out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        folders = {mode: args.out / f"feedback-{mode}" for mode in ("on", "off")}
    else:
        folders = run_pair(args.out, args.time, args.seed, args.backends, args.collector)

    specs = [f"{folder}=feedback {mode}" for mode, folder in folders.items()]
    try:
        campaigns = {c.label.split()[-1]: c for c in load_campaigns(specs, ReportOptions())}
    except ReportError as e:
        sys.exit(f"bench_feedback: {e}")
    for mode, c in campaigns.items():
        assert c.by_time is not None
        t = c.by_time
        print(f"\nfeedback {mode}: elapsed_s branches pass_only (after each new-coverage step)")
        step = max(1, len(t.x) // 20)
        for i in [*range(0, len(t.x), step), len(t.x) - 1]:
            print(f"  {t.x[i]:9.0f} {t.branches[i]:8d} {t.pass_branches[i]:9d}")
    unique = unique_counts({m: c.covered for m, c in campaigns.items()})
    on, off = campaigns["on"], campaigns["off"]
    print("\n              total   pass-only   unique   tests")
    for mode, c in campaigns.items():
        print(f"feedback {mode:<3} {len(c.covered):7d}   {len(c.pass_covered):9d}   {unique[mode]:6d}   {c.tests:5d}")
    ratio = len(on.covered) / len(off.covered) if off.covered else float("nan")
    uniq = unique["on"] / unique["off"] if unique["off"] else float("inf")
    print(f"ratios: total {ratio:.2f}x, unique {uniq:.2f}x")
    for mode, c in campaigns.items():
        assert c.by_time is not None
        late = [b for x, b in zip(c.by_time.x, c.by_time.branches) if x >= 0.9 * c.by_time.x[-1]]
        print(f"feedback {mode}: +{late[-1] - late[0] if late else 0} branches in the last 10% of the time")
    # The full report (table, JSON/CSV, coverage over time and tests, Venn) of `nnsmith-cov report`.
    make_report(specs, args.out / "report", ReportOptions(quiet=True))
    print(f"report: {args.out / 'report'}; figure: {args.out / 'report' / 'figures' / 'coverage-time.png'}")


if __name__ == "__main__":
    main()
