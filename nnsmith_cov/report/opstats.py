"""Per-operator statistics of a campaign.

The corpus keeps the coverage-increasing tests (and those with findings), each with
the operators its generator inserted: how many coverage-increasing tests contain an
op, how many new branches they brought, how often it shows up in tests with findings.
How many of *all* generated tests held each op comes from the campaign's stats.json
(`op_tests`), when it has one; with it, each op's interesting rate.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from nnsmith_cov.corpus.records import TestRecord


class OpTally:
    """Counts per operator over the kept tests fed to `add`."""

    def __init__(self) -> None:
        self.corpus_tests = 0
        self.finding_tests = 0
        self.in_corpus: collections.Counter[str] = collections.Counter()
        self.in_findings: collections.Counter[str] = collections.Counter()
        self.occurrences: collections.Counter[str] = collections.Counter()
        self.new_branches: collections.Counter[str] = collections.Counter()

    def add(self, record: TestRecord, in_corpus: bool) -> None:
        ops = record.gen.get("ops") if isinstance(record.gen, dict) else None
        names = [o for o in ops if isinstance(o, str)] if isinstance(ops, list) else []
        distinct = set(names)
        if in_corpus:
            self.corpus_tests += 1
            new = record.novelty.new_branches if record.novelty is not None else 0
            for op in distinct:
                self.in_corpus[op] += 1
                self.new_branches[op] += new
            self.occurrences.update(names)
        if record.status == "finding" or (not in_corpus and record.status != "internal"):
            self.finding_tests += 1
            self.in_findings.update(distinct)

    def rows(self, generated: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
        """One row per operator seen, most frequent in coverage-increasing tests first;
        with `generated` (tests holding each op, of all the campaign ran), also that and
        the share of them that added coverage."""
        gen = generated or {}
        ops = set(self.in_corpus) | set(self.in_findings) | set(gen)
        out = []
        for op in ops:
            extra = {}
            if generated is not None:
                n = gen.get(op, 0)
                extra = {"generated_tests": n, "interesting_rate": round(self.in_corpus[op] / n, 4) if n else 0.0}
            out.append(
                {
                    "op": op,
                    **extra,
                    "corpus_tests": self.in_corpus[op],
                    "corpus_share": round(self.in_corpus[op] / self.corpus_tests, 4) if self.corpus_tests else 0.0,
                    "occurrences": self.occurrences[op],
                    "new_branches": self.new_branches[op],
                    "finding_tests": self.in_findings[op],
                }
            )
        return sorted(out, key=lambda r: (-r["corpus_tests"], -r["occurrences"], r["op"]))
