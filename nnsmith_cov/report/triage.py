"""`nnsmith-cov triage RUN`: the run's root causes as a table, what a researcher files from.

One row per root cause (report/rootcause.py): its class, how many findings and tests show it,
when it was first seen, on which backends, its signature, and, once its bundle was reduced,
the reduced size and where the reduced bundle is. `--reduce` first reduces the first bundle of
each root cause that has no reduction yet, in table order, each within a time budget; reduced
patterns can merge root causes, so the table is made again afterwards.

    python -m nnsmith_cov.report.triage RUN [--reduce] [--json] [--class C]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nnsmith_cov.flags import add_flags
from nnsmith_cov.report.rootcause import REDUCE_JSON, REDUCED, RootCause, Triage, TriageError, triage_run

# Reduces one bundle within a budget in seconds, writing BUNDLE/reduced/ (reduce.json, the
# reduced bundle, repro.py); whatever it returns is ignored, an exception is one note.
Reducer = Callable[[Path, float], object]

DEFAULT_REDUCE_BUDGET_S = 120.0  # the goal: each bundle reduced within two minutes
SIGNATURE_CHARS = 160  # of a signature in the table (folded); --json has it whole


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `triage` on the CLI's subcommand parser."""
    p = subparsers.add_parser("triage", help="list a run's root causes: class, count, first seen, reduced size")
    _arguments(p)
    return p


def _arguments(p: argparse.ArgumentParser) -> None:
    add_flags(p, "triage")  # its rows are in nnsmith_cov/flags.py


def main(args: argparse.Namespace, reducer: Reducer | None = None) -> int:
    """Run `triage`; `reducer` replaces nnsmith_cov.reduce (tests)."""
    try:
        triage = triage_run(args.run)
        if args.reduce:
            chosen = reducer or library_reducer(getattr(args, "plugin", None) or ())
            reduce_root_causes(triage, chosen, args.reduce_time)
            triage = triage_run(args.run)  # reduced patterns may have merged root causes
    except TriageError as e:
        print(f"nnsmith-cov: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # during --reduce: what was reduced stays on disk
        print("nnsmith-cov: interrupted", file=sys.stderr)
        return 130
    for note in triage.notes:
        print(note, file=sys.stderr)
    shown = [rc for rc in triage.root_causes if args.cls is None or rc.category == args.cls]
    if args.json:
        body = triage.to_json()
        body["root_causes"] = [rc.to_json() for rc in shown]
        body["class_filter"] = args.cls
        print(json.dumps(body, indent=1))
    else:
        print_table(triage, shown)
    return 0


def reduce_root_causes(triage: Triage, reducer: Reducer, budget_s: float) -> list[str]:
    """Reduce the first bundle of each root cause without a reduction, in table order; says
    how each went on stderr as it goes, and returns those lines."""
    notes: list[str] = []

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)
        notes.append(text)

    for rc in triage.root_causes:
        if rc.reduction is not None:
            continue
        if rc.bundle is None or not (rc.bundle / "meta.json").is_file():
            say(f"reduce: {_short(rc.signatures[0])}: no bundle to reduce")
            continue
        print(f"reduce: {rc.bundle} (budget {budget_s:g} s) ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            reducer(rc.bundle, budget_s)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # one bundle's failure must not stop the others
            say(f"reduce: {rc.bundle}: failed ({type(e).__name__}: {_first_line(e)})")
            continue
        took = time.monotonic() - start
        if (rc.bundle / REDUCED / REDUCE_JSON).is_file():
            say(f"reduce: {rc.bundle}: reduced in {took:.1f} s")
        else:
            say(f"reduce: {rc.bundle}: the reducer wrote no {REDUCED}/{REDUCE_JSON}")
    return notes


def library_reducer(plugins: Sequence[str] = ()) -> Reducer:
    """nnsmith-cov's own reducer (nnsmith_cov.reduce), imported only when asked for."""
    try:
        from nnsmith_cov.reduce.engine import reduce_bundle
    except ImportError as e:
        raise TriageError(f"--reduce needs nnsmith_cov.reduce, which cannot be imported ({e})") from None

    def call(bundle: Path, budget_s: float) -> object:
        return reduce_bundle(bundle, bundle / REDUCED, budget_s=budget_s, plugins=tuple(plugins))

    return call


def print_table(triage: Triage, shown: Sequence[RootCause]) -> None:
    """The root causes as a rich table, then the per-class summary."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"root causes of {triage.run}", title_justify="left")
    for name, justify in (
        ("#", "right"),
        ("class", "left"),
        ("findings", "right"),
        ("tests", "right"),
        ("first seen", "left"),
        ("backends", "left"),
        ("signature", "left"),
        ("reduced", "right"),
        ("reduced bundle", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")
    for i, rc in enumerate(shown, 1):
        table.add_row(*row_cells(i, rc))
    console = Console()
    if not console.is_terminal:  # a pipe or a file: room for the signature, as a terminal would give
        console.width = max(console.width, 160)
    console.print(table, markup=False)
    print(summary_line(triage))


def row_cells(number: int, rc: RootCause) -> list[str]:
    """The table's cells for one root cause."""
    red = rc.reduction
    more = f" (+{len(rc.signatures) - 1} signatures)" if len(rc.signatures) > 1 else ""
    return [
        str(number),
        rc.category,
        str(rc.findings),
        str(rc.tests),
        first_seen(rc),
        ",".join(rc.backends),
        _short(rc.signatures[0]) + more,
        "-" if red is None else reduced_size(rc),
        "-" if red is None else str(red.path),
    ]


def first_seen(rc: RootCause) -> str:
    when = f" at {duration(rc.first_s)}" if rc.first_s is not None else ""
    return f"test {rc.first_test}{when}"


def duration(seconds: float) -> str:
    """Campaign time, short: "42 s", "7m05s", "3h12m"."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def reduced_size(rc: RootCause) -> str:
    red = rc.reduction
    if red is None:
        return ""
    of = f" of {red.original_ops}" if red.original_ops is not None else ""
    cut = ", out of time" if red.out_of_time else ""
    return f"{red.reduced_ops} op{'s' if red.reduced_ops != 1 else ''}{of}{cut}"


def summary_line(triage: Triage) -> str:
    """One line: findings and root causes per class."""
    parts = [f"{cls} {f} ({r} root cause{'s' if r != 1 else ''})" for cls, (f, r) in triage.by_class().items()]
    body = ", ".join(parts) if parts else "none"
    n = triage.internal_errors
    internal = f"; {n} internal error{'s' if n != 1 else ''} of nnsmith-cov, not counted" if n else ""
    return f"findings by class: {body}{internal}"


def print_class_summaries(specs: Sequence[str]) -> None:
    """For `report`: the per-class line of every campaign spec that is a run folder with
    findings; a spec that is not (an import, a bare corpus) is passed over."""
    from nnsmith_cov.report.load import parse_spec
    from nnsmith_cov.report.model import ReportError

    for spec in specs:
        try:
            kind, path, label = parse_spec(spec)
        except ReportError:
            continue
        if kind != "corpus":
            continue
        run = path.parent if path.name == "lmdb" else path
        if not (run / "findings.jsonl").is_file():
            continue
        try:
            line = summary_line(triage_run(run, times_from_corpus=False))
        except TriageError as e:
            line = f"no triage ({e})"
        print(f"{label}: {line}")


def _short(signature: str) -> str:
    return signature if len(signature) <= SIGNATURE_CHARS else signature[: SIGNATURE_CHARS - 3] + "..."


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _standalone(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nnsmith-cov triage", description="List a run's root causes.")
    _arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(_standalone())
