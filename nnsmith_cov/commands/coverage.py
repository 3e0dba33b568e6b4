"""`nnsmith-cov coverage`: run one model under a coverage collector and print JSON."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from nnsmith_cov.flags import CliError, add_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("coverage", help="run one model under a coverage collector and print JSON")
    add_flags(p, "coverage")


def main(args: argparse.Namespace) -> int:
    import numpy as np

    from nnsmith_cov.campaign.measure import MeasureError, measure
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.coverage.collector import pass_filters
    from nnsmith_cov.coverage.summary import coverage_summary, format_summary

    settings = CaseSettings(backends=args.backends, timeout_s=args.timeout_s)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            m = measure(args.model_dir, settings, args.collector, args.cov_targets, Path(tmp) / "worker.log")
        except (MeasureError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    hits = m.result.hits
    covered = hits.index if hits is not None else np.zeros(0, np.uint32)
    filters = args.pass_filter or pass_filters(args.collector)
    out = coverage_summary(m.universe, covered, filters, args.top) | {
        "model": str(args.model_dir),
        "backends": args.backends,
        "status": m.result.status,
        "findings": [f.header() for f in m.result.findings],
    }
    print(format_summary(out), file=sys.stderr)
    print(json.dumps(out, indent=1))
    return 0
