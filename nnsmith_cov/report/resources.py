"""A long campaign's health per interval: tests/s, disk and memory, read from its timeline.

The figure (`plots.resources_figure`) shows the curves; this table gives the numbers a soak
run is judged by (is tests/s holding, is memory flat, how much disk per hour), one row per
interval: 15 minutes for campaigns of an hour or more, else one minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnsmith_cov.corpus.records import TimelineRow


def interval_for(duration_s: float) -> float:
    return 900.0 if duration_s >= 3600 else 60.0


def resource_intervals(rows: Sequence[TimelineRow], every_s: float | None = None) -> list[dict[str, Any]]:
    """The last timeline point at or before each interval's end (and the campaign's last point),
    with the tests/s of the interval it closes; [] without measured points."""
    points = sorted((r for r in rows if r.disk_kb or r.rss_kb), key=lambda r: r.elapsed_s)
    if not points:
        return []
    every = every_s or interval_for(points[-1].elapsed_s)
    picked: list[TimelineRow] = []
    for k in range(1, int(points[-1].elapsed_s // every) + 1):
        before = [r for r in points if r.elapsed_s <= k * every]
        if before and (not picked or before[-1] is not picked[-1]):
            picked.append(before[-1])
    if picked and picked[-1] is not points[-1] and points[-1].elapsed_s - picked[-1].elapsed_s < every / 10:
        picked[-1] = points[-1]  # the campaign's last point, seconds after an interval's end: one row
    elif not picked or picked[-1] is not points[-1]:
        picked.append(points[-1])
    out: list[dict[str, Any]] = []
    prev_t, prev_tests = 0.0, 0
    for r in picked:
        span = r.elapsed_s - prev_t
        out.append(
            {
                "minute": round(r.elapsed_s / 60, 1),
                "tests": r.tests,
                "tests_per_s": round((r.tests - prev_tests) / span, 3) if span > 0 else None,
                "disk_mb": round(r.disk_kb / 1024, 1),
                "rss_mb": round(r.rss_kb / 1024, 1),
                "worker_rss_mb": round(r.worker_rss_kb / 1024, 1),
                "branches": r.branches,
                "corpus": r.corpus,
                "findings": r.findings,
            }
        )
        prev_t, prev_tests = r.elapsed_s, r.tests
    return out
