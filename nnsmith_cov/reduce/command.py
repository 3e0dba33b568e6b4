"""`nnsmith-cov reduce BUNDLE [-o OUT]`: shrink a finding to the few ops it needs.

Exit status: 0 when OUT was written, 1 when the bundle does not reproduce here, 2 for bad
input (not a bundle, a damaged one, an output folder that is not a bundle's).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nnsmith_cov.flags import add_flags


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("reduce", help="shrink a finding's bundle to a minimal one with a standalone repro.py")
    fill_parser(p)
    return p


def fill_parser(p: argparse.ArgumentParser) -> None:
    add_flags(p, "reduce")  # its rows are in nnsmith_cov/flags.py


def main(args: argparse.Namespace) -> int:
    from nnsmith_cov.oracle.bundle import BundleError
    from nnsmith_cov.reduce.engine import ReduceError, reduce_bundle

    try:
        result = reduce_bundle(args.bundle, args.out, args.time, args.plugin or [], args.timeout_s)
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
