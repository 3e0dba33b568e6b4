"""Build the native systems under test with instrumentation/ into the cache (`make instrumented`).

    python scripts/build_instrumented.py [onnxoptimizer]        # from its PyPI sdist
    python scripts/build_instrumented.py tvm --source DIR       # from a TVM tree (DEVELOPERS.md)
        [--mode sancov|profile] [--cmake-arg -DKEY=VALUE ...]

`tvm` is never built by default (hours on two cores) and needs --source.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nnsmith_cov.coverage.llvm_builds import BuildError, InstrumentedBuild, build_onnxoptimizer, find_build
from nnsmith_cov.coverage.llvm_tvm import build_tvm, campaign_hint, check_source, find_tvm_build

DEFAULT_TARGETS = ("onnxoptimizer",)
KNOWN = ("onnxoptimizer", "tvm")


def _build(name: str, args: argparse.Namespace) -> InstrumentedBuild:
    if name == "tvm":
        return build_tvm(Path(args.source), args.mode, args.force, args.jobs, args.verbose, args.cmake_arg)
    return build_onnxoptimizer(force=args.force, jobs=args.jobs, echo=args.verbose)


def _find(name: str, args: argparse.Namespace) -> InstrumentedBuild | None:
    if name != "tvm":
        return find_build(name)
    check_source(Path(args.source))  # a wrong folder is said before anything starts
    return find_tvm_build(Path(args.source), args.mode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "targets", nargs="*", metavar="TARGET", help=f"what to build: {', '.join(KNOWN)} (default: onnxoptimizer)"
    )
    ap.add_argument("--force", action="store_true", help="rebuild even when a finished build exists")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: CPU count)")
    ap.add_argument("--verbose", action="store_true", help="compiler output on the terminal, not only in build.log")
    ap.add_argument("--source", default="", help="tvm: the TVM source tree to build")
    ap.add_argument("--mode", choices=("sancov", "profile"), default="sancov", help="tvm: counters or source coverage")
    ap.add_argument("--cmake-arg", action="append", default=[], help="tvm: an extra configure argument (repeatable)")
    args = ap.parse_args()
    unknown = [t for t in args.targets if t not in KNOWN]
    if unknown:
        ap.error(f"unknown target {unknown[0]!r} (known: {', '.join(KNOWN)})")
    if "tvm" in args.targets and not args.source:
        print("tvm: no TVM source given (--source DIR; DEVELOPERS.md says how to bring one here)", file=sys.stderr)
        return 2
    for name in args.targets or list(DEFAULT_TARGETS):
        try:
            found = None if args.force else _find(name, args)
            if found is not None:
                print(f"{name}: already built in {found.root} ({found.build_s:.0f} s on {found.marker['built_at']})")
            else:
                print(f"{name}: building (log in the build folder) ...", flush=True)
                t0 = time.monotonic()
                found = _build(name, args)
                print(f"{name}: built in {time.monotonic() - t0:.0f} s -> {found.extension}")
        except BuildError as e:
            print(f"{name}: {e}" if not str(e).startswith(f"{name}:") else str(e), file=sys.stderr)
            return 1
        if name == "tvm":
            print("measure it with:\n" + campaign_hint(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
