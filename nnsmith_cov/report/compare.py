"""Set arithmetic over labelled coverage sets: unique counts, Venn regions, collector checks."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

from nnsmith_cov.report.model import Campaign, ReportError, key_line

Region = tuple[str, ...]  # the labels whose sets hold an element, and no others


def venn_regions(sets: Mapping[str, frozenset[str] | set[str]]) -> dict[Region, int]:
    """Exact sizes of the non-empty Venn regions of any number of sets.

    Region (A, C) counts the elements in A and C and in no other set. Labels keep the
    order of `sets`, so regions are stable across runs.
    """
    order = list(sets)
    owners: dict[str, list[str]] = collections.defaultdict(list)
    for label in order:
        for key in sets[label]:
            owners[key].append(label)
    counts: collections.Counter[Region] = collections.Counter(tuple(v) for v in owners.values())
    return dict(sorted(counts.items(), key=lambda kv: ([order.index(x) for x in kv[0]], kv[1])))


def unique_counts(sets: Mapping[str, frozenset[str] | set[str]]) -> dict[str, int]:
    """Per label, how many of its elements no other set holds."""
    regions = venn_regions(sets)
    return {label: regions.get((label,), 0) for label in sets}


def pairwise(sets: Mapping[str, frozenset[str] | set[str]]) -> dict[str, dict[str, int]]:
    """`out[a][b]`: elements of a that b lacks (a's lead over b)."""
    return {a: {b: len(sets[a] - sets[b]) for b in sets if b != a} for a in sets}


def check_comparable(campaigns: Sequence[Campaign], allow_mixed: bool) -> None:
    """Refuse to compare sets of different collectors (their identities never match) unless asked."""
    labels = [c.label for c in campaigns]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ReportError(f"label {dup[0]!r} names more than one campaign; label them PATH=LABEL")
    kinds = sorted({(c.collector, c.unit) for c in campaigns})
    if len(kinds) > 1 and not allow_mixed:
        names = ", ".join(f"{c.label}: {c.collector}/{c.unit}" for c in campaigns)
        raise ReportError(
            f"campaigns measured different things ({names}); compare like with like, or pass --mixed "
            "(and --by-line to match them by source line)"
        )


def by_line(c: Campaign) -> Campaign:
    """The campaign with each branch cut down to its source line, so different collectors can meet."""
    import dataclasses

    return dataclasses.replace(
        c,
        covered=frozenset(key_line(k) for k in c.covered),
        pass_covered=frozenset(key_line(k) for k in c.pass_covered),
        unit="line",
        universe_size=None,
        pass_universe=None,
    )
