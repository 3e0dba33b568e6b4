"""Summaries of covered branches against a universe: totals, pass-only, per-file top list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nnsmith_cov.coverage.universe import Universe


def coverage_summary(universe: Universe, covered: np.ndarray, pass_filters: Sequence[str], top: int = 15) -> dict:
    """JSON-ready figures for the branch indices `covered` (unique) of `universe`; a composite's
    universe gives one summary per part (branches of different collectors do not add up)."""
    if universe.parts:
        parts = [coverage_summary(u, idx, pass_filters, top) for u, idx in universe.split_index(covered)]
        return {"collector": universe.collector, "universe": {"ident": universe.ident}, "parts": parts}
    covered = np.asarray(covered, dtype=np.int64)
    n = len(universe)
    passes = universe.file_mask(pass_filters)
    in_passes = int(np.count_nonzero(passes[covered])) if len(covered) else 0
    per_file = universe.per_file(covered)
    totals = np.bincount(universe.file_of, minlength=len(universe.files))
    index = {f: i for i, f in enumerate(universe.files)}
    ranked = sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {
        "collector": universe.collector,
        "universe": {"ident": universe.ident, "branches": n, "files": len(universe.files), "build": universe.build},
        "covered": len(covered),
        "covered_pct": _pct(len(covered), n),
        "pass_only": {
            "filters": list(pass_filters),
            "covered": in_passes,
            "branches": int(np.count_nonzero(passes)),
            "covered_pct": _pct(in_passes, int(np.count_nonzero(passes))),
        },
        "files_reached": len(per_file),
        "top_files": [{"file": f, "covered": c, "branches": int(totals[index[f]])} for f, c in ranked],
    }


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


def format_summary(s: dict[str, Any]) -> str:
    """A few readable lines of a `coverage_summary`."""
    if "parts" in s:
        return "\n".join(format_summary(part) for part in s["parts"])
    p = s["pass_only"]
    lines = [
        f"{s['collector']} collector, universe {s['universe']['ident']}: "
        f"{s['covered']} / {s['universe']['branches']} branches ({s['covered_pct']:.2f}%), "
        f"pass-only {p['covered']} / {p['branches']} ({p['covered_pct']:.2f}%)",
    ]
    lines += [f"  {t['covered']:>6} / {t['branches']:<6} {t['file']}" for t in s["top_files"]]
    return "\n".join(lines)
