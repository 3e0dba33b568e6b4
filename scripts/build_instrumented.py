"""Build the native systems under test with instrumentation/ into the cache (`make instrumented`)."""

from __future__ import annotations

import argparse
import sys
import time

from nnsmith_cov.coverage.llvm_builds import BuildError, build_onnxoptimizer, find_build

TARGETS = {"onnxoptimizer": (build_onnxoptimizer, lambda: find_build("onnxoptimizer"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("targets", nargs="*", metavar="TARGET", help=f"what to build: {', '.join(TARGETS)} (default: all)")
    ap.add_argument("--force", action="store_true", help="rebuild even when a finished build exists")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: CPU count)")
    ap.add_argument("--verbose", action="store_true", help="compiler output on the terminal, not only in build.log")
    args = ap.parse_args()
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target {unknown[0]!r} (known: {', '.join(TARGETS)})")
    for name in args.targets or list(TARGETS):
        build, find = TARGETS[name]
        found = None if args.force else find()
        if found is not None:
            print(f"{name}: already built in {found.root} ({found.build_s:.0f} s on {found.marker['built_at']})")
            continue
        print(f"{name}: building (a few minutes; log in the build folder) ...", flush=True)
        t0 = time.monotonic()
        try:
            done = build(force=args.force, jobs=args.jobs, echo=args.verbose)
        except BuildError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return 1
        print(f"{name}: built in {time.monotonic() - t0:.0f} s -> {done.extension}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
