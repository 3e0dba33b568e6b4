"""Corpus entries as seeds: which stored graph to grow next, favouring owners of rare branches.

An entry's energy is the sum, over the branches it reached, of 1 / (entries that reached
that branch): an entry that alone reaches a branch weighs 1 for it, one of a hundred
weighs 0.01. Seeds are drawn in proportion to energy, so entries holding rare
coverage get grown more often (the idea of libFuzzer's Entropic, without its
per-feature frequency decay). Growing replays the entry's insertion draws as a prefix
with more nodes (`GenRecord.insert_draws`): the same graph comes back and more is
inserted around it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnsmith_cov.coverage.covmap import Hits


@dataclass(frozen=True)
class Seed:
    test_id: int
    prefix: list[tuple[str, int | float]]  # the entry's insertion draws
    n_ops: int  # operators the entry's graph holds


class SeedPool:
    """The corpus entries that can be grown, with per-branch entry counts. Not thread-safe:
    the campaign calls it under its lock."""

    def __init__(self, size: int) -> None:
        self.freq = np.zeros(size, dtype=np.uint32)  # corpus entries reaching each branch
        self.seeds: list[Seed] = []
        self.hits: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.seeds)

    def add(self, seed: Seed, hits: Hits) -> None:
        if not seed.prefix or not len(hits):
            return  # an entry without recorded insertion draws cannot be regrown
        self.seeds.append(seed)
        self.hits.append(hits.index.astype(np.int64))
        self.freq[hits.index] += 1

    def energy(self) -> np.ndarray:
        inverse = np.zeros(len(self.freq))
        reached = self.freq > 0
        inverse[reached] = 1.0 / self.freq[reached]
        return np.array([inverse[h].sum() for h in self.hits])

    def pick(self, rng: np.random.Generator) -> Seed | None:
        if not self.seeds:
            return None
        e = self.energy()
        total = e.sum()
        k = int(rng.choice(len(e), p=e / total)) if total > 0 else int(rng.integers(len(e)))
        return self.seeds[k]
