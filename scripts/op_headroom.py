#!/usr/bin/env python3
"""How much steering by operator could pay: op rankings learnt on some campaigns, tried on another.

Feedback can only beat the same choices drawn at random if some choices reliably lead to more
new coverage than others. This reads campaigns that drew their ops uniformly (`fuzz --feedback
off`, bench_feedback's off-var), scores every op by the new branches of the kept tests holding
it (log2(1 + new branches), against the mean of all tests), and, leaving one campaign out at a
time, ranks the ops on the others and looks at the held-out campaign's tests: those holding at
least one (or two) of the top ops against all of its tests. A ratio near 1 on every held-out
campaign says no op ranking carries over, and op weights have nothing to learn; well above 1,
a scheduler that put those ops in more graphs would find more. The last table shows how often
each campaign's graphs held the top ops, from its stats.json: the ones that pay may be the ones
a generator seldom manages to insert.

Tests that added nothing and were not kept are not in a corpus, so the means are over kept tests
(on a binary collector most tests are kept: they add hit-count buckets). Tests before `--after`
seconds are left out: in the first minutes every test adds thousands of branches whatever it holds.

    python scripts/op_headroom.py CAMPAIGN [CAMPAIGN ...] [--after 300] [--top 10] [--min-tests 8]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

Row = tuple[frozenset[str], int]  # the ops a kept test's graph held, the new branches it added


@dataclass(frozen=True)
class HeldOut:
    """One held-out campaign: its tests holding at least `at_least` of the `k` top ops (ranked on
    the other campaigns) against all of its tests."""

    campaign: str
    k: int
    at_least: int
    tests: int
    holding: int
    mean_ratio: float | None  # mean new branches of the holding tests / of all tests
    new_ratio: float | None  # share of holding tests with a new branch / of all tests


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def op_scores(rows: Sequence[Row], min_tests: int) -> dict[str, float]:
    """Per op held by at least `min_tests` tests: the mean log2(1 + new branches) of the tests
    holding it, less that of all tests (a log: one test with thousands of branches, a new error
    path, must not rank its bystanders first)."""
    if not rows:
        return {}
    base = _mean([math.log2(1 + n) for _, n in rows])
    held = Counter(op for ops, _ in rows for op in ops)
    return {
        op: _mean([math.log2(1 + n) for ops, n in rows if op in ops]) - base
        for op, count in held.items()
        if count >= min_tests
    }


def ranked(scores: dict[str, float]) -> list[str]:
    """Ops by score, highest first (ties by name, so that the table does not move between runs)."""
    return sorted(scores, key=lambda op: (-scores[op], op))


def held_out(name: str, train: Sequence[Row], test: Sequence[Row], k: int, at_least: int, min_tests: int) -> HeldOut:
    top = set(ranked(op_scores(train, min_tests))[:k])
    holding = [n for ops, n in test if len(ops & top) >= at_least]
    mean_all = _mean([n for _, n in test]) if test else 0.0
    new_all = _mean([n > 0 for _, n in test]) if test else 0.0
    mean_ratio = _mean(holding) / mean_all if holding and mean_all > 0 else None
    new_ratio = _mean([n > 0 for n in holding]) / new_all if holding and new_all > 0 else None
    return HeldOut(name, k, at_least, len(test), len(holding), mean_ratio, new_ratio)


def leave_one_out(
    campaigns: dict[str, list[Row]], ks: Iterable[int], at_least: Iterable[int], min_tests: int
) -> list[HeldOut]:
    out = []
    for name, test in campaigns.items():
        train = [row for other, rows in campaigns.items() if other != name for row in rows]
        out += [held_out(name, train, test, k, n, min_tests) for k in ks for n in at_least]
    return out


def load_rows(folder: Path, after_s: float) -> list[Row]:
    """The kept tests of the campaign in `folder` (findings included) after `after_s` seconds."""
    from nnsmith_cov.corpus.store import CorpusStore
    from nnsmith_cov.report.load import corpus_folder

    rows = []
    with CorpusStore.open(corpus_folder(folder), readonly=True) as store:
        for _, record in store.entries(include_finding_only=True):
            if record.elapsed_s >= after_s:
                new = record.novelty.new_branches if record.novelty is not None else 0
                rows.append((frozenset(record.gen.get("ops", [])), int(new)))
    return rows


def op_shares(folder: Path) -> dict[str, float]:
    """Each op's share of the ops the campaign's graphs held (stats.json's op_tests)."""
    try:
        stats = json.loads((folder / "stats.json").read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"stats.json: {e}") from None
    if not isinstance(stats, dict):
        raise ValueError("stats.json is not an object")
    counts = stats.get("op_tests") or {}  # absent: no shares to show
    if not isinstance(counts, dict) or not all(isinstance(n, int) for n in counts.values()):
        raise ValueError("stats.json: op_tests is not a map of counts")
    total = sum(counts.values())
    return {op: n / total for op, n in counts.items()} if total else {}


def _label(folder: str) -> str:
    return f"{Path(folder).parent.name}/{Path(folder).name}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaigns", nargs="+", type=Path, help="campaign folders that drew their ops uniformly")
    ap.add_argument("--after", type=float, default=300.0, help="leave out tests before this many seconds")
    ap.add_argument("--top", type=int, default=10, help="top ops of the ranking (also 2x this)")
    ap.add_argument("--min-tests", type=int, default=8, help="ops held by fewer tests are not ranked")
    args = ap.parse_args(argv)
    if len(args.campaigns) < 2:
        print("op_headroom: give two or more campaigns (one is held out at a time)", file=sys.stderr)
        return 2
    from nnsmith_cov.corpus.records import CorpusError

    campaigns, shares = {}, {}
    for folder in args.campaigns:
        try:
            campaigns[str(folder)] = load_rows(folder, args.after)
            shares[str(folder)] = op_shares(folder)
        except (CorpusError, OSError, ValueError) as e:
            print(f"op_headroom: {folder}: {e}", file=sys.stderr)
            return 1
    print(f"kept tests after {args.after:.0f} s, new branches per test against the campaign's mean\n")
    print("| held-out campaign | tests | top ops | holding at least | tests holding | mean new | P(new) |")
    print("|---|---|---|---|---|---|---|")
    for h in leave_one_out(campaigns, (args.top, 2 * args.top), (1, 2), args.min_tests):
        cells = [_label(h.campaign), h.tests, h.k, h.at_least, h.holding, _fmt(h.mean_ratio), _fmt(h.new_ratio)]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    pooled = [row for rows in campaigns.values() for row in rows]
    scores = op_scores(pooled, args.min_tests)
    uniform = 1.0 / max(1, len({op for s in shares.values() for op in s}))
    print(f"\ntop {args.top} ops on all campaigns: score, share of the ops graphs held (tries: {uniform:.2%} each)\n")
    print("| op | score | " + " | ".join(f"share, {_label(n)}" for n in campaigns) + " |")
    print("|---|---|" + "---|" * len(campaigns))
    for op in ranked(scores)[: args.top]:
        cells = [op, f"{scores[op]:+.2f}", *(f"{shares[n].get(op, 0.0):.2%}" for n in campaigns)]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
