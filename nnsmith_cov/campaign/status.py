"""The live status line and the end-of-run summary (rich)."""

from __future__ import annotations

import collections
import statistics

from rich.console import Group
from rich.table import Table
from rich.text import Text

from nnsmith_cov.campaign.fuzz_loop import RunStats


def _fmt_time(s: float) -> str:
    h, rem = divmod(int(s), 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}"


def status_line(st: RunStats, limit_s: float | None) -> Text:
    elapsed = st.elapsed()
    by_symptom: collections.Counter[str] = collections.Counter()
    for kind, n in st.findings.items():
        by_symptom[kind.split("/")[0]] += n
    found = ", ".join(f"{k} {n}" for k, n in sorted(by_symptom.items())) or "none"
    clock = _fmt_time(elapsed) + (f"/{_fmt_time(limit_s)}" if limit_s else "")
    return Text.assemble(
        (clock, "bold"),
        f"  tests {st.tests} ({st.tests / max(elapsed, 1e-9):.2f}/s)  passed {st.passed}  no-values {st.no_values}",
        "  findings: ",
        (found, "bold red" if by_symptom else ""),
        f"  unique {len(st.signatures)}  restarts {st.restarts}",
        _coverage(st),
    )


def _coverage(st: RunStats) -> str:
    if st.branches is None:
        return ""
    last = "never" if st.last_new_s is None else f"{_fmt_time(st.elapsed() - st.last_new_s)} ago"
    return f"  {_branches(st)}, last new {last}  corpus {st.corpus}"


def _branches(st: RunStats) -> str:
    """Covered branches and pass-only: per part for a composite collector (their units differ)."""
    if not st.parts:
        return f"branches {st.branches} (pass-only {st.pass_branches})"
    return " · ".join(f"{name} {n} (pass-only {p})" for name, (n, p, _) in st.parts.items())


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
        f"{st.restarts} worker restarts, {st.faults} internal faults"
        + ("" if st.branches is None else f"; {_covered(st)}, {st.cov_tests} tests brought new coverage")
    )
    return Group(head, counts, sigs, times)
