"""The one seeded source of every random decision, recording each draw.

Specs, the generator and binning draw through a `ChoiceSource`; nothing else
uses `random`, `np.random` or torch's generator for decisions. A draw is stored
as (label, value) where value is JSON-able (an index into the options for
`choice`), so a recorded list can be fed back to replay a graph draw by draw,
and the scheduler can see which labelled choices a test was made of.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


class ReplayDivergence(Exception):
    """A replayed draw does not fit the call that asks for it."""


@dataclass
class ChoiceSource:
    """Seeded draws with a record; `prefix` replays earlier draws first.

    Not thread-safe: one source per graph being generated.
    """

    seed: int
    prefix: Sequence[tuple[str, int | float]] = ()
    record: list[tuple[str, int | float]] = field(default_factory=list)
    stream: int = 0  # another independent stream of draws from the same seed

    def __post_init__(self) -> None:
        # A str seed is hashed with SHA-512 by `random`: the same in every process.
        self._rng = random.Random(self.seed if self.stream == 0 else f"{self.seed}/{self.stream}")
        self._pos = 0

    def _next(self, label: str, fresh: int | float) -> int | float:
        # Always advance the rng so a replayed prefix leaves the stream where
        # a fresh run would be.
        if self._pos < len(self.prefix):
            plabel, value = self.prefix[self._pos]
            if plabel != label:
                raise ReplayDivergence(f"draw {self._pos}: replay has {plabel!r}, asked {label!r}")
            self._pos += 1
        else:
            value = fresh
        self.record.append((label, value))
        return value

    def integer(self, label: str, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi]."""
        value = int(self._next(label, self._rng.randint(lo, hi)))
        if not lo <= value <= hi:
            raise ReplayDivergence(f"{label}: {value} outside [{lo}, {hi}]")
        return value

    def uniform(self, label: str, lo: float, hi: float) -> float:
        return float(self._next(label, self._rng.uniform(lo, hi)))

    def coin(self, label: str, p: float = 0.5) -> bool:
        return bool(self._next(label, int(self._rng.random() < p)))

    def index(self, label: str, n: int, weights: Sequence[float] | None = None) -> int:
        """An index in [0, n), uniform or proportional to `weights`."""
        if n <= 0:
            raise ValueError(f"{label}: nothing to choose from")
        if weights is None:
            fresh = self._rng.randrange(n)
        else:
            fresh = self._rng.choices(range(n), weights=weights)[0]
        value = int(self._next(label, fresh))
        if not 0 <= value < n:
            raise ReplayDivergence(f"{label}: index {value} outside [0, {n})")
        return value

    def choice(self, label: str, options: Sequence[T], weights: Sequence[float] | None = None) -> T:
        return options[self.index(label, len(options), weights)]

    def sample(self, label: str, options: Sequence[T], k: int) -> list[T]:
        """k distinct options, in draw order."""
        pool = list(options)
        return [pool.pop(self.index(label, len(pool))) for _ in range(k)]

    def permutation(self, label: str, n: int) -> list[int]:
        return self.sample(label, range(n), n)

    def derive_seed(self, label: str) -> int:
        """A 31-bit seed for a library that wants its own (Z3, numpy)."""
        return self.integer(label, 0, 2**31 - 1)
