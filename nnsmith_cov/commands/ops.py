"""`nnsmith-cov ops`: list the operator specs."""

from __future__ import annotations

import argparse
from typing import Any

from nnsmith_cov.flags import add_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ops", help="list the operator specs")
    add_flags(p, "ops")


def main(args: argparse.Namespace) -> int:
    from nnsmith_cov.ops import ALL_OPS

    for op in ALL_OPS:
        dtypes = sorted({d.value for s in op.sigs for d in s[0]})
        mark = "  [vulnerable]" if op.vulnerable else ""
        print(f"{op.name():<20} arity {op.arity()}  in {','.join(dtypes)}{mark}")
    print(f"{len(ALL_OPS)} operators")
    return 0
