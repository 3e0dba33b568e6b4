"""The campaign's status: the screen's boxes, the plain log lines, and `fuzz` choosing between them."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.status import Ticker, log_console, log_line, recent_rate, screen
from nnsmith_cov.cli import main
from nnsmith_cov.feedback.scheduler import Scheduler

# A scheduler summary as `Scheduler.summary()` shapes it, with numbers easy to look for.
ARMS = {
    "feedback": True,
    "tests": 700,
    "rate": 0.125,
    "op": [["Conv2d", 0.04], ["Add", 0.03], ["Relu", 0.02], ["MatMul", 0.015], ["Tanh", 0.01], ["Neg", 0.005]],
    "direction": [["forward", 0.6], ["backward", 0.4]],
    "nodes": [[10, 0.5], [20, 0.3], [5, 0.2]],
    "seeded": [["fresh", 0.7], ["seeded", 0.3]],
    "opset": [[17, 0.5], [20, 0.25], [13, 0.25]],
    "dynamic": [["static", 0.75], ["dynamic", 0.25]],
}
LOG = re.compile(r"\[\d+:\d\d:\d\d\] tests \d+ \(\d+\.\d\d/s\) passed \d+ no-values \d+.*")


def _stats() -> RunStats:
    """Twelve minutes of a campaign, every counter distinct."""
    st = RunStats(
        tests=713, executed=690, passed=650, no_values=9, gen_failed=2, infeasible=3, internal_errors=1, restarts=4
    )
    st.branches, st.pass_branches, st.universe = 4512, 405, 105304
    st.cov_tests, st.corpus, st.last_new_s, st.last_unique_s = 111, 115, 648.0, 500.0
    st.starts.extend(660.0 + i for i in range(60))  # one start a second over the last minute
    st.findings.update({"crash/compile/tvm": 20, "crash/execute/ort": 10, "inconsistency/execute/tvm": 12})
    st.signatures.update({f"signature {i}": 1 for i in range(25)})
    st.stage_ms["generate"] = [1000.0] * 100 + [10.0] * 200  # the medians look at the latest 200 only
    st.stage_ms["prepare"] = [400.0]
    for stage, ms in (("import", 1.5), ("compile", 3.5), ("execute", 0.5)):
        st.stage_ms[f"ort.{stage}"] = [ms]
    st.stage_ms["tvm.compile"] = [900.0]
    return st


def _text(renderable, width: int = 120) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _flat(text: str) -> str:
    """Whitespace runs as one space: labels are right-aligned in their boxes."""
    return " ".join(text.split())


def test_screen_shows_every_box_with_its_numbers():
    text = _text(screen(_stats(), now=720.0, limit_s=4 * 3600, max_tests=1000, arms=ARMS, title="camp · ort,tvm"))
    flat = _flat(text)
    for title in ("process timing", "overall results", "coverage", "findings", "stage timings", "top arms"):
        assert f"─ {title}" in text
    assert "camp · ort,tvm" in flat
    # process timing
    assert "run time 0:12:00 / 4:00:00" in flat
    assert "last new cov 0:01:12 ago" in flat and "last new finding 0:03:40 ago" in flat
    # overall results
    assert "tests 713 / 1000" in flat and "executed 690, passed 650" in flat
    assert "no values 9, gen failed 2" in flat and "infeasible 3 dropped" in flat
    assert "tests/s 1.00 (1 min), 0.99 all" in flat and "restarts 4, internal errors 1" in flat
    # coverage
    assert "branches 4512/105304 (4.28%)" in flat and "pass-only 405" in flat
    assert "corpus 115" in flat and "new-cov tests 111" in flat
    # findings
    assert "crash 30: compile/tvm 20, execute/ort 10" in flat and "inconsistency 12: execute/tvm 12" in flat
    assert "unique 25 signatures" in flat
    # stage timings: the latest 200 generations took 10 ms
    assert "last 200 tests" in flat
    assert "test generate 10.0 prepare 400.0" in flat
    assert "ort import 1.5 compile 3.5 execute 0.5" in flat and "tvm compile 900.0" in flat
    # top arms
    assert "ops Conv2d 0.04 Add 0.03 Relu 0.02 MatMul 0.015 Tanh 0.01 │" in flat  # the top five
    assert "direction forward 0.6 backward 0.4" in flat and "sizes 10 0.5 20 0.3 5 0.2" in flat
    assert "origin fresh 0.7 seeded 0.3" in flat
    assert "opset 17 0.5 20 0.25 13 0.25" in flat and "shape static 0.75 dynamic 0.25" in flat
    assert "reward 0.125 per average test" in flat


def test_boxes_fit_an_80_column_terminal():
    """AFL++'s screen is 80 columns: the boxes' rows stay whole there, bar the longest, cut with an ellipsis."""
    text = _text(screen(_stats(), now=720.0, limit_s=3600, max_tests=1000, arms=ARMS), width=80)
    assert {len(line) for line in text.splitlines()} == {80}
    flat = _flat(text)
    assert "run time 0:12:00 / 1:00:00 │" in flat and "last new finding 0:03:40 ago │" in flat
    assert "tests 713 / 1000 │" in flat and "tests/s 1.00 (1 min), 0.99 all │" in flat
    assert "branches 4512/105304 (4.28%) │" in flat and "inconsistency 12: execute/tvm 12 │" in flat
    assert "crash 30: compile/tvm 20, e… │" in flat


def test_a_composite_collector_has_one_row_per_part():
    st = _stats()
    st.parts = {"python": (4000, 400, 100000), "binary": (512, 5, 5304)}
    flat = _flat(_text(screen(st, now=720.0, arms=ARMS)))
    assert "python 4000/100000 (4.00%)" in flat and "python pass 400" in flat
    assert "binary 512/5304 (9.65%)" in flat and "binary pass 5" in flat
    assert "branches 4512" not in flat  # arcs and blocks are not added up
    line = log_line(st, now=720.0, arms=ARMS)
    assert "python 4000/100000 (pass 400) binary 512/5304 (pass 5) corpus 115" in line


def test_without_feedback_the_arms_box_says_so():
    for arms in (None, Scheduler(["Add", "Relu"], 4, 4, 0, feedback=False).summary()):
        flat = _flat(_text(screen(_stats(), now=720.0, arms=arms)))
        assert "feedback off" in flat and "ops Add" not in flat and "direction" not in flat
        line = log_line(_stats(), now=720.0, arms=arms)
        assert line.endswith("| feedback off") and "top ops" not in line


def test_a_real_scheduler_summary_fills_the_arms_box():
    arms = Scheduler(["Add", "Relu", "Sigmoid"], 4, 4, 0, feedback=True, opsets=[13, 17, 20], dynamic=True).summary()
    flat = _flat(_text(screen(_stats(), now=720.0, arms=arms)))
    for row in ("ops", "first op", "direction", "sizes", "origin", "opset", "shape", "reward"):
        assert f"│ {row} " in flat
    assert "Sigmoid" in flat and "dynamic" in flat
    line = log_line(_stats(), now=720.0, arms=arms)
    assert "| top ops " in line and "; first " in line and "; opset " in line and "; dynamic " in line
    assert "; seeded " in line


def test_without_a_collector_there_is_no_coverage_to_show():
    st = RunStats(tests=5, passed=5, executed=5)
    flat = _flat(_text(screen(st, now=30.0)))
    assert "coverage no collector" in flat and "last new cov no collector" in flat
    assert "findings none yet" in flat and "last new finding none yet" in flat
    line = log_line(st, now=30.0)
    assert line == "[0:00:30] tests 5 (0.00/s) passed 5 no-values 0 | findings none (unique 0) | feedback off"


def test_the_log_line_is_one_line_with_every_section():
    line = log_line(_stats(), now=720.0, arms=ARMS)
    assert "\n" not in line and LOG.fullmatch(line)
    assert line == (
        "[0:12:00] tests 713 (1.00/s) passed 650 no-values 9 restarts 4 internal 1"
        " | branches 4512/105304 (pass 405) corpus 115 last-new 0:01:12"
        " | findings crash 30 inconsistency 12 (unique 25)"
        " | top ops Conv2d 0.04 Add 0.03 Relu 0.02; opset 17 0.5 20 0.25; dynamic 0.25; seeded 0.3"
    )


def test_the_recent_rate_counts_this_process_and_what_it_kept():
    st = RunStats(resumed_s=100.0)
    st.starts.extend([101.0, 102.0, 103.0, 104.0])
    assert recent_rate(st, now=110.0) == pytest.approx(4 / 10)  # since the resume, not the last minute
    assert recent_rate(st, now=500.0) == 0.0  # nothing in the last minute
    st = RunStats()
    st.starts.extend(0.01 * i for i in range(10_000))  # more than the window keeps
    assert len(st.starts) == st.starts.maxlen
    assert recent_rate(st, now=100.0) == pytest.approx(st.starts.maxlen / (100.0 - st.starts[0]))


def test_the_ticker_is_due_once_per_period_of_campaign_time():
    ticker = Ticker(60.0, now=0.0)
    seen = [t for t in (0.5, 30.0, 59.9, 60.0, 60.5, 119.0, 250.0, 251.0, 299.9, 300.0) if ticker.due(t)]
    assert seen == [60.0, 250.0, 300.0]  # a late check logs once, then the grid goes on
    assert ticker.wait_s(310.0) == pytest.approx(50.0)
    resumed = Ticker(60.0, now=754.0)  # a resumed campaign keeps the grid of whole minutes
    assert not resumed.due(779.0) and resumed.due(780.0)
    with pytest.raises(ValueError):
        Ticker(0.0, now=0.0)


FAKE = ["--backends", "fake_coverage:SigmoidPays", "--collector", "fake_coverage:OpCollector", "--no-support"]
FAKE += ["--nodes", "3", "--ops", "Add", "Mul", "Relu", "Sigmoid", "--search", "sampling", "--no-localize"]


def test_fuzz_without_a_terminal_logs_plain_lines(tmp_path, capsys, monkeypatch):
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    argv = ["fuzz", "-o", str(tmp_path / "c"), "--tests", "30", "--status-every", "0.05", "--seed", "9", *FAKE]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "\x1b[" not in err and "process timing" not in err  # no live screen, no escape codes
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert len(lines) >= 2  # at least one on the period (the campaign outlasts 0.05 s) and the last
    assert all(LOG.fullmatch(line) and " | findings " in line and "| top ops " in line for line in lines)
    counts = [int(re.search(r"tests (\d+)", line).group(1)) for line in lines]
    assert counts == sorted(counts) and counts[-1] == 30  # the last line is the campaign's end
    # resumed with nothing left to do: the one line still knows when coverage last grew
    plugins = ["--plugin", "fake_coverage:SigmoidPays", "--plugin", "fake_coverage:OpCollector"]
    assert main(["fuzz", "--resume", str(tmp_path / "c"), "--tests", "30", *plugins]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert len(lines) == 1 and " tests 30 " in lines[0] and " last-new never " not in lines[0]


def test_a_log_console_keeps_long_lines_whole(capsys, monkeypatch):
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    console = log_console(stderr=True)
    assert not console.is_interactive
    detail = " ".join(f"word{i}" for i in range(60))  # a finding's message, ~400 characters
    console.print(f"[bold red]new[/] crash tvm/compile/opt: {detail}")
    assert capsys.readouterr().err == f"new crash tvm/compile/opt: {detail}\n"


def test_fuzz_on_a_terminal_shows_the_screen(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich takes the captured stream for a terminal
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    argv = ["fuzz", "-o", str(tmp_path / "c"), "--tests", "3", "--status-every", "0.05", "--seed", "9", *FAKE]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "process timing" in err and "top arms" in err
    assert not any(LOG.fullmatch(line) for line in err.splitlines())
