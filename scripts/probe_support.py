#!/usr/bin/env python3
"""Probe (or read from the cache) which operators and dtype signatures each backend accepts;
print the counts per class, the refusals and crashes grouped by reason, and the wall time.

    python scripts/probe_support.py                 # ort tvm, default cache
    python scripts/probe_support.py tvm --refresh   # probe again from scratch
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from nnsmith_cov.campaign.op_support import default_cache_dir, load_or_probe, probe_crashes, summary_rows
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.oracle.signature import normalize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backends", nargs="*", default=["ort", "tvm"])
    ap.add_argument("--cache", type=Path, default=default_cache_dir())
    ap.add_argument("--refresh", action="store_true", help="ignore the cache")
    args = ap.parse_args()
    worker = WorkerHandle(args.backends, args.cache / "probe-worker.log")
    t0 = time.perf_counter()
    try:
        tables = load_or_probe(worker, args.backends, ALL_OPS, args.cache, refresh=args.refresh)
    finally:
        worker.close()
    print(f"{sum(len(op.sigs) for op in ALL_OPS)} (op, signature) pairs, {time.perf_counter() - t0:.1f} s")
    for backend, counts in summary_rows(tables):
        line = ", ".join(f"{n} {cls}" for cls, n in counts.items())
        print(f"\n== {backend} {tables[backend].version}: {line}")
        for cls in ("refused", "crash"):
            reasons: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
            for op, sigs in sorted(tables[backend].entries.items()):
                for key, found in sigs.items():
                    if found.cls == cls:
                        reasons[normalize(found.detail)[:110]].append(f"{op}({key})")
            for reason, where in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
                more = " ..." if len(where) > 8 else ""
                print(f"{cls:>8} {len(where):4d}  {reason}\n      {', '.join(where[:8])}{more}")
    crashes = probe_crashes(tables, ALL_OPS)
    print(f"\n{len(crashes)} probe crashes (findings the campaign files):")
    for c in crashes:
        print(f"  {c.backend:6} {c.op}({c.sig_key}) #{c.instance}: {c.status[:120]}")


if __name__ == "__main__":
    main()
