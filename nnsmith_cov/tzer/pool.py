"""Tzer's seed pool: the mutants that raised coverage, each with its tolerance counter.

A pick mutates the entry's IR until `tolerance` IR mutations in a row brought no new
coverage; then its pass sequence, until one of those gains (Tzer's joint IR/pass search).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

TOLERANCE = 4  # IR mutations without gain before an entry's passes are mutated instead


@dataclass
class Entry:
    """A pool member: how to rebuild its IR (seed name and mutation chain) and its passes."""

    origin: str
    chain: list[tuple[str, int]]
    passes: list[str]
    func: Any = None  # the PrimFunc, kept in memory
    test_id: int | None = None  # the corpus entry it came from (None: an initial seed)
    misses: int = 0  # IR mutations in a row that added no coverage

    def mode(self, tolerance: int = TOLERANCE) -> str:
        return "pass" if self.misses >= tolerance else "ir"


@dataclass
class Pool:
    entries: list[Entry] = field(default_factory=list)

    def pick(self, rng: np.random.Generator) -> Entry:
        if not self.entries:
            raise ValueError("the Tzer seed pool is empty")
        return self.entries[int(rng.integers(len(self.entries)))]

    def observe(self, parent: Entry, mode: str, gained: bool, child: Entry | None) -> None:
        """A mutant of `parent` ran: a gain keeps `child` and resets the counter; an IR miss counts."""
        if gained:
            parent.misses = 0
            if child is not None:
                self.entries.append(child)
        elif mode == "ir":
            parent.misses += 1
