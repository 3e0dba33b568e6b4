#!/usr/bin/env python3
"""A full comparison: every generator x feedback setting on the same backends and collector.

Each configuration is one `nnsmith-cov fuzz` campaign of `--time` (default 4h) into
OUT/<label>; `--jobs N` runs N of them at once (each then gets its share of the
cores: only compare campaigns run with the same --jobs). Campaigns already
finished in OUT are kept and unfinished ones resumed (`fuzz --resume`; --fresh
starts them over), so an interrupted experiment picks up where it stopped.
Then `nnsmith-cov report` over all of them writes tables and figures to
OUT/report.

    python scripts/experiment.py --time 5m --out out/experiment
    python scripts/experiment.py --configs nnsmith-on,nnsmith-off --time 4h --jobs 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GENERATORS = ("nnsmith", "graphfuzzer", "lemon", "tzer")
TVM_ONLY = ("tzer",)  # generators that test TVM's TIR: their campaigns run on tvm alone


@dataclass(frozen=True)
class Config:
    generator: str
    feedback: str  # "on" | "off"

    @property
    def label(self) -> str:
        return f"{self.generator}-{self.feedback}"


# The paper's comparison: ours with and without feedback, and the baselines as they were
# designed: GraphFuzzer and LEMON without coverage feedback, Tzer with its own (its seed pool).
DEFAULT_CONFIGS = "nnsmith-on,nnsmith-off,graphfuzzer-off,lemon-off,tzer-on"


def parse_configs(text: str) -> list[Config]:
    configs = []
    for item in text.split(","):
        generator, _, feedback = item.strip().rpartition("-")
        if generator not in GENERATORS or feedback not in ("on", "off"):
            raise SystemExit(f"error: bad configuration {item!r} (want GENERATOR-on|off, GENERATOR in {GENERATORS})")
        configs.append(Config(generator, feedback))
    return configs


def finished(folder: Path) -> bool:
    """The campaign's own clock (stats.json) reached the time its config asked for."""
    try:
        want = json.loads((folder / "config.json").read_text())["time_s"]
        done = json.loads((folder / "stats.json").read_text())["elapsed_s"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return want is not None and done >= want


def fuzz_argv(cfg: Config, folder: Path, args: argparse.Namespace) -> list[str]:
    base = [sys.executable, "-m", "nnsmith_cov.cli", "fuzz"]
    if args.jobs > 1:  # campaigns share the cores: no generator process beside each worker
        base += ["--gen-process", "off"]
    if (folder / "config.json").exists():
        return [*base, "--resume", str(folder)]  # its own settings, to its own time
    argv = [*base, "-o", str(folder), "--generator", cfg.generator]
    backends = "tvm" if cfg.generator in TVM_ONLY else args.backends
    argv += ["--feedback", cfg.feedback, "--backends", backends, "--collector", args.collector]
    argv += ["--time", args.time, "--seed", str(args.seed)]
    return argv


def run_all(configs: list[Config], args: argparse.Namespace) -> None:
    todo = []
    for cfg in configs:
        folder = args.out / cfg.label
        if folder.exists() and args.fresh:
            shutil.rmtree(folder)
        if finished(folder):
            print(f"{cfg.label}: finished earlier, kept")
        else:
            todo.append(cfg)
    running: list[tuple[Config, subprocess.Popen, object, float]] = []
    while todo or running:
        while todo and len(running) < args.jobs:
            cfg = todo.pop(0)
            log = open(args.out / f"{cfg.label}.log", "w")
            proc = subprocess.Popen(fuzz_argv(cfg, args.out / cfg.label, args), stdout=log, stderr=subprocess.STDOUT)
            print(f"{cfg.label}: started (log {log.name})", flush=True)
            running.append((cfg, proc, log, time.monotonic()))
        time.sleep(1)
        for item in list(running):
            cfg, proc, log, t0 = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            if proc.returncode != 0:
                sys.exit(f"error: campaign {cfg.label} failed (exit {proc.returncode}); see {log.name}")
            print(f"{cfg.label}: done in {time.monotonic() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", default="4h", help="wall time of each campaign (default 4h)")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma list (default {DEFAULT_CONFIGS})")
    ap.add_argument("--backends", default="tvm", help="backends under test (default tvm)")
    ap.add_argument("--collector", default="python", help="coverage collector (default python)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="campaigns at once (default 1: one after another)")
    ap.add_argument("--out", type=Path, default=Path("out/experiment"))
    ap.add_argument("--fresh", action="store_true", help="rerun campaigns already finished in --out")
    ap.add_argument("--report-only", action="store_true", help="only report on the campaigns in --out")
    args = ap.parse_args()
    if args.jobs < 1:
        sys.exit("error: --jobs must be at least 1")
    configs = parse_configs(args.configs)
    if any(c.generator in TVM_ONLY for c in configs) and "tvm" not in args.backends.split(","):
        sys.exit(f"error: {', '.join(TVM_ONLY)} tests TVM only: include tvm in --backends")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_all(configs, args)
    folders = [f"{args.out / c.label}={c.label}" for c in configs]
    argv = [sys.executable, "-m", "nnsmith_cov.cli", "report", *folders, "-o", str(args.out / "report")]
    sys.exit(subprocess.call(argv))


if __name__ == "__main__":
    main()
