#!/usr/bin/env python3
"""Feedback on vs off at equal wall time: TVM under the python collector by default.

Runs two or three campaigns side by side, one process each, so that they share the
machine fairly (one worker each; one core each), same seed, same time; by default
`on` (feedback with mutation of kept tests) and `off` (plain NNSmith: opset 20,
static shapes, no IR text round trip). `off-var` is feedback off drawing the export
choices the scheduler has arms for (opsets 11-20, symbolic dims and the round trip
each in half the graphs) uniformly instead, never mutating: what the scheduler adds
beyond the reach of those choices. `on-nomut` is feedback without mutation (kept
tests are only grown at the end): what mutation adds. Then reads the corpora and
prints each timeline, total, pass-only and unique branches (reached by one campaign
only), the first mode's ratios to each other and how soon it reached each other's
final coverage, and writes `nnsmith-cov report`'s table and figures into OUT/report.

    python scripts/bench_feedback.py [--time 30m] [--seed 1] [--out out/bench-feedback]
    python scripts/bench_feedback.py --modes on,off-var,on-nomut --out out/bench-feedback-var
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
from nnsmith_cov.report.plots import unit_word

# The `fuzz` flags of each mode.
MODES = {
    "on": ["--feedback", "on", "--mutation", "on"],
    "on-nomut": ["--feedback", "on", "--mutation", "off"],
    "off": ["--feedback", "off"],
    "off-var": ["--feedback", "off", "--opsets", "11-20", "--dynamic", "0.5", "--roundtrip", "0.5"],
}


def run_pair(out: Path, modes: list[str], time_spec: str, seed: int, backends: str, collector: str) -> dict[str, Path]:
    folders = {mode: out / f"feedback-{mode}" for mode in modes}
    procs = []
    for mode, folder in folders.items():
        argv = [sys.executable, "-m", "nnsmith_cov.cli", "fuzz", "-o", str(folder), "--backends", backends]
        argv += ["--collector", collector, *MODES[mode], "--time", time_spec, "--seed", str(seed)]
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
    ap.add_argument("--modes", default="on,off", help=f"two or three campaigns, of {', '.join(MODES)} (default on,off)")
    ap.add_argument("--reuse", action="store_true", help="only report on campaigns already in --out")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if len(modes) not in (2, 3) or len(set(modes)) != len(modes) or not set(modes) <= set(MODES):
        sys.exit(f"bench_feedback: --modes takes two or three different modes of {', '.join(MODES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        folders = {mode: args.out / f"feedback-{mode}" for mode in modes}
    else:
        folders = run_pair(args.out, modes, args.time, args.seed, args.backends, args.collector)

    specs = [f"{folder}=feedback {mode}" for mode, folder in folders.items()]
    try:
        campaigns = {c.label.split()[-1]: c for c in load_campaigns(specs, ReportOptions())}
    except ReportError as e:
        sys.exit(f"bench_feedback: {e}")
    word = unit_word(c.unit for c in campaigns.values())
    for mode, c in campaigns.items():
        assert c.by_time is not None
        t = c.by_time
        print(f"\nfeedback {mode}: elapsed_s {word} pass_only (after each new-coverage step)")
        step = max(1, len(t.x) // 20)
        for i in [*range(0, len(t.x), step), len(t.x) - 1]:
            print(f"  {t.x[i]:9.0f} {t.branches[i]:8d} {t.pass_branches[i]:9d}")
    unique = unique_counts({m: c.covered for m, c in campaigns.items()})
    a = modes[0]
    print("\n                   total   pass-only   unique   tests")
    for mode, c in campaigns.items():
        print(f"feedback {mode:<8} {len(c.covered):7d}   {len(c.pass_covered):9d}   {unique[mode]:6d}   {c.tests:5d}")
    for b in modes[1:]:
        ratio = len(campaigns[a].covered) / len(campaigns[b].covered) if campaigns[b].covered else float("nan")
        uniq = unique[a] / unique[b] if unique[b] else float("inf")
        ta, tb = campaigns[a].by_time, campaigns[b].by_time
        assert ta is not None and tb is not None
        when = next((x for x, n in zip(ta.x, ta.branches) if n >= tb.branches[-1]), None)
        reach = f"{when / tb.x[-1]:.2f} of the time" if when is not None and tb.x[-1] else "never"
        print(f"ratios ({a} / {b}): total {ratio:.2f}x, unique {uniq:.2f}x; {a} reached {b}'s final {word} at {reach}")
    for mode, c in campaigns.items():
        assert c.by_time is not None
        late = [b for x, b in zip(c.by_time.x, c.by_time.branches) if x >= 0.9 * c.by_time.x[-1]]
        print(f"feedback {mode}: +{late[-1] - late[0] if late else 0} {word} in the last 10% of the time")
    # The full report (table, JSON/CSV, coverage over time and tests, Venn) of `nnsmith-cov report`.
    make_report(specs, args.out / "report", ReportOptions(quiet=True))
    print(f"report: {args.out / 'report'}; figure: {args.out / 'report' / 'figures' / 'coverage-time.png'}")


if __name__ == "__main__":
    main()
