"""What a campaign shows while it runs and when it ends (rich).

On a terminal, `screen` is the live status screen: fixed boxes in the spirit of
AFL++'s (process timing, overall results, coverage, findings, stage timings and
the feedback scheduler's top arms). Writing to a log, `log_line` is one plain
line per `Ticker` period instead. `summary` is the end-of-run report. All are
plain functions of a `RunStats` (and `Scheduler.summary()`), so they render the
same in a test's recording console as on the screen.
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from nnsmith_cov.campaign.run_stats import RunStats

RATE_WINDOW_S = 60.0  # the recent test rate: over the last minute
STAGE_WINDOW = 200  # stage medians over the latest tests: today's speed, not the campaign's history
TOP = 5  # arms shown per group
LOG_WIDTH = 1000  # a log console's width: summary tables keep a signature to one line
# The scheduler's groups the screen shows, and their names there.
ARM_GROUPS = (
    ("op", "ops"),
    ("first", "first op"),
    ("direction", "direction"),
    ("nodes", "sizes"),
    ("seeded", "origin"),
    ("opset", "opset"),
    ("dynamic", "shape"),
    ("roundtrip", "IR text"),
    ("form", "ONNX forms"),
    ("mutation", "mutation"),
)


def _fmt_time(s: float) -> str:
    h, rem = divmod(int(s), 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}"


def _ago(now: float, then: float | None) -> str:
    return "none yet" if then is None else f"{_fmt_time(max(0.0, now - then))} ago"


def log_console(stderr: bool = False) -> Console:
    """Rich's console for the terminal; for a log (not interactive), one that neither wraps
    lines at 80 columns nor squeezes tables, so each line stays whole for grep."""
    console = Console(stderr=stderr)
    if console.is_interactive:
        return console
    return Console(stderr=stderr, soft_wrap=True, width=LOG_WIDTH)


class Ticker:
    """When the next plain log line is due: at each multiple of `period_s` of campaign time
    (so a resumed campaign logs on the same grid), once however late the check comes."""

    def __init__(self, period_s: float, now: float) -> None:
        if period_s <= 0:
            raise ValueError("the period must be positive")
        self.period_s = period_s
        self.next_s = self._after(now)

    def _after(self, now: float) -> float:
        return (math.floor(now / self.period_s) + 1) * self.period_s

    def wait_s(self, now: float) -> float:
        """Seconds until the next line is due (0 when it is)."""
        return max(0.0, self.next_s - now)

    def due(self, now: float) -> bool:
        """True when a line is due at `now`; the next one is then a period later."""
        if now < self.next_s:
            return False
        self.next_s = self._after(now)
        return True


def recent_rate(st: RunStats, now: float, window_s: float = RATE_WINDOW_S) -> float:
    """Tests started per second over the last `window_s` of campaign time (shorter at first)."""
    lo = max(now - window_s, st.resumed_s)  # this process started nothing before it resumed
    starts = st.starts
    if starts.maxlen is not None and len(starts) == starts.maxlen:
        lo = max(lo, starts[0])  # the older starts were dropped: count over what is kept
    span = now - lo
    return sum(1 for t in starts if t >= lo) / span if span > 0 else 0.0


def overall_rate(st: RunStats, now: float) -> float:
    return st.tests / now if now > 0 else 0.0


def _by_symptom(st: RunStats) -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for kind, n in st.findings.items():
        out[kind.split("/")[0]] += n
    return out


def _pct(n: int, of: int | None) -> str:
    return f"{n}/{of} ({100.0 * n / of:.2f}%)" if of else str(n)


def _grid(rows: Sequence[Sequence[str]]) -> Table:
    """Label/value rows; values never wrap (the boxes' heights are fixed), labels never shrink."""
    grid = Table.grid(padding=(0, 1), expand=True)  # expanded: only then does the value column give way
    grid.add_column(justify="right", style="cyan", no_wrap=True, width=max((len(r[0]) for r in rows), default=1))
    grid.add_column(style="bold", no_wrap=True, overflow="ellipsis", ratio=1)
    for label, value in rows:
        grid.add_row(Text(label), Text(value))  # Text: brackets in names and messages are not markup
    return grid


def _box(title: str, rows: Sequence[Sequence[str]], height: int | None = None) -> Panel:
    return Panel(
        _grid(rows), title=f"[bold]{title}[/]", title_align="left", border_style="blue", height=height, expand=True
    )


def _side_by_side(left: tuple[str, list[list[str]]], right: tuple[str, list[list[str]]]) -> Table:
    """Two boxes of equal height on one row."""
    height = max(len(left[1]), len(right[1]), 1) + 2
    row = Table.grid(expand=True)
    row.add_column(ratio=1)
    row.add_column(ratio=1)
    row.add_row(_box(*left, height=height), _box(*right, height=height))
    return row


def timing_rows(st: RunStats, now: float, limit_s: float | None = None) -> list[list[str]]:
    """Process timing: campaign time (resumes included) against the limit, and how long ago
    the campaign last found new coverage and a new unique finding (a new signature)."""
    clock = _fmt_time(now) + (f" / {_fmt_time(limit_s)}" if limit_s else "")
    last_new = "no collector" if st.branches is None else _ago(now, st.last_new_s)
    return [["run time", clock], ["last new cov", last_new], ["last new finding", _ago(now, st.last_unique_s)]]


def result_rows(st: RunStats, now: float, max_tests: int | None = None) -> list[list[str]]:
    """Overall results; rows stay within an 80-column screen's half."""
    return [
        ["tests", f"{st.tests}" + (f" / {max_tests}" if max_tests else "")],
        ["executed", f"{st.executed}, passed {st.passed}"],
        ["no values", f"{st.no_values}, gen failed {st.gen_failed}"],
        ["infeasible", f"{st.infeasible} dropped"],
        ["tests/s", f"{recent_rate(st, now):.2f} (1 min), {overall_rate(st, now):.2f} all"],
        ["restarts", f"{st.restarts}, internal errors {st.internal_errors}"],
        *([["slow", f"{st.slow} runs timed out only under coverage"]] if st.slow else []),
        *([["run limit", _run_limits(st)]] if st.run_limits else []),
        ["disk", _disk(st)],
        ["memory", _memory(st)],
    ]


def _run_limits(st: RunStats) -> str:
    """Each backend's limit under the collector (`campaign.run_limit`)."""
    return ", ".join(f"{b} {s:.0f} s" for b, s in sorted(st.run_limits.items()))


def _disk(st: RunStats) -> str:
    dropped = f", {st.blobs_dropped} dropped" if st.blobs_dropped else ""
    return f"{_mib(st.disk_kb)} (corpus {_mib(st.corpus_kb)}{dropped})"


def _memory(st: RunStats) -> str:
    workers = "+".join(_mib(k) for k in st.worker_rss_kb) or "-"
    return f"{_mib(st.rss_kb)}, workers {workers}" + (f" ({st.recycles} recycled)" if st.recycles else "")


def _mib(kb: int) -> str:
    return f"{kb / 1024:.0f}M" if kb < 10 << 20 else f"{kb / (1 << 20):.1f}G"


def coverage_rows(st: RunStats) -> list[list[str]]:
    """Branches against the universe; per part for a composite collector, whose parts count
    in different units (arcs, blocks) and so are never added up."""
    if st.branches is None:
        return [["coverage", "no collector"], ["corpus", str(st.corpus)]]
    if st.parts:
        rows = []
        for name, (n, p, u) in st.parts.items():
            rows += [[name, _pct(n, u)], [f"{name} pass", str(p)]]
    else:
        rows = [["branches", _pct(st.branches, st.universe)], ["pass-only", str(st.pass_branches)]]
    return [*rows, ["corpus", str(st.corpus)], ["new-cov tests", str(st.cov_tests)]]


def finding_rows(st: RunStats) -> list[list[str]]:
    """One row per symptom, its count split by stage/backend; then the unique signatures (and
    the backends' refusals, which are no findings, when there were any)."""
    refused = sum(st.unsupported.values())
    unsupported = [["unsupported", f"{refused} runs, {len(st.learned)} learned"]] if refused else []
    if not st.findings:
        return [["findings", "none yet"], ["unique", "0 signatures"], *unsupported]
    places: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for kind, n in st.findings.items():
        symptom, where = kind.split("/", 1)
        places[symptom][where] += n
    rows = [
        [symptom, f"{sum(c.values())}: " + ", ".join(f"{w} {n}" for w, n in c.most_common())]
        for symptom, c in sorted(places.items())
    ]
    return [*rows, ["unique", f"{len(st.signatures)} signatures"], *unsupported]


def stage_rows(st: RunStats, window: int = STAGE_WINDOW) -> list[list[str]]:
    """Median ms per stage over the latest `window` tests: the parent's and worker's stages on
    one row, then one row per backend (`<backend>.<stage>` keys), in pipeline order."""
    common: list[str] = []
    backends: dict[str, list[str]] = {}
    for stage, xs in list(st.stage_ms.items()):
        if not xs:
            continue
        cell = f"{stage.rsplit('.', 1)[-1]} {statistics.median(xs[-window:]):.1f}"
        if "." in stage:
            backends.setdefault(stage.rsplit(".", 1)[0], []).append(cell)
        else:
            common.append(cell)
    rows = [["test", "  ".join(common)]] if common else []  # generation, value search, export
    rows += [[backend, "  ".join(cells)] for backend, cells in backends.items()]
    return rows or [["", "no test finished yet"]]


def _arms(pairs: Sequence[Sequence[Any]], n: int = TOP, sep: str = "  ") -> str:
    return sep.join(f"{label} {p:.3g}" for label, p in list(pairs)[:n])


def _share(arms: Mapping[str, Any], group: str, label: str) -> float | None:
    return next((float(p) for x, p in arms.get(group) or [] if x == label), None)


def arm_rows(arms: Mapping[str, Any] | None) -> list[list[str]]:
    """The scheduler's top arms per group (`Scheduler.summary()`: label and expected share of
    the next proposal); None or a summary without feedback: feedback is off."""
    if arms is None or not arms.get("feedback"):
        return [["feedback", "off (plain NNSmith: unweighted choices, no seeds)"]]
    rows = [[name, _arms(arms[group])] for group, name in ARM_GROUPS if arms.get(group)]
    # the campaign's discounted reward rate: the bandit's prior, per average test's time
    rows.append(["reward", f"{arms.get('rate', 0.0):.3g} per average test (discounted)"])
    return rows


def screen(
    st: RunStats,
    *,
    now: float | None = None,
    limit_s: float | None = None,
    max_tests: int | None = None,
    arms: Mapping[str, Any] | None = None,
    title: str = "",
) -> RenderableType:
    """The live status screen; `now` is campaign time (default: the stats' own clock),
    `arms` the scheduler's summary (None: feedback off)."""
    now = st.elapsed() if now is None else now
    window = min(STAGE_WINDOW, max((len(xs) for xs in st.stage_ms.values()), default=0))
    parts: list[RenderableType] = [Text(title, style="bold")] if title else []
    parts += [
        _side_by_side(
            ("process timing", timing_rows(st, now, limit_s)), ("overall results", result_rows(st, now, max_tests))
        ),
        _side_by_side(("coverage", coverage_rows(st)), ("findings", finding_rows(st))),
        _box(f"stage timings (median ms, last {window} tests)", stage_rows(st)),
        _box("top arms (share of the next proposal)", arm_rows(arms)),
    ]
    return Group(*parts)


def log_line(
    st: RunStats,
    *,
    now: float | None = None,
    arms: Mapping[str, Any] | None = None,
) -> str:
    """One plain line of status for logs: campaign time, tests, coverage, findings, top arms."""
    now = st.elapsed() if now is None else now
    out = [
        f"[{_fmt_time(now)}] tests {st.tests} ({recent_rate(st, now):.2f}/s) passed {st.passed} "
        f"no-values {st.no_values}"
        + (f" restarts {st.restarts}" if st.restarts else "")
        + (f" slow {st.slow}" if st.slow else "")
        + (f" internal {st.internal_errors}" if st.internal_errors else "")
        + (f" disk {_mib(st.disk_kb)} rss {_mib(st.rss_kb)}+{_mib(sum(st.worker_rss_kb))}" if st.disk_kb else "")
    ]
    if st.branches is not None:
        if st.parts:
            cov = " ".join(f"{name} {n}/{u} (pass {p})" for name, (n, p, u) in st.parts.items())
        else:
            cov = f"branches {st.branches}/{st.universe} (pass {st.pass_branches})"
        last = "never" if st.last_new_s is None else _fmt_time(max(0.0, now - st.last_new_s))
        out.append(f"{cov} corpus {st.corpus} last-new {last}")
    symptoms = " ".join(f"{k} {n}" for k, n in sorted(_by_symptom(st).items())) or "none"
    refused = sum(st.unsupported.values())
    out.append(f"findings {symptoms} (unique {len(st.signatures)})" + (f" unsupported {refused}" if refused else ""))
    if arms is None or not arms.get("feedback"):
        out.append("feedback off")
    else:
        top = [f"top ops {_arms(arms.get('op') or [], 3, ' ')}"]
        if arms.get("first"):
            top.append(f"first {_arms(arms['first'], 2, ' ')}")
        if arms.get("opset"):
            top.append(f"opset {_arms(arms['opset'], 2, ' ')}")
        top += [f"{x} {p:.3g}" for x in ("dynamic", "roundtrip", "seeded") if (p := _share(arms, x, x)) is not None]
        out.append("; ".join(top))
    return " | ".join(out)


def _covered(st: RunStats) -> str:
    if not st.parts:
        return f"{st.branches} of {st.universe} branches covered ({st.pass_branches} in passes)"
    return "; ".join(f"{name}: {n} of {u} covered ({p} in passes)" for name, (n, p, u) in st.parts.items())


def summary(st: RunStats) -> Group:
    counts = Table(title="findings by symptom / stage / backend")
    for col in ("symptom", "stage", "backend", "count"):
        counts.add_column(col, justify="right" if col == "count" else "left")
    for kind, n in sorted(st.findings.items()):
        counts.add_row(*kind.split("/"), str(n))
    sigs = Table(title=f"{len(st.signatures)} unique signatures")
    sigs.add_column("count", justify="right")
    sigs.add_column("signature", overflow="fold")
    for sig, n in st.signatures.most_common():
        sigs.add_row(str(n), sig)
    times = Table(title="median time per stage (ms)")
    times.add_column("stage")
    times.add_column("median", justify="right")
    times.add_column("n", justify="right")
    for stage, xs in sorted(st.stage_ms.items()):
        times.add_row(stage, f"{statistics.median(xs):.1f}", str(len(xs)))
    head = Text(
        f"{st.tests} tests in {_fmt_time(st.elapsed())}: {st.executed} executed, {st.passed} passed, "
        f"{st.no_values} without NaN/Inf-free values ({st.infeasible} more dropped unsearched as proven so), "
        f"{st.gen_failed} not generated, "
        f"{st.restarts} worker restarts, {st.internal_errors} internal errors ({len(st.internal)} signatures)"
        + ("" if st.branches is None else f"; {_covered(st)}, {st.cov_tests} tests brought new coverage")
    )
    return Group(head, counts, sigs, times)
