"""Disk and memory of a campaign: read from the kernel, shown in stats.json and on the status
screen, recorded in the timeline (older rows still read) and plotted by `report`."""

from __future__ import annotations

import os
from pathlib import Path

import msgpack

from nnsmith_cov.campaign.resources import disk_kb, rss_kb
from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.status import log_line, result_rows
from nnsmith_cov.corpus import CorpusStore, TimelineRow
from nnsmith_cov.corpus.records import decode_timeline
from nnsmith_cov.report import plots
from nnsmith_cov.report.model import Campaign


def test_resources_are_read_from_the_kernel(tmp_path: Path) -> None:
    assert rss_kb(os.getpid()) > 1000
    assert rss_kb(2**22 + 12345) == 0  # no such process: 0, not an error
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 100_000)
    assert 90 <= disk_kb(tmp_path) <= 200
    assert disk_kb(tmp_path / "missing") == 0


def test_stats_and_status_show_disk_and_memory() -> None:
    st = RunStats(disk_kb=300 << 10, rss_kb=500 << 10, worker_rss_kb=[1200 << 10, 800 << 10], corpus_kb=200 << 10)
    st.recycles, st.blobs_dropped = 3, 7
    res = st.to_json()["resources"]
    assert res == {"disk_mb": 300.0, "corpus_mb": 200.0, "rss_mb": 500.0, "worker_rss_mb": [1200.0, 800.0]}
    rows = dict(result_rows(st, 10.0))
    assert rows["disk"] == "300M (corpus 200M, 7 dropped)"
    assert rows["memory"] == "500M, workers 1200M+800M (3 recycled)"
    assert "disk 300M rss 500M+2000M" in log_line(st, now=10.0)
    before = st.to_json()
    again = RunStats()
    again.restore(before)
    assert again.blobs_dropped == 7 and again.recycles == 0  # recycles count this process's workers


def test_timeline_rows_of_older_corpora_read_as_unmeasured() -> None:
    old = {"elapsed_s": 5.0, "tests": 3, "branches": 9, "pass_branches": 1, "corpus": 2, "findings": 0}
    row = decode_timeline(msgpack.packb(old))
    assert (row.disk_kb, row.rss_kb, row.worker_rss_kb) == (0, 0, 0) and row.tests == 3


def test_report_plots_disk_and_memory_over_time(tmp_path: Path) -> None:
    path = tmp_path / "run" / "lmdb"
    with CorpusStore.create(path, {}, {}, None) as s:
        for k in range(4):
            row = TimelineRow(60.0 * k, k, 0, 0, 0, 0, 1000 * (k + 1), 400_000, 900_000 + k)
            s.commit(k, elapsed_s=60.0 * k, timeline=row)
    c = Campaign("run", str(tmp_path / "run"), "corpus", "python", "arc", frozenset(), frozenset(), ())
    (tmp_path / "fig").mkdir()
    made = plots.resources_figure([c], tmp_path / "fig" / "resources")
    assert [p.suffix for p in made] == [".png", ".svg"]
    svg = (tmp_path / "fig" / "resources.svg").read_text()
    assert all(f'id="series-0-{k}"' in svg for k in ("disk", "rss", "workers"))
    imported = Campaign("x", str(tmp_path), "lcov", "lcov", "lcov-line", frozenset(), frozenset(), ())
    assert plots.resources_figure([imported], tmp_path / "none") == []  # nothing recorded: no figure


def test_report_tables_tests_per_second_disk_and_memory_per_interval(tmp_path: Path) -> None:
    from nnsmith_cov.report.command import ReportOptions, make_report
    from nnsmith_cov.report.resources import resource_intervals

    # 70 minutes, a point a minute, 2 tests a minute then 1 from minute 45: 15-minute rows.
    rows, tests = [], 0
    for m in range(71):
        tests += 0 if m == 0 else (2 if m <= 45 else 1)
        rows.append(TimelineRow(60.0 * m, tests, 100 + m, 0, tests, 0, (1000 + 10 * m) << 10, 500 << 10, 700 << 10))
    table = resource_intervals([TimelineRow(0.0, 0, 0, 0, 0, 0), *rows])  # an unmeasured point is skipped
    assert [r["minute"] for r in table] == [15.0, 30.0, 45.0, 60.0, 70.0]
    assert [r["tests_per_s"] for r in table[:3]] == [round(2 / 60, 3)] * 3
    assert table[3]["tests_per_s"] == round(1 / 60, 3) and table[3]["tests"] == 105
    assert table[-1]["disk_mb"] == 1700.0 and table[0]["rss_mb"] == 500.0 and table[0]["worker_rss_mb"] == 700.0
    assert resource_intervals(rows, every_s=600)[0]["minute"] == 10.0
    assert resource_intervals([]) == []
    # A last point seconds after an interval's end closes that interval, not a row of its own.
    late = TimelineRow(60.0 * 70 + 2, tests + 1, 0, 0, 0, 0, 1 << 10, 1 << 10, 1 << 10)
    assert [r["minute"] for r in resource_intervals([*rows, late], every_s=600)][-2:] == [60.0, 70.0]
    # `report` writes it per campaign beside the table.
    from test_report import fake_universe

    config = {"seed": 1, "time_s": 4200.0, "feedback": True, "collector": "python", "pass_filters": None}
    with CorpusStore.create(tmp_path / "run" / "lmdb", config, {}, fake_universe()) as s:
        for k, row in enumerate(rows):
            s.commit(k, elapsed_s=row.elapsed_s, timeline=row)
    report = make_report([str(tmp_path / "run")], tmp_path / "out", ReportOptions(quiet=True, figures=False))
    written = [p for p in report.files if p.parent.name == "resources"]
    assert len(written) == 1 and written[0].read_text().splitlines()[0].startswith("minute,tests,tests_per_s")
    assert len(written[0].read_text().splitlines()) == 1 + len(table)
