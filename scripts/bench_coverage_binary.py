#!/usr/bin/env python3
"""Alias of `bench_coverage.py --collector binary` (the binary collector's costs); same options.

python scripts/bench_coverage_binary.py [--models 30] [--nodes 10] [--seed 0] [--models-file PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_coverage import main  # noqa: E402

if __name__ == "__main__":
    main(["--collector", "binary", *sys.argv[1:]])
