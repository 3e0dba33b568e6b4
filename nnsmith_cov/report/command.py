"""`nnsmith-cov report`: load campaigns, compare them, write the table, figures and exports."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.flags import add_flags
from nnsmith_cov.report.compare import by_line, check_comparable, pairwise, venn_regions
from nnsmith_cov.report.export import write_csv, write_json
from nnsmith_cov.report.lcov import write_lcov
from nnsmith_cov.report.load import load_any, resource_timeline, spec_parts
from nnsmith_cov.report.model import Campaign, ReportError
from nnsmith_cov.report.resources import resource_intervals
from nnsmith_cov.report.table import describe, print_table, table_rows
from nnsmith_cov.report.triage import print_class_summaries


@dataclass
class ReportOptions:
    pass_filters: list[str] | None = None  # None: each campaign's own
    figures: bool = True
    html: bool = False
    mixed: bool = False  # compare sets of different collectors anyway
    line_level: bool = False  # match branches by source line (implies mixed)
    quiet: bool = False  # no table on the terminal


@dataclass
class Report:
    campaigns: list[Campaign]
    rows: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def add_parser(sub: Any) -> None:
    """Register `report` on the CLI's subcommand parser."""
    p = sub.add_parser("report", help="compare campaigns: table, figures, Venn, lcov/JSON/HTML exports")
    add_flags(p, "report")


def main(args: argparse.Namespace) -> int:
    opts = ReportOptions(
        pass_filters=args.pass_filter,
        figures=not args.no_figures,
        html=args.html,
        mixed=args.mixed or args.by_line,
        line_level=args.by_line,
    )
    try:
        report = make_report(args.corpora, args.out, opts)
    except ReportError as e:
        print(f"nnsmith-cov: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"nnsmith-cov: error: {e.filename or args.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    for line in report.notes:
        print(line, file=sys.stderr)
    print_class_summaries(args.corpora)  # findings by triage class, per run folder
    print(f"report: {args.out / 'report.json'}, {args.out / 'table.csv'}; {len(report.files)} files in all")
    return 0


def load_campaigns(specs: Sequence[str], opts: ReportOptions, part: str | None = None) -> list[Campaign]:
    campaigns = [load_any(s, opts.pass_filters, part if spec_parts(s) else None) for s in specs]
    check_comparable(campaigns, opts.mixed)
    if opts.line_level:
        campaigns = [by_line(c) for c in campaigns]
    return campaigns


def make_report(specs: Sequence[str], out: Path, opts: ReportOptions | None = None) -> Report:
    """Everything `report` writes, into folder `out`; ReportError for bad input.

    Campaigns of a composite collector (`python+binary`) are reported per part: one full
    report per collector in `out/<collector>/`, each part beside the campaigns of that
    collector alone, and a top-level table.csv / report.json listing them all."""
    opts = opts or ReportOptions()
    parts = list(dict.fromkeys(name for s in specs for name in spec_parts(s)))
    if not parts:
        return _make_one(load_campaigns(specs, opts), out, opts)
    alone = {s: load_any(s, opts.pass_filters) for s in specs if not spec_parts(s)}
    stray = [c.label for c in alone.values() if c.collector not in parts]
    if stray and not opts.mixed:
        raise ReportError(
            f"{', '.join(stray)}: measured by none of the composite campaigns' collectors ({', '.join(parts)}); "
            "compare like with like, or pass --mixed"
        )
    report = Report([], [])
    for name in parts:
        chosen = [s for s in specs if name in spec_parts(s) or (s in alone and alone[s].collector in (name, *stray))]
        if not opts.quiet:
            print(f"\n== {name} ==")
        sub = _make_one(load_campaigns(chosen, opts, name), out / name, opts)
        report.campaigns += sub.campaigns
        report.rows += [{"part": name} | row for row in sub.rows]
        report.files += sub.files
        report.notes += [f"{name}: {n}" for n in sub.notes]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "table.csv", report.rows)
    body = {"parts": {name: f"{name}/report.json" for name in parts}, "campaigns": report.rows}
    write_atomic(out / "report.json", json.dumps(body, indent=1) + "\n")
    report.files += [out / "table.csv", out / "report.json"]
    return report


def _make_one(campaigns: list[Campaign], out: Path, opts: ReportOptions) -> Report:
    rows = table_rows(campaigns)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(campaigns, rows)
    sets = {c.label: c.covered for c in campaigns}
    pass_sets = {c.label: c.pass_covered for c in campaigns}
    lines = describe(campaigns)
    if opts.line_level:
        lines.append("branches matched by source line (--by-line)")
    if len({c.universe_ident for c in campaigns if c.universe_ident}) > 1:
        lines.append("note: the campaigns have different universes (builds); branches are matched by identity")
    if not opts.quiet:
        print_table(rows, lines)

    for c in campaigns:
        name = safe_name(c.label)
        (out / "branches").mkdir(exist_ok=True)
        write_json(c, out / "branches" / f"{name}.json")
        report.files.append(out / "branches" / f"{name}.json")
        if c.unit not in ("lcov-branch", "lcov-line", "line"):  # foreign identities have no spelling of ours
            write_lcov(c, out / "branches" / f"{name}.lcov")
            report.files.append(out / "branches" / f"{name}.lcov")
        if c.ops:
            (out / "ops").mkdir(exist_ok=True)
            write_csv(out / "ops" / f"{name}.csv", c.ops)
            report.files.append(out / "ops" / f"{name}.csv")
        if health := resource_intervals(resource_timeline(c)):  # tests/s, disk and memory per interval
            (out / "resources").mkdir(exist_ok=True)
            write_csv(out / "resources" / f"{name}.csv", health)
            report.files.append(out / "resources" / f"{name}.csv")

    if opts.figures:
        report.files += _figures(campaigns, sets, pass_sets, out / "figures")
    if opts.html:
        for c in campaigns:
            lcov = out / "branches" / f"{safe_name(c.label)}.lcov"
            report.notes.append(_html(c, out / "html" / safe_name(c.label), lcov if lcov.exists() else None))

    write_csv(out / "table.csv", rows)
    body = {
        "campaigns": rows,
        "made_by": lines,
        "pass_filters": {c.label: list(c.pass_filters) for c in campaigns},
        "versions": {c.label: c.versions for c in campaigns},
        "venn": _regions_json(venn_regions(sets)),
        "venn_pass_only": _regions_json(venn_regions(pass_sets)),
        "pairwise": pairwise(sets),
        "ops_top": {c.label: c.ops[:15] for c in campaigns if c.ops},
        "files": sorted(str(p.relative_to(out)) for p in report.files),
    }
    write_atomic(out / "report.json", json.dumps(body, indent=1) + "\n")
    report.files += [out / "table.csv", out / "report.json"]
    return report


def _html(c: Campaign, folder: Path, lcov: Path | None) -> str:
    from nnsmith_cov.report.html import html_report

    try:
        return html_report(c, folder, lcov)
    except ReportError as e:
        return f"no HTML: {e}"


def _figures(
    campaigns: list[Campaign], sets: dict[str, frozenset[str]], pass_sets: dict[str, frozenset[str]], folder: Path
) -> list[Path]:
    from nnsmith_cov.report import plots

    folder.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    for axis in ("time", "tests"):
        made += plots.coverage_figure(campaigns, axis, False, folder / f"coverage-{axis}")
        made += plots.coverage_figure(campaigns, axis, True, folder / f"pass-coverage-{axis}")
    made += plots.resources_figure(campaigns, folder / "resources")  # disk and memory over time
    if len(sets) in (2, 3):
        made += plots.venn_figure(sets, folder / "venn")
        made += plots.venn_figure(pass_sets, folder / "pass-venn")
    elif len(sets) > 3:
        made += plots.upset_figure(sets, folder / "upset")
        made += plots.upset_figure(pass_sets, folder / "pass-upset")
    return made


def _regions_json(regions: dict[tuple[str, ...], int]) -> list[dict[str, Any]]:
    return [{"sets": list(k), "count": v} for k, v in regions.items()]


def safe_name(label: str) -> str:
    return re.sub(r"[^\w.-]", "_", label) or "_"
