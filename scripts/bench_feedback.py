#!/usr/bin/env python3
"""Feedback on vs off at equal wall time: TVM under the python collector.

Runs two campaigns side by side, one process each, so that they share the machine
fairly (one worker each; with 2 cores, one core each): `--feedback on` and
`--feedback off`, same seed, same time. Then reads both corpora and prints each
timeline, total, pass-only and unique branches (reached by one campaign only), and
writes the coverage-over-time figure.

    python scripts/bench_feedback.py [--time 30m] [--seed 1] [--out out/bench-feedback]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from nnsmith_cov.corpus.store import CorpusStore


def run_pair(out: Path, time_spec: str, seed: int, backends: str) -> dict[str, Path]:
    folders = {mode: out / f"feedback-{mode}" for mode in ("on", "off")}
    procs = []
    for mode, folder in folders.items():
        argv = [sys.executable, "-m", "nnsmith_cov.cli", "fuzz", "-o", str(folder), "--backends", backends]
        argv += ["--collector", "python", "--feedback", mode, "--time", time_spec, "--seed", str(seed)]
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
    ap.add_argument("--out", type=Path, default=Path("out/bench-feedback"))
    ap.add_argument("--reuse", action="store_true", help="only report on campaigns already in --out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        folders = {mode: args.out / f"feedback-{mode}" for mode in ("on", "off")}
    else:
        folders = run_pair(args.out, args.time, args.seed, args.backends)

    covered, timelines, passes = {}, {}, {}
    for mode, folder in folders.items():
        with CorpusStore.open(folder / "lmdb", readonly=True) as store:
            virgin = store.virgin()
            assert virgin is not None, f"{folder}: no coverage map"
            covered[mode] = set(virgin.covered().tolist())
            timelines[mode] = store.timeline()
            passes[mode] = timelines[mode][-1].pass_branches if timelines[mode] else 0
    for mode, rows in timelines.items():
        print(f"\nfeedback {mode}: elapsed_s tests branches pass_only corpus findings")
        step = max(1, len(rows) // 20)
        for r in rows[::step] + rows[-1:]:
            print(
                f"  {r.elapsed_s:9.0f} {r.tests:6d} {r.branches:8d} {r.pass_branches:9d} {r.corpus:6d} {r.findings:8d}"
            )
    on, off = covered["on"], covered["off"]
    print("\n              total   pass-only   unique")
    print(f"feedback on  {len(on):7d}   {passes['on']:9d}   {len(on - off):6d}")
    print(f"feedback off {len(off):7d}   {passes['off']:9d}   {len(off - on):6d}")
    ratio = len(on) / len(off) if off else float("nan")
    uniq = len(on - off) / len(off - on) if off - on else float("inf")
    print(f"ratios: total {ratio:.2f}x, unique {uniq:.2f}x")
    for mode, rows in timelines.items():
        last = [r.branches for r in rows if r.elapsed_s >= 0.9 * rows[-1].elapsed_s]
        print(f"feedback {mode}: +{last[-1] - last[0] if last else 0} branches in the last 10% of the time")
    plot(timelines, args.out / "feedback_coverage_time.png")
    print(f"figure: {args.out / 'feedback_coverage_time.png'}")


def plot(timelines: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for mode, rows in timelines.items():
        t = np.array([r.elapsed_s for r in rows]) / 60
        ax.plot(t, [r.branches for r in rows], label=f"feedback {mode}")
    ax.set_xlabel("time (minutes)")
    ax.set_ylabel("branches covered")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=150)


if __name__ == "__main__":
    main()
