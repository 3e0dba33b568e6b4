"""The `nnsmith-cov` command: the subcommands it registers, and how their errors end."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nnsmith_cov import __version__
from nnsmith_cov.commands import batch, coverage, fuzz, generate, ops, repro
from nnsmith_cov.flags import CliError, OneLineParser
from nnsmith_cov.reduce import command as reduce
from nnsmith_cov.replay import command as replay
from nnsmith_cov.report import command as report
from nnsmith_cov.report import triage

# Every subcommand: a module with add_parser(subparsers) and main(args) -> int, in --help order.
COMMANDS = [generate, batch, fuzz, coverage, repro, reduce, triage, ops, report, replay]

__all__ = ["COMMANDS", "CliError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand's parser knows the `main` that runs it."""
    parser = OneLineParser(prog="nnsmith-cov", description="Coverage-guided fuzzing of deep-learning compilers.")
    parser.add_argument("--version", action="version", version=f"nnsmith-cov {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for module in COMMANDS:
        before = set(sub.choices)
        module.add_parser(sub)
        for name in set(sub.choices) - before:
            sub.choices[name].set_defaults(command_main=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # which flags were given (fuzz --resume)
        if getattr(args, "binary_module", None):  # the binary part's target, also inside a composite
            args.cov_targets = [*args.cov_targets, f"binary={args.binary_module}"]
        return args.command_main(args)
    except CliError as e:
        print(f"nnsmith-cov: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nnsmith-cov: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
