"""AFL-style coverage maps: hit counts -> bucket bits, and the global virgin map.

A collector hands over a test's hits sparsely (`Hits`: branch indices and raw
counts). `classify` turns counts into one bit per bucket (1, 2, 3, 4-7, 8-15,
16-31, 32-127, 128+), and `VirginMap` remembers, per branch, which bucket bits
no test has set yet (AFL's inverted "virgin" bitmap: a set bit means not seen).
A test is interesting when it clears a virgin bit; it brings a *new branch* when
it reaches a branch no test had reached, and a *new bucket* when it only reaches
a known branch a new number of times. A branch whose hits vary between runs of one
input (a collector's calibration finds them: thread races, caches) is *flaky*: it is
counted once reached, like any other, but its hit counts never make a test new
(`VirginMap.flag`), so noise neither fills the corpus nor pays the scheduler.

Called once per test on a few thousand hits: everything here is numpy on the
sparse hits, never a loop over the whole map.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# count -> bucket bit, for counts 0..255 (larger counts are clipped to 255 first)
BUCKET_LUT = np.zeros(256, dtype=np.uint8)
for _lo, _hi, _bit in (
    (1, 1, 0),
    (2, 2, 1),
    (3, 3, 2),
    (4, 7, 3),
    (8, 15, 4),
    (16, 31, 5),
    (32, 127, 6),
    (128, 255, 7),
):
    BUCKET_LUT[_lo : _hi + 1] = 1 << _bit
UNSEEN = 0xFF


@dataclass(frozen=True)
class Hits:
    """A test's coverage: the branches it reached (sorted, unique) and how often (>= 1).

    Collectors that only know presence (coverage.py) report count 1.
    """

    index: np.ndarray  # uint32, sorted, unique
    count: np.ndarray  # uint32, same length, all >= 1

    @staticmethod
    def empty() -> Hits:
        return Hits(np.zeros(0, np.uint32), np.zeros(0, np.uint32))

    @staticmethod
    def from_arrays(index: np.ndarray, count: np.ndarray) -> Hits:
        """Normalize: drop zero counts, sort, and sum the counts of repeated indices."""
        index = np.asarray(index, dtype=np.uint32)
        count = np.asarray(count, dtype=np.uint64)
        keep = count != 0
        index, count = index[keep], count[keep]
        uniq, inverse = np.unique(index, return_inverse=True)
        summed = np.zeros(len(uniq), dtype=np.uint64)
        np.add.at(summed, inverse, count)
        return Hits(uniq.astype(np.uint32), np.minimum(summed, 0xFFFFFFFF).astype(np.uint32))

    def __len__(self) -> int:
        return len(self.index)

    def __add__(self, other: Hits) -> Hits:
        """Hits of two parts of one test (e.g. export, then each backend): counts add up."""
        return Hits.from_arrays(np.concatenate([self.index, other.index]), np.concatenate([self.count, other.count]))

    def to_wire(self) -> dict[str, bytes]:
        return {"index": self.index.astype("<u4").tobytes(), "count": self.count.astype("<u4").tobytes()}

    @staticmethod
    def from_wire(obj: dict[str, bytes], size: int | None = None) -> Hits:
        """Decode and validate; `size` is the universe size the indices must stay below."""
        index = np.frombuffer(obj["index"], dtype="<u4").astype(np.uint32)
        count = np.frombuffer(obj["count"], dtype="<u4").astype(np.uint32)
        if len(index) != len(count):
            raise ValueError("hits: index and count differ in length")
        if size is not None and len(index) and int(index.max()) >= size:
            raise ValueError(f"hits: branch index {int(index.max())} outside a universe of {size}")
        return Hits.from_arrays(index, count)


def classify(count: np.ndarray) -> np.ndarray:
    """Bucket bits (uint8) of raw hit counts of any integer dtype."""
    return BUCKET_LUT[np.minimum(count, 255).astype(np.uint8)]


@dataclass(frozen=True)
class Novelty:
    """What a test added to the map."""

    new_branches: int  # branches no earlier test reached
    new_buckets: int  # known branches reached a new number of times
    # a composite collector's map: the same two counts per part (not stored; see `reward_of`)
    parts: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    @property
    def interesting(self) -> bool:
        return bool(self.new_branches or self.new_buckets)

    @property
    def reward(self) -> float:
        """A new branch weighs as much as four new buckets (AFL scores 2 vs 1; branches are rarer here)."""
        return self.new_branches + 0.25 * self.new_buckets


class VirginMap:
    """Per branch, the bucket bits no test has set yet (0xFF: never reached)."""

    def __init__(self, size: int, virgin: np.ndarray | None = None) -> None:
        if virgin is None:
            virgin = np.full(size, UNSEEN, dtype=np.uint8)
        if virgin.shape != (size,) or virgin.dtype != np.uint8:
            raise ValueError(f"virgin map of shape {virgin.shape} and dtype {virgin.dtype}, expected ({size},) uint8")
        self.virgin = virgin
        self.flaky: np.ndarray | None = None  # bool per branch, from the first `flag`

    def flag(self, branches: np.ndarray) -> None:
        """Mark `branches` flaky: from now on only their first reach (a new branch) makes a test
        new, never their buckets. The map itself is not touched: it stays the union of the kept
        tests' hits, flaky branches' counts included."""
        idx = np.asarray(branches, dtype=np.int64)
        idx = idx[(idx >= 0) & (idx < self.size)]
        if not len(idx):
            return
        if self.flaky is None:
            self.flaky = np.zeros(self.size, dtype=bool)
        self.flaky[idx] = True

    def steady(self, hits: Hits) -> Hits:
        """`hits` less the flaky branches: what feedback weighs beyond first reaches (a branch's
        rarity, an entry's energy), as chance should not steer it."""
        if self.flaky is None or not len(hits):
            return hits
        keep = ~self.flaky[hits.index]
        return hits if keep.all() else Hits(hits.index[keep], hits.count[keep])

    def flagged(self) -> np.ndarray:
        """The branches flagged flaky, sorted."""
        return np.zeros(0, np.uint32) if self.flaky is None else np.flatnonzero(self.flaky).astype(np.uint32)

    @property
    def size(self) -> int:
        return len(self.virgin)

    def novelty(self, hits: Hits) -> Novelty:
        """What `hits` would add, without recording it."""
        if len(hits) and int(hits.index[-1]) >= self.size:
            raise ValueError(f"hits: branch index {int(hits.index[-1])} outside a map of {self.size}")
        bits = classify(hits.count)
        virgin = self.virgin[hits.index]
        fresh = (bits & virgin) != 0
        if self.flaky is not None:  # a flaky branch's buckets are noise
            fresh &= (virgin == UNSEEN) | ~self.flaky[hits.index]
        new_branches = int(np.count_nonzero(fresh & (virgin == UNSEEN)))
        return Novelty(new_branches, int(np.count_nonzero(fresh)) - new_branches)

    def update(self, hits: Hits, parts: Sequence[int] = ()) -> Novelty:
        """Record `hits`; returns what they added (AFL's has_new_bits, then clear), also per part
        of the map when `parts` gives where each part after the first starts."""
        found = self.novelty(hits)
        if parts and found.interesting:
            cuts = np.searchsorted(hits.index, parts)
            pieces = [Hits(i, c) for i, c in zip(np.split(hits.index, cuts), np.split(hits.count, cuts), strict=True)]
            per_part = tuple((n.new_branches, n.new_buckets) for n in map(self.novelty, pieces))
            found = Novelty(found.new_branches, found.new_buckets, per_part)
        if found.interesting:
            self.virgin[hits.index] &= ~classify(hits.count)
        return found

    def covered(self) -> np.ndarray:
        """Indices of every branch some test reached."""
        return np.flatnonzero(self.virgin != UNSEEN)

    def count(self, mask: np.ndarray | None = None) -> int:
        """Branches reached (within `mask`, a boolean array over the universe, when given)."""
        reached = self.virgin != UNSEEN
        return int(np.count_nonzero(reached if mask is None else reached & mask))

    def to_bytes(self) -> bytes:
        return zlib.compress(self.virgin.tobytes(), 6)

    @staticmethod
    def from_bytes(data: bytes, size: int) -> VirginMap:
        try:
            raw = zlib.decompress(data)
        except zlib.error as e:
            raise ValueError(f"virgin map: not zlib data ({e})") from None
        if len(raw) != size:
            raise ValueError(f"virgin map of {len(raw)} branches, expected {size}")
        return VirginMap(size, np.frombuffer(raw, dtype=np.uint8).copy())
