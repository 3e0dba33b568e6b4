"""The comparison table: one row per campaign, on screen (rich), as JSON and as CSV."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnsmith_cov.report.compare import unique_counts
from nnsmith_cov.report.model import Campaign


def table_rows(campaigns: Sequence[Campaign]) -> list[dict[str, Any]]:
    """JSON/CSV-ready rows; percentages are of each campaign's own universe (None when unknown)."""
    unique = unique_counts({c.label: c.covered for c in campaigns})
    unique_pass = unique_counts({c.label: c.pass_covered for c in campaigns})
    rows = []
    for c in campaigns:
        rows.append(
            {
                "label": c.label,
                "source": c.source,
                "origin": c.origin,
                "collector": c.collector,
                "unit": c.unit,
                "build": c.fingerprint,
                "total": len(c.covered),
                "universe": c.universe_size,
                "total_pct": _pct(len(c.covered), c.universe_size),
                "pass_only": len(c.pass_covered),
                "pass_universe": c.pass_universe,
                "pass_pct": _pct(len(c.pass_covered), c.pass_universe),
                "unique": unique[c.label],
                "unique_pass": unique_pass[c.label],
                "tests": c.tests,
                "corpus": c.corpus,
                "findings": c.findings,
                "unique_signatures": c.unique_signatures,
                "internal_errors": c.internal_errors,
                "elapsed_s": None if c.elapsed_s is None else round(c.elapsed_s, 1),
                "time_budget_s": c.time_budget_s,
                "test_budget": c.test_budget,
                "feedback": c.feedback,
                "generator": c.generator,
            }
        )
    return rows


def _pct(part: int, whole: int | None) -> float | None:
    return round(100.0 * part / whole, 3) if whole else None


def print_table(rows: list[dict[str, Any]], notes: Sequence[str] = ()) -> None:
    """The table on the terminal; `notes` (collector, builds, budgets) under it."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title="coverage by campaign")
    for name, justify in (
        ("campaign", "left"),
        ("unit", "left"),
        ("total", "right"),
        ("% univ.", "right"),
        ("pass-only", "right"),
        ("% pass", "right"),
        ("unique", "right"),
        ("tests", "right"),
        ("corpus", "right"),
        ("findings", "right"),
        ("internal", "right"),
        ("time (s)", "right"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        t.add_row(
            r["label"],
            r["unit"],
            str(r["total"]),
            _fmt(r["total_pct"], "{:.2f}"),
            str(r["pass_only"]),
            _fmt(r["pass_pct"], "{:.2f}"),
            str(r["unique"]),
            _fmt(r["tests"]),
            _fmt(r["corpus"]),
            _fmt(r["findings"]),
            _fmt(r["internal_errors"]),
            _fmt(r["elapsed_s"], "{:.0f}"),
        )
    console = Console()
    if not console.is_terminal:  # a pipe or log file: rich would squeeze the table into 80 columns
        console = Console(width=160)
    console.print(t)
    for line in notes:
        console.print(line, highlight=False, markup=False)


def _fmt(x: object, spec: str = "{}") -> str:
    return "-" if x is None else spec.format(x)


def describe(campaigns: Sequence[Campaign]) -> list[str]:
    """What produced the numbers: collector, build and budget of each campaign, one line each."""
    out = []
    for c in campaigns:
        budget = []
        if c.time_budget_s is not None:
            budget.append(f"time budget {c.time_budget_s:.0f} s")
        if c.test_budget is not None:
            budget.append(f"test budget {c.test_budget}")
        if c.elapsed_s is not None:
            budget.append(f"ran {c.elapsed_s:.0f} s")
        build = ", ".join(f"{k} {v}" for k, v in sorted(c.build.items())) or "build unknown"
        extra = f"; {', '.join(budget)}" if budget else ""
        out.append(f"{c.label}: {c.collector} collector ({c.unit}), {build}, fingerprint {c.fingerprint}{extra}")
    return out
