"""Covered branches as JSON (ours; reads back as a campaign) and per-operator tables as CSV."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnsmith_cov import bounded_read
from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.universe import path_matches
from nnsmith_cov.report.model import Campaign, ReportError, key_file

BRANCHES_FORMAT = "nnsmith-cov-branches"
BRANCHES_SCHEMA = 1


def branches_json(c: Campaign) -> dict[str, Any]:
    return {
        "format": BRANCHES_FORMAT,
        "schema": BRANCHES_SCHEMA,
        "label": c.label,
        "collector": c.collector,
        "unit": c.unit,
        "universe": {"ident": c.universe_ident, "branches": c.universe_size, "pass_branches": c.pass_universe},
        "build": c.build,
        "pass_filters": list(c.pass_filters),
        "branches": sorted(c.covered),
    }


def write_json(c: Campaign, path: Path) -> None:
    write_atomic(path, json.dumps(branches_json(c), indent=1) + "\n")


def read_json(path: Path, label: str, pass_filters: Sequence[str] | None = None) -> Campaign:
    """A set written by `write_json` as a labelled campaign."""
    try:
        obj = bounded_read.read_json(path, max_bytes=1 << 30)  # a whole universe's keys: large, but bounded
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror or e})") from None
    except bounded_read.DataError as e:
        raise ReportError(str(e)) from None
    if not isinstance(obj, dict) or obj.get("format") != BRANCHES_FORMAT or obj.get("schema") != BRANCHES_SCHEMA:
        raise ReportError(f"{path}: not an nnsmith-cov branch set (format {BRANCHES_FORMAT}, schema 1)")
    keys, uni = obj.get("branches"), obj.get("universe") or {}
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or not isinstance(uni, dict):
        raise ReportError(f"{path}: damaged branch set")
    stored = obj.get("pass_filters")
    filters = tuple(pass_filters or (stored if isinstance(stored, list) else ()))
    covered = frozenset(keys)
    passes = frozenset(k for k in covered if any(path_matches(key_file(k), p) for p in filters))
    size, pass_size = uni.get("branches"), uni.get("pass_branches")
    return Campaign(
        label=label,
        source=str(path),
        origin="json",
        collector=str(obj.get("collector", "unknown")),
        unit=str(obj.get("unit", "unknown")),
        covered=covered,
        pass_covered=passes,
        pass_filters=filters,
        universe_size=size if isinstance(size, int) else None,
        pass_universe=pass_size if isinstance(pass_size, int) and not pass_filters else None,
        universe_ident=str(uni.get("ident") or ""),
        build={str(k): str(v) for k, v in (obj.get("build") or {}).items()},
    )


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    out = io.StringIO(newline="")
    if rows:
        w = csv.DictWriter(out, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_atomic(path, out.getvalue())
