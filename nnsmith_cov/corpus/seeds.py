"""Corpus entries as seeds: which stored graph to grow or mutate next (a power schedule).

An entry's *rarity* is the sum, over the branches it reached, of 1 / (entries that reached
that branch): an entry that alone reaches a branch weighs 1 for it, one of a hundred
weighs 0.01 (libFuzzer's Entropic idea, without its per-feature frequency decay). Its
*energy*, what it is drawn in proportion to, is the rarity halved for every FRUITLESS_HALF
children in a row that brought no new branch, as AFLFast lowers the energy of inputs whose
mutants keep taking well-trodden paths: an entry whose neighbourhood is exhausted gives way,
and one child with a new branch restores it (a child with new hit-count buckets alone does
not: on native code nearly every child has some). Energy never reaches 0, so no entry is lost.
An entry remembers at most RARE_KEPT of its branches, those the fewest entries had reached when
it was added (libFuzzer's Entropic likewise keeps only an input's rare features): a binary
collector reaches tens of thousands of blocks per test, and keeping them all would grow the
campaign's memory by a hundred KB per entry and its picks' cost with the corpus. Its rarity is
then the sum over those; they fade as other entries reach them, as the full sum would.
Growing replays the entry's insertion draws as a prefix with more nodes
(`GenRecord.insert_draws`); mutating edits all of its draws (`nnsmith_cov.feedback.mutate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnsmith_cov.corpus.records import is_int
from nnsmith_cov.coverage.covmap import Hits

FRUITLESS_HALF = 8.0  # children without gain that halve an entry's energy
RARE_ENTRIES = 2  # a branch reached by at most this many entries is rare (see `SeedPool.rare`)
RARE_KEPT = 512  # branches an entry remembers for its rarity (2 KB): its rarest when added


@dataclass(frozen=True)
class Seed:
    test_id: int
    prefix: list[tuple[str, int | float]]  # the entry's insertion draws
    n_ops: int  # operators the entry's graph holds
    draws: tuple[tuple[str, int | float], ...] = ()  # all its draws (bins, export plan too); () unknown
    try_ok: str = ""  # per insertion try, "1" accepted (GenRecord.try_ok); "" unknown
    parent: int | None = None  # the entry it was grown or mutated from
    mutation: dict[str, Any] | None = None  # its edit of the parent's draws (`GenRecord.mutation`); None grown

    @staticmethod
    def of(test_id: int, gen: dict[str, Any], draws: list) -> Seed:
        """The seed of a corpus entry from its stored generator record (`GenRecord.to_json`) and draws."""
        cut = int(gen.get("insert_draws") or 0)
        pairs = [(label, value) for label, value in draws]
        parent, try_ok, mutation = gen.get("parent"), gen.get("try_ok"), gen.get("mutation")
        return Seed(
            test_id,
            pairs[:cut],
            len(gen.get("ops") or ()),
            tuple(pairs),
            try_ok if isinstance(try_ok, str) and set(try_ok) <= {"0", "1"} else "",
            parent if is_int(parent) else None,
            mutation if isinstance(mutation, dict) else None,
        )


class SeedPool:
    """The corpus entries that can be grown or mutated, with per-branch entry counts and each
    entry's children without gain. Not thread-safe: the campaign calls it under its lock."""

    def __init__(self, size: int) -> None:
        self.freq = np.zeros(size, dtype=np.uint32)  # corpus entries reaching each branch
        self.seeds: list[Seed] = []
        self.hits: list[np.ndarray] = []  # per entry, the branches its rarity sums over (RARE_KEPT at most)
        self._flat: tuple[np.ndarray, np.ndarray] | None = None  # all of them end to end, and each entry's start
        self.fruitless: list[int] = []  # children since the entry's last child with new coverage
        self.children: list[int] = []  # children in all
        self.n_ops: list[int] = []  # per entry, its graph's operators
        self._where: dict[int, int] = {}  # test id -> position

    def __len__(self) -> int:
        return len(self.seeds)

    def add(self, seed: Seed, hits: Hits, gain: bool = True) -> None:
        """Pool a corpus entry; `gain`: it reached new branches (not only new hit-count buckets),
        which restores its parent's energy."""
        if not seed.prefix or not len(hits):
            return  # an entry without recorded insertion draws cannot be regrown
        self._where[seed.test_id] = len(self.seeds)
        self.seeds.append(seed)
        self.n_ops.append(seed.n_ops)
        self.freq[hits.index] += 1
        kept = hits.index
        if len(kept) > RARE_KEPT:  # the rarest, ties by branch: the same pool on every run
            kept = kept[np.argsort(self.freq[kept], kind="stable")[:RARE_KEPT]]
        self.hits.append(np.sort(kept).astype(np.uint32))
        self._flat = None
        self.fruitless.append(0)
        self.children.append(0)
        if gain and seed.parent is not None:  # a child with new branches: its parent's neighbourhood still pays
            k = self._where.get(seed.parent)
            if k is not None:
                self.fruitless[k] = 0

    def get(self, test_id: int) -> Seed | None:
        k = self._where.get(test_id)
        return None if k is None else self.seeds[k]

    def rarity(self) -> np.ndarray:
        if not self.hits:
            return np.zeros(0)
        if self._flat is None:
            sizes = np.array([len(h) for h in self.hits])
            self._flat = (np.concatenate(self.hits), np.concatenate([[0], np.cumsum(sizes)[:-1]]))
        flat, starts = self._flat
        inverse = 1.0 / np.maximum(self.freq[flat], 1)  # every kept branch was reached: freq >= 1
        return np.add.reduceat(inverse, starts)

    def energy(self) -> np.ndarray:
        return self.rarity() * np.exp2(-np.asarray(self.fruitless, dtype=float) / FRUITLESS_HALF)

    def outcome(self, test_id: int, gain: bool) -> None:
        """Note a child of entry `test_id` (grown or mutated) and whether it reached new coverage."""
        k = self._where.get(test_id)
        if k is None:
            return
        self.children[k] += 1
        self.fruitless[k] = 0 if gain else self.fruitless[k] + 1

    def rare(self, hits: Hits) -> int:
        """How many of `hits`' branches at most RARE_ENTRIES corpus entries reached (new ones not counted)."""
        f = self.freq[hits.index]
        return int(np.count_nonzero((f > 0) & (f <= RARE_ENTRIES)))

    def pick(self, rng: np.random.Generator, attempt: bool = False, max_ops: int = 0) -> Seed | None:
        """An entry drawn by energy, among those of fewer than `max_ops` operators (0: all), so
        that a child can add one; None when there is none. With `attempt`, the draw counts as a
        child without gain until a child of it is added (`add` with this parent), as the
        campaign does: it never has to report the children that brought nothing."""
        room = np.asarray(self.n_ops) < max_ops if max_ops > 0 else None
        if not self.seeds or (room is not None and not room.any()):
            return None
        e = self.energy() if room is None else self.energy() * room
        total = e.sum()
        if total > 0:
            k = int(rng.choice(len(e), p=e / total))
        else:
            k = int(rng.choice(np.flatnonzero(room))) if room is not None else int(rng.integers(len(e)))
        if attempt:
            self.children[k] += 1
            self.fruitless[k] += 1
        return self.seeds[k]

    def donor(self, rng: np.random.Generator, parent: Seed) -> Seed | None:
        """Another entry, uniformly (a splice's tail: variety matters more than rarity here)."""
        others = [k for k, s in enumerate(self.seeds) if s.test_id != parent.test_id]
        return self.seeds[others[int(rng.integers(len(others)))]] if others else None
