#!/usr/bin/env python3
"""How fast each campaign reached the code that only one choice leads to.

A choice's frontier, over the campaigns given: the branches that kept tests holding the choice
reached and no kept test without it did (`opset=20`: code only graphs exported at opset 20 reach).
For each campaign: how much of that frontier it holds, and when it held a quarter, half and 90 % of
it. Where a feedback campaign learnt to steer toward the choice, it holds the frontier sooner than
one that drew its choices uniformly; against the campaign's whole coverage, the frontier's size
says how much that could weigh. `scripts/op_headroom.py` names the choices worth asking about.

Only kept tests store what they reached. A test that was not kept reached nothing new, so every
campaign's coverage over time is exact; but such a test, without the choice, may have reached a
frontier branch already held, so the frontier can hold a few branches more than its definition.

    python scripts/choice_frontier.py CAMPAIGN CAMPAIGN [...] --choice opset=20 [--choice dtype=i8 ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnsmith_cov.report.choices import parse_choice, record_labels

QUANTILES = (0.25, 0.5, 0.9)
EXCLUSIVE_KINDS = ("opset", "size", "dynamic", "roundtrip")  # a test holds one value of these


@dataclass
class Reach:
    """One campaign: when it first reached each branch (inf: never), and per asked choice the
    branches its kept tests with and without the choice reached."""

    name: str
    ident: str  # the coverage universe's identity: campaigns compared must have measured the same code
    first_s: np.ndarray
    run_s: float
    with_choice: dict[str, np.ndarray]
    without: dict[str, np.ndarray]
    holding: dict[str, int]  # kept tests holding the choice
    kept: int


def load_reach(folder: Path, choices: Sequence[str]) -> Reach:
    """Read the kept tests of the campaign in `folder` (a run folder or its lmdb)."""
    from nnsmith_cov.corpus.store import CorpusStore
    from nnsmith_cov.report.load import corpus_folder

    with CorpusStore.open(corpus_folder(folder), readonly=True) as store:
        universe = store.universe()
        if universe is None:
            raise ValueError("the corpus holds no coverage universe")
        size = len(universe.file_of)
        first = np.full(size, np.inf)
        with_choice = {c: np.zeros(size, bool) for c in choices}
        without = {c: np.zeros(size, bool) for c in choices}
        holding = dict.fromkeys(choices, 0)
        kept, run_s = 0, 0.0
        for test_id, record in store.entries():
            hits = store.hits(test_id)
            if hits is None:
                continue
            ids = hits.index.astype(np.int64)
            first[ids] = np.minimum(first[ids], record.elapsed_s)
            labels = record_labels(record)
            for c in choices:
                (with_choice if c in labels else without)[c][ids] = True
                holding[c] += c in labels
            kept += 1
            run_s = max(run_s, record.elapsed_s)
        counters = store.counters()
    return Reach(
        _label(folder), universe.ident, first, max(run_s, counters.elapsed_s), with_choice, without, holding, kept
    )


def frontier(campaigns: Sequence[Reach], choice: str) -> np.ndarray:
    """The branches kept tests with `choice` reached, in any campaign, and none without it did."""
    reached = np.logical_or.reduce([c.with_choice[choice] for c in campaigns])
    elsewhere = np.logical_or.reduce([c.without[choice] for c in campaigns])
    return reached & ~elsewhere


def times_to(first_s: np.ndarray, front: np.ndarray, quantiles: Sequence[float] = QUANTILES) -> list[float | None]:
    """When a campaign first held each share of the frontier (None: never)."""
    total = int(front.sum())
    reached = np.sort(first_s[front])
    reached = reached[np.isfinite(reached)]
    out: list[float | None] = []
    for q in quantiles:
        need = int(np.ceil(q * total))
        out.append(float(reached[need - 1]) if total and len(reached) >= need else None)
    return out


def _label(folder: Path) -> str:
    return f"{folder.parent.name}/{folder.name}"


def _time(t: float | None, run_s: float) -> str:
    return "never" if t is None else f"{t:.0f} s ({t / run_s:.2f})" if run_s > 0 else f"{t:.0f} s"


def report(campaigns: Sequence[Reach], choices: Sequence[str]) -> str:
    """The markdown tables, one per choice, then what each campaign holds of every frontier."""
    out = []
    fronts = {choice: frontier(campaigns, choice) for choice in choices}
    for choice in choices:
        front = fronts[choice]
        size = int(front.sum())
        out += [
            f"## {choice}: {size} branches only kept tests holding it reached",
            "",
            "| campaign | coverage | frontier share of it | kept tests holding it | holds | "
            + " | ".join(f"{q:.0%} at (share of run)" for q in QUANTILES)
            + " |",
            "|---|---|---|---|---|" + "---|" * len(QUANTILES),
        ]
        for c in campaigns:
            covered = int(np.isfinite(c.first_s).sum())
            held = int(np.isfinite(c.first_s[front]).sum())
            cells = [
                c.name,
                str(covered),
                f"{size / covered:.1%}" if covered else "-",
                f"{c.holding[choice]} / {c.kept}",
                f"{held} ({held / size:.0%})" if size else "0",
                *(_time(t, c.run_s) for t in times_to(c.first_s, front)),
            ]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out + balance(campaigns, fronts))


def balance(campaigns: Sequence[Reach], fronts: dict[str, np.ndarray]) -> list[str]:
    """Per frontier, the branches each campaign holds of it; and per kind whose values a test holds
    one of (a graph has one opset, one size), the sum over the values asked: those frontiers are
    disjoint, so steering toward one value and away from the others shows as gains and losses."""
    out = [
        "## What each campaign holds of each frontier",
        "",
        "| frontier | branches | " + " | ".join(r.name for r in campaigns) + " |",
        "|---|---|" + "---|" * len(campaigns),
    ]
    rows = [
        (choice, int(f.sum()), [int(np.isfinite(r.first_s[f]).sum()) for r in campaigns])
        for choice, f in fronts.items()
    ]
    for kind in EXCLUSIVE_KINDS:
        mine = [row for row in rows if row[0].partition("=")[0] == kind]
        if len(mine) > 1:
            sums = [sum(row[2][c] for row in mine) for c in range(len(campaigns))]
            rows.append((f"{kind}: the {len(mine)} asked", sum(row[1] for row in mine), sums))
    for label, size, holds in rows:
        out.append(f"| {label} | {size} | " + " | ".join(str(h) for h in holds) + " |")
    return [*out, ""]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaigns", nargs="+", type=Path, help="campaign folders (the same collector and build)")
    ap.add_argument("--choice", action="append", required=True, help="KIND=VALUE, e.g. opset=20, dtype=i8, op=Relu")
    args = ap.parse_args(argv)
    from nnsmith_cov.corpus.records import CorpusError

    try:
        choices = [parse_choice(c) for c in args.choice]
    except ValueError as e:
        print(f"choice_frontier: {e}", file=sys.stderr)
        return 2
    campaigns = []
    for folder in args.campaigns:
        try:
            campaigns.append(load_reach(folder, choices))
        except (CorpusError, OSError, ValueError) as e:
            print(f"choice_frontier: {folder}: {e}", file=sys.stderr)
            return 1
    if len({c.ident for c in campaigns}) > 1:
        print("choice_frontier: the campaigns measured different code (coverage universes differ)", file=sys.stderr)
        return 1
    print(report(campaigns, choices), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
