"""`python -m nnsmith_cov.reduce BUNDLE [-o OUT]`: the reduce command before the CLI names it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nnsmith_cov.reduce.command import fill_parser, main


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as the CLI does
        print(f"nnsmith-cov reduce: error: {message}", file=sys.stderr)
        sys.exit(2)


def run(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="nnsmith-cov reduce")
    fill_parser(parser)
    try:
        return main(parser.parse_args(argv))
    except KeyboardInterrupt:
        print("nnsmith-cov reduce: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run())
