"""The corpus disk budget (`--max-corpus-mb`): what is dropped first when the corpus outgrows it.

The rule, in order:
  1. blobs (model, inputs, oracle) of tests that own no rare branch, oldest first; a test
     owns a rare branch when one of its branches is reached by at most `rare` corpus entries
     (so its bytes are the only way, short of regeneration, to show that branch again);
  2. then blobs of the other tests, oldest first.
Records, bitmaps, findings rows, the map and the timeline are never dropped, and nor are the
finding bundles under RUN/findings (they live outside the corpus). A dropped test replays
from its record: the graph is stored, and its values are searched again from its seed.

The budget counts the pages the corpus's records occupy (`CorpusStore.used_bytes`), not
the size of data.mdb: LMDB never shrinks its file, but reuses the pages dropping frees, so
the file stops growing near the budget. Each enforcement drops down to `LOW_WATER` of the
budget so that it runs now and then, not after every test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nnsmith_cov.corpus.blobpack import is_dropped
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.coverage.covmap import Hits

LOW_WATER = 0.9
CHECK_EVERY = 16  # commits between two measurements of the corpus size (a handful of page stats)


@dataclass
class Dropped:
    """What one enforcement did."""

    tests: list[int]
    freed_bytes: int
    used_bytes: int  # after it
    over: bool  # still over the budget: records and bitmaps alone exceed it


class DiskBudget:
    """Keeps one writable corpus under `max_bytes` by the rule above. Not thread-safe: the
    ledger calls it under its lock, after each commit."""

    def __init__(self, store: CorpusStore, max_bytes: int, rare: int = 1) -> None:
        if max_bytes <= 0:
            raise ValueError("the disk budget must be positive")
        self.store, self.max_bytes, self.rare = store, max_bytes, rare
        self._reach: np.ndarray | None = None  # corpus entries reaching each branch; built on first need
        self._dropped: set[int] = set()
        self._commits = 0

    def note(self, hits: Hits | None) -> None:
        """A new corpus entry's hits (call after each commit that stored a bitmap)."""
        if hits is not None and self._reach is not None:
            self._reach[hits.index] += 1

    def after_commit(self) -> Dropped | None:
        """Measure every CHECK_EVERY commits; enforce when over the budget."""
        self._commits += 1
        if self._commits % CHECK_EVERY:
            return None
        return self.enforce()

    def enforce(self) -> Dropped | None:
        """Drop blobs by the rule until the corpus is under LOW_WATER of the budget; None
        when it already is under the budget."""
        used = self.store.used_bytes()
        if used <= self.max_bytes:
            return None
        self._build_reach()
        target = int(self.max_bytes * LOW_WATER)
        dropped: list[int] = []
        freed = 0
        for owners_too in (False, True):
            for test_id, size in self._candidates(owners_too):
                if used - freed <= target:
                    break
                dropped.append(test_id)
                freed += size
        if dropped:
            freed = self.store.drop_blobs(dropped)
            self._dropped.update(dropped)
        after = self.store.used_bytes()
        return Dropped(dropped, freed, after, after > self.max_bytes)

    def _candidates(self, owners_too: bool) -> Iterator[tuple[int, int]]:
        """(test id, stored blob bytes) of tests with blobs left, oldest first; without
        `owners_too`, only those owning no rare branch."""
        for test_id, _ in self.store.entries(include_finding_only=True):
            if test_id in self._dropped:
                continue
            with self.store.snapshot() as view:
                stored = view.stored_blobs(test_id)
                hits = view.hits(test_id)
            if not stored or any(is_dropped(d) for d in stored.values()):
                self._dropped.add(test_id)
                continue
            reach = self._reach
            owner = hits is not None and reach is not None and bool(np.any(reach[hits.index] <= self.rare))
            if owner == owners_too:  # pass 1 takes non-owners, pass 2 the owners it skipped
                yield test_id, sum(len(d) for d in stored.values())

    def _build_reach(self) -> None:
        if self._reach is not None:
            return
        size = self.store.meta.universe_size
        self._reach = np.zeros(size, np.uint32)
        for test_id, _ in self.store.entries():
            hits = self.store.hits(test_id)
            if hits is not None:
                self._reach[hits.index] += 1
