#!/usr/bin/env python3
"""How much steering by operator (or opset, dtype, size, export) could pay: rankings learnt on some
campaigns, tried on another.

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

The scheduler steers more than ops, so the same leave-one-out runs on each other choice a kept
test records: the opset it was exported at, the dtypes its values hold, its size (ops, in four
buckets), symbolic input dims and the IR round trip. For each, the held-out table gives the value
ranked first on the other campaigns and the held-out campaign's tests holding it; the last table
gives every value's P(new) lift and its share of the kept tests per campaign. Given a feedback
campaign beside uniform ones, the shares show what its bandit learnt, and its lifts whether that
choice still pays once steered toward (a lift near 1 where uniform campaigns show more: the
frontier behind the choice was used up).

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

from nnsmith_cov.report.choices import CHOICE_KINDS, SIZE_LABELS, choice_labels

Row = tuple[frozenset[str], int]  # the ops a kept test's graph held, the new branches it added
OTHER_KINDS = tuple(kind for kind in CHOICE_KINDS if kind != "op")  # ops have their own tables


@dataclass(frozen=True)
class HeldOut:
    """One held-out campaign: its tests holding at least `at_least` of the `k` top ops (ranked on
    the other campaigns) against all of its tests."""

    campaign: str
    top: tuple[str, ...]  # the ops (or choice labels) ranked first on the other campaigns
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
    return HeldOut(name, tuple(sorted(top)), k, at_least, len(test), len(holding), mean_ratio, new_ratio)


def leave_one_out(
    campaigns: dict[str, list[Row]], ks: Iterable[int], at_least: Iterable[int], min_tests: int
) -> list[HeldOut]:
    out = []
    for name, test in campaigns.items():
        train = [row for other, rows in campaigns.items() if other != name for row in rows]
        out += [held_out(name, train, test, k, n, min_tests) for k in ks for n in at_least]
    return out


def load_campaign(folder: Path, after_s: float) -> tuple[list[Row], dict[str, list[Row]]]:
    """The kept tests of the campaign in `folder` (findings included) after `after_s` seconds:
    their ops, and their other choices by kind, each with the new branches the test added."""
    from nnsmith_cov.corpus.store import CorpusStore
    from nnsmith_cov.report.load import corpus_folder

    rows: list[Row] = []
    choices: dict[str, list[Row]] = {kind: [] for kind in OTHER_KINDS}
    with CorpusStore.open(corpus_folder(folder), readonly=True) as store:
        for _, record in store.entries(include_finding_only=True):
            if record.elapsed_s >= after_s:
                new = int(record.novelty.new_branches if record.novelty is not None else 0)
                gen = record.gen or {}
                rows.append((frozenset(gen.get("ops", [])), new))
                labels = choice_labels(gen, record.graph)
                for kind in OTHER_KINDS:
                    choices[kind].append((labels[kind], new))
    return rows, choices


def lifts(rows: Sequence[Row]) -> dict[str, tuple[float | None, float, float]]:
    """Per label: the share of the tests holding it with a new branch over that of all tests
    (None when no test added one), the share of the tests holding it, and the new branches its
    tests added beyond that share of all new branches (what steering toward it could bring
    earlier: the frontier behind it, as far as these tests found it)."""
    if not rows:
        return {}
    base = _mean([n > 0 for _, n in rows])
    added = sum(n for _, n in rows)
    held = Counter(label for labels, _ in rows for label in labels)
    hits = Counter(label for labels, n in rows if n > 0 for label in labels)
    new = Counter()
    for labels, n in rows:
        for label in labels:
            new[label] += n
    return {
        label: (hits[label] / count / base if base else None, count / len(rows), new[label] - count / len(rows) * added)
        for label, count in held.items()
    }


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
    ap.add_argument(
        "--steered",
        nargs="+",
        type=Path,
        default=[],
        metavar="CAMPAIGN",
        help="feedback campaigns: shown in the share and lift tables, never used to rank",
    )
    args = ap.parse_args(argv)
    if len(args.campaigns) < 2:
        print("op_headroom: give two or more campaigns (one is held out at a time)", file=sys.stderr)
        return 2
    from nnsmith_cov.corpus.records import CorpusError

    campaigns, shares, choices = {}, {}, {}
    for folder in [*args.campaigns, *args.steered]:
        try:
            rows, choices[str(folder)] = load_campaign(folder, args.after)
            shares[str(folder)] = op_shares(folder)
        except (CorpusError, OSError, ValueError) as e:
            print(f"op_headroom: {folder}: {e}", file=sys.stderr)
            return 1
        if folder in args.campaigns:
            campaigns[str(folder)] = rows
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
    print("| op | score | " + " | ".join(f"share, {_label(n)}" for n in shares) + " |")
    print("|---|---|" + "---|" * len(shares))
    for op in ranked(scores)[: args.top]:
        cells = [op, f"{scores[op]:+.2f}", *(f"{shares[n].get(op, 0.0):.2%}" for n in shares)]
        print("| " + " | ".join(cells) + " |")
    print_choices(choices, list(campaigns), args.min_tests)
    return 0


def print_choices(choices: dict[str, dict[str, list[Row]]], uniform: Sequence[str], min_tests: int) -> None:
    """The held-out table (over the `uniform` campaigns) and every campaign's per-value lifts of
    every choice kind but ops."""
    print("\nother choices: the value ranked first on the other campaigns, on the held-out one\n")
    print("| held-out campaign | choice | first elsewhere | tests holding | mean new | P(new) |")
    print("|---|---|---|---|---|---|")
    for kind in OTHER_KINDS:
        by_campaign = {name: choices[name][kind] for name in uniform}
        for h in leave_one_out(by_campaign, (1,), (1,), min_tests):
            top = ", ".join(label.split("=", 1)[1] for label in h.top) or "-"
            cells = [_label(h.campaign), kind, top, f"{h.holding} / {h.tests}", _fmt(h.mean_ratio), _fmt(h.new_ratio)]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    names = list(choices)
    print("\nevery value: P(new) of the kept tests holding it against all (share of the kept tests, new branches")
    print("beyond that share); first row: the new branches of all the kept tests counted\n")
    print("| choice | " + " | ".join(_label(n) for n in names) + " |")
    print("|---|" + "---|" * len(names))
    # every kind holds a row per kept test: any one sums the campaign's new branches
    print("| all | " + " | ".join(str(sum(new for _, new in choices[n][OTHER_KINDS[0]])) for n in names) + " |")
    for kind in OTHER_KINDS:
        per = {n: lifts(choices[n][kind]) for n in names}
        for label in sorted({label for table in per.values() for label in table}, key=_value_order):
            cells = [label]
            for n in names:
                lift, share, beyond = per[n].get(label, (None, 0.0, 0.0))
                cells.append(f"{_fmt(lift)} ({share:.0%}, {beyond:+.0f})" if share else "-")
            print("| " + " | ".join(cells) + " |")


def _value_order(label: str) -> tuple:
    """Labels by kind, then sizes smallest first, numbers (opsets) by value, the rest by name."""
    kind, _, value = label.partition("=")
    if value in SIZE_LABELS:
        return (kind, SIZE_LABELS.index(value), 0, "")
    return (kind, len(SIZE_LABELS), int(value), "") if value.isdigit() else (kind, len(SIZE_LABELS) + 1, 0, value)


if __name__ == "__main__":
    sys.exit(main())
