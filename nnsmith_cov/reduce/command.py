"""`nnsmith-cov reduce BUNDLE [-o OUT]`: shrink a finding to the few ops it needs.

Exit status: 0 when OUT was written, 1 when the bundle does not reproduce here, 2 for bad
input (not a bundle, a damaged one, an output folder that is not a bundle's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nnsmith_cov.flag_values import duration
from nnsmith_cov.reduce.engine import DEFAULT_BUDGET_S


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("reduce", help="shrink a finding's bundle to a minimal one with a standalone repro.py")
    fill_parser(p)
    return p


def fill_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", type=Path, help="a finding's bundle folder (RUN/findings/...)")
    p.add_argument(
        "-o", "--out", type=Path, default=None, help="where the reduced bundle goes (default BUNDLE/reduced)"
    )
    p.add_argument(
        "--time",
        type=duration,
        default=DEFAULT_BUDGET_S,
        help=f"budget, e.g. 90s or 2m (default {DEFAULT_BUDGET_S:g} s); then the best so far is written",
    )
    p.add_argument("--timeout-s", type=duration, default=None, help="per worker request (default: the bundle's)")
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="trust the plug-in backend the bundle names",
    )


def main(args: argparse.Namespace) -> int:
    from nnsmith_cov.oracle.bundle import BundleError
    from nnsmith_cov.reduce.engine import ReduceError, reduce_bundle

    try:
        result = reduce_bundle(args.bundle, args.out, args.time, args.plugin, args.timeout_s)
    except BundleError as e:
        print(f"nnsmith-cov reduce: error: {e}", file=sys.stderr)
        return 2
    except ReduceError as e:
        print(f"nnsmith-cov reduce: {e}", file=sys.stderr)
        return 1 if "does not reproduce" in str(e) else 2
    info = result.to_json()
    cut = " (budget spent: the best so far)" if result.out_of_time else ""
    print(f"{info['original_ops']} -> {info['reduced_ops']} ops: {info['pattern']}{cut}")
    print(f"  {result.steps} edits kept, {result.candidates_run} candidates run, {result.seconds:.1f} s")
    print(f"  finding: {result.reduced_signature}")
    print(f"  -> {result.out}" + (f"  (python {result.out / result.script.name})" if result.script else ""))
    return 0
