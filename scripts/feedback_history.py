#!/usr/bin/env python3
"""Every committed feedback benchmark in one table, and issue 27's on / off-var goals pooled per compiler.

Reads each `docs/bench-feedback-*/summary.csv` (written by scripts/bench_feedback.py) and prints markdown:
a row per (folder, seed, pair) with the total and unique ratios, the reach and the tests ratio; then, for the
`on / off-var` rows only, per compiler (taken from the folder name): the seed-pairs, the geometric means of the
total and unique ratios, how many pairs meet each goal (total >= 1.15x, unique >= 3x, reach <= 0.5) and an exact
two-sided sign test on total ratio > 1 vs < 1. The folders come from different commits over months, so the pooled
figures are a history, not one controlled experiment; the output says so.

    python scripts/feedback_history.py                                   # markdown on stdout
    python scripts/feedback_history.py --out docs/bench-feedback-history.md
    python scripts/feedback_history.py --docs /elsewhere/docs

Bad input (no docs folder, a summary.csv without a needed column) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
PREFIX = "bench-feedback-"
REQUIRED = ("seed", "first", "other", "total", "unique", "reach")
GOAL_TOTAL, GOAL_UNIQUE, GOAL_REACH = 1.15, 3.0, 0.5
COMPILERS = ("ort", "tvm-python", "tvm-binary", "other")


class InputError(Exception):
    """Input the script cannot tabulate: reported as one line, exit status 2."""


@dataclass(frozen=True)
class Row:
    """One line of a summary.csv: `first` against `other` on one seed."""

    folder: str
    title: str
    seed: str
    first: str
    other: str
    total: float | None  # None: the cell was empty or not a number (shown as n/a)
    unique: float | None
    reach: float | None  # math.inf: `first` never reached `other`'s final coverage
    tests: float | None
    has_tests: bool  # whether the csv has both test columns at all (else the cell stays empty)
    key: tuple[str, ...] | None  # identifies the campaigns, to count a re-tabulated pair once

    @property
    def compiler(self) -> str:
        return compiler_of(self.folder)

    @property
    def pair(self) -> str:
        return f"{self.first} / {self.other}"


@dataclass(frozen=True)
class Pooled:
    """The on / off-var rows of one compiler, summarised."""

    compiler: str
    pairs: int
    total_gmean: float | None
    unique_gmean: float | None
    total_met: int
    total_n: int
    unique_met: int
    unique_n: int
    reach_met: int
    reach_n: int
    above: int
    below: int
    p: float | None


def compiler_of(folder: str) -> str:
    """The compiler a folder measured, from its name (the READMEs' titles are free text)."""
    name = f"-{folder.removeprefix(PREFIX)}-"
    if "-ort-" in name:
        return "ort"
    if "-tvm-binary-" in name:
        return "tvm-binary"
    if "-tvm-" in name:
        return "tvm-python"
    return "other"


def _ratio(cell: str | None) -> float | None:
    # A ratio must be a finite positive number: 0 or inf would break the geometric mean.
    try:
        value = float(cell or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _reach(cell: str | None) -> float | None:
    # bench_feedback writes an empty cell when `first` never reached `other`'s final coverage.
    if cell is None:
        return None
    if not cell.strip():
        return math.inf
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _tests(row: dict[str, str]) -> float | None:
    first, other = _ratio(row.get("first_tests")), _ratio(row.get("other_tests"))
    return first / other if first is not None and other is not None else None


def readme_title(folder: Path) -> str:
    """The README's `# ` title without the `# `, or "" when there is none."""
    readme = folder / "README.md"
    if not readme.is_file():
        return ""
    for line in readme.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def read_summary(folder: Path) -> list[Row]:
    """The rows of folder/summary.csv; InputError when a needed column is missing."""
    path = folder / "summary.csv"
    title = readme_title(folder)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise InputError(f"{path} lacks column(s): {', '.join(missing)}")
            lines = list(reader)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    has_tests = "first_tests" in header and "other_tests" in header
    rows = []
    for line in lines:
        # The same campaigns show up in several folders (a baseline reused with --fill, a seed added later):
        # their coverage counts and test counts name them.
        counts = tuple((line.get(c) or "").strip() for c in ("first_total", "other_total"))
        tests = tuple((line.get(c) or "").strip() for c in ("first_tests", "other_tests"))
        key = None
        if all(counts):
            key = (compiler_of(folder.name), line["seed"], line["first"], line["other"], *counts, *tests)
        rows.append(
            Row(
                folder=folder.name,
                title=title,
                seed=(line["seed"] or "").strip(),
                first=(line["first"] or "").strip(),
                other=(line["other"] or "").strip(),
                total=_ratio(line["total"]),
                unique=_ratio(line["unique"]),
                reach=_reach(line["reach"]),
                tests=_tests(line) if has_tests else None,
                has_tests=has_tests,
                key=key,
            )
        )
    return rows


def collect(docs: Path) -> tuple[list[Row], list[tuple[str, str]]]:
    """Every summary.csv row under docs, by folder name, and the folders skipped with why."""
    if not docs.is_dir():
        raise InputError(f"no such docs folder: {docs}")
    rows: list[Row] = []
    skipped: list[tuple[str, str]] = []
    for folder in sorted(p for p in docs.glob(f"{PREFIX}*") if p.is_dir()):
        if (folder / "summary.csv").is_file():
            rows.extend(read_summary(folder))
        elif (folder / "table.csv").is_file():
            skipped.append((folder.name, "older layout, not tabulated"))
        else:
            skipped.append((folder.name, "no summary.csv"))
    return rows, skipped


def distinct(rows: Sequence[Row]) -> tuple[list[Row], list[tuple[Row, Row]]]:
    """Rows with each campaign pair once (the first folder by name keeps it), and the (repeat, kept) pairs
    left out: counting one campaign twice would weigh it double in the means and the sign test."""
    seen: dict[tuple[str, ...], Row] = {}
    kept: list[Row] = []
    repeats: list[tuple[Row, Row]] = []
    for row in rows:
        if row.key is not None and row.key in seen:
            repeats.append((row, seen[row.key]))
            continue
        if row.key is not None:
            seen[row.key] = row
        kept.append(row)
    return kept, repeats


def geometric_mean(values: Sequence[float]) -> float | None:
    """The geometric mean (the mean of ratios that treats 2x and 0.5x as equal and opposite), None if empty."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def sign_test_p(above: int, below: int) -> float | None:
    """Two-sided exact binomial p of `above` of `above + below` ratios above 1 (ties left out); None if none."""
    n = above + below
    if n == 0:
        return None
    # at p = 0.5 the distribution is symmetric: twice the smaller tail
    tail = sum(math.comb(n, i) for i in range(min(above, below) + 1)) / 2**n
    return min(1.0, 2 * tail)


def pool(rows: Sequence[Row], compiler: str) -> Pooled:
    """The on / off-var rows of one compiler, summarised; n/a cells are left out of what they would feed."""
    mine = [r for r in rows if r.first == "on" and r.other == "off-var" and r.compiler == compiler]
    totals = [r.total for r in mine if r.total is not None]
    uniques = [r.unique for r in mine if r.unique is not None]
    reaches = [r.reach for r in mine if r.reach is not None]
    above = sum(t > 1 for t in totals)
    below = sum(t < 1 for t in totals)
    return Pooled(
        compiler=compiler,
        pairs=len(mine),
        total_gmean=geometric_mean(totals),
        unique_gmean=geometric_mean(uniques),
        total_met=sum(t >= GOAL_TOTAL for t in totals),
        total_n=len(totals),
        unique_met=sum(u >= GOAL_UNIQUE for u in uniques),
        unique_n=len(uniques),
        reach_met=sum(r <= GOAL_REACH for r in reaches),
        reach_n=len(reaches),
        above=above,
        below=below,
        p=sign_test_p(above, below),
    )


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def fmt_reach(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "never" if math.isinf(value) else f"{value:.2f}"


def fmt_p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe in a README title would split the table's cell


def render(rows: Sequence[Row], skipped: Sequence[tuple[str, str]], docs_link: str = "") -> str:
    """The markdown document. Folder links are docs_link + the folder name: docs_link is the docs folder as seen
    from where the document will sit ("" when it sits in the docs folder itself)."""

    def link(row: Row) -> str:
        return f"[{row.folder}]({docs_link}{row.folder}/)"

    out = [
        "# Feedback benchmarks: every committed run",
        "",
        "Generated by `scripts/feedback_history.py` from `docs/bench-feedback-*/summary.csv` (written by",
        "`scripts/bench_feedback.py`). Ratios are first / other: total and unique blocks at the end of the run,",
        "reach is the share of the run at which `first` reached `other`'s final coverage (never: it did not),",
        "tests is the ratio of tests run (empty where the run did not record them), n/a a missing or unreadable cell.",
        "",
        "## Every pair",
        "",
        "| run | title | seed | pair | total | unique | reach | tests |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tests = fmt_ratio(r.tests) if r.has_tests else ""
        cells = [link(r), _cell(r.title), r.seed, r.pair, fmt_ratio(r.total), fmt_ratio(r.unique)]
        out.append("| " + " | ".join([*cells, fmt_reach(r.reach), tests]) + " |")

    kept, repeats = distinct(rows)
    out += [
        "",
        "## Pooled: on / off-var",
        "",
        "**These runs come from different code versions over time** (each folder's README names its commit and the",
        "change it measured, several of them reverted), on different compilers, collectors and run lengths, so the",
        "pooled figures are a history of the project, not one controlled experiment: read them as how often `on` has",
        "led `off-var` so far, not as the effect of any one version.",
        "",
        f"Only rows whose pair is exactly `on / off-var`; goals (issue 27): total >= {GOAL_TOTAL:.2f}x, unique >=",
        f"{GOAL_UNIQUE:.0f}x, reach <= {GOAL_REACH}. Compiler from the folder name. Geometric means over the pairs",
        "with a number; a goal column counts the pairs meeting it of those with a number. Sign test: exact",
        "two-sided binomial on total ratio above vs below 1 (ties left out).",
        "",
        "| compiler | seed-pairs | total (geo mean) | unique (geo mean) | total >= 1.15x | unique >= 3x "
        "| reach <= 0.5 | total above / below 1 | sign test p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for compiler in COMPILERS:
        p = pool(kept, compiler)
        if p.pairs == 0:
            continue
        out.append(
            f"| {compiler} | {p.pairs} | {fmt_ratio(p.total_gmean)} | {fmt_ratio(p.unique_gmean)} "
            f"| {p.total_met} of {p.total_n} | {p.unique_met} of {p.unique_n} | {p.reach_met} of {p.reach_n} "
            f"| {p.above} / {p.below} | {fmt_p(p.p)} |"
        )
    if repeats:
        out += [
            "",
            "The same campaigns tabulated in more than one folder (same coverage and test counts: a baseline reused",
            "with `--fill`, or a seed added to earlier ones) count once, kept in the first folder by name. Left out:",
            "",
        ]
        out += [f"- {rep.folder} seed {rep.seed} (= {orig.folder} seed {orig.seed})" for rep, orig in repeats]

    out += ["", "## Skipped", ""]
    if skipped:
        out.append("Skipped: " + "; ".join(f"{name} ({why})" for name, why in skipped) + ".")
    else:
        out.append("Skipped: none.")
    return "\n".join(out) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--docs", type=Path, default=DOCS, help="folder holding the bench-feedback-* runs")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here instead of stdout")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows, skipped = collect(args.docs)
        if args.out is None:
            sys.stdout.write(render(rows, skipped))
        else:
            # Links from the output file's own folder, so they work wherever --out puts it.
            docs_rel = Path(os.path.relpath(args.docs.resolve(), args.out.resolve().parent)).as_posix()
            args.out.write_text(render(rows, skipped, "" if docs_rel == "." else docs_rel + "/"), encoding="utf-8")
    except InputError as e:
        print(f"feedback_history: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"feedback_history: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
