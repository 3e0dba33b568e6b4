"""`nnsmith-cov` and `python -m nnsmith_cov`: the command, with Ctrl-C during its imports
(torch, onnx and the backends take seconds to load) ending as quietly as Ctrl-C later does."""

from __future__ import annotations

import sys


def run() -> int:
    """The console script's entry: import the command line, then run it."""
    try:
        from nnsmith_cov.cli import main
    except KeyboardInterrupt:
        print("nnsmith-cov: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
