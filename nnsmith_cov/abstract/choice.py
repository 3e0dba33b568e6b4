"""The one seeded source of every random decision, recording each draw.

Specs, the generator and binning draw through a `ChoiceSource`; nothing else
uses `random`, `np.random` or torch's generator for decisions. A draw is stored
as (label, value) where value is JSON-able (an index into the options for
`choice`), so a recorded list can be fed back to replay a graph draw by draw,
and the scheduler can see which labelled choices a test was made of.

Replay is strict by default: a recorded draw that does not fit its call raises
`ReplayDivergence`. A *lenient* source (for mutants, whose recorded draws were
edited) instead draws fresh where a draw does not fit: a value of None, out of
range, or under another label. On a label mismatch it first looks a few draws
ahead for the asked label, without crossing an `ANCHOR` draw (the start of an
insertion try): after an operator swap, the old operator's attribute draws are
skipped and the next try lines up again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


# Draws a lenient replay never skips past while looking for another label.
ANCHORS = frozenset({"op"})
LOOKAHEAD = 24  # draws a lenient replay looks ahead for the asked label


def redraw(avoid: int | float) -> list[int | float]:
    """A prefix value asking for a fresh draw other than `avoid` where the call has another
    option (a mutant's changed choice); None asks for any fresh draw. A one-element list, so
    that a mutated prefix stays JSON (an internal error's record holds it)."""
    return [avoid]


Replayed = int | float | list[int | float] | None  # what a prefix may hold for one draw


class ReplayDivergence(Exception):
    """A replayed draw does not fit the call that asks for it."""


@dataclass
class ChoiceSource:
    """Seeded draws with a record; `prefix` replays earlier draws first.

    Not thread-safe: one source per graph being generated.
    """

    seed: int
    prefix: Sequence[tuple[str, Replayed]] = ()
    record: list[tuple[str, int | float]] = field(default_factory=list)
    stream: int = 0  # another independent stream of draws from the same seed
    lenient: bool = False  # a prefix draw that does not fit is drawn fresh instead of raising
    # Weights for fresh draws of these labels when the caller gives none (the scheduler's
    # learned shares of a spec's export forms, "conv.form" -> one weight per option).
    weights: Mapping[str, Sequence[float]] | None = None

    def __post_init__(self) -> None:
        # A str seed is hashed with SHA-512 by `random`: the same in every process.
        self._rng = random.Random(self.seed if self.stream == 0 else f"{self.seed}/{self.stream}")
        self._pos = 0

    def _next(
        self,
        label: str,
        fresh: int | float,
        fits: Callable[[int | float], bool] = lambda v: True,
        other: Callable[[int | float], int | float] = lambda v: v,
    ) -> int | float:
        """The replayed value for this draw, else `fresh`; `other(v)` is an option other than v
        (v itself if there is none), for a `redraw`."""
        # Always advance the rng so a replayed prefix leaves the stream where
        # a fresh run would be.
        value: int | float = fresh
        if self._pos < len(self.prefix):
            plabel, pvalue = self.prefix[self._pos]
            if plabel != label and self.lenient:
                plabel, pvalue = self._resync(label)
            if plabel == label:
                self._pos += 1
                if isinstance(pvalue, list | tuple) and len(pvalue) == 1:  # see `redraw`
                    value = other(fresh) if fresh == pvalue[0] else fresh
                elif pvalue is not None and (fits(pvalue) or not self.lenient):
                    value = pvalue
            elif not self.lenient:
                raise ReplayDivergence(f"draw {self._pos}: replay has {plabel!r}, asked {label!r}")
        if not fits(value):
            raise ReplayDivergence(f"{label}: replayed value {value} does not fit")
        self.record.append((label, value))
        return value

    def _resync(self, label: str) -> tuple[str, Replayed]:
        """Skip to the next prefix draw labelled `label` within the look-ahead, stopping at an
        anchor (unless `label` is one); the current draw when there is none."""
        for pos in range(self._pos, min(self._pos + LOOKAHEAD, len(self.prefix))):
            plabel, pvalue = self.prefix[pos]
            if plabel == label:
                self._pos = pos
                return plabel, pvalue
            if plabel in ANCHORS and label not in ANCHORS:
                break
        return self.prefix[self._pos]

    def integer(self, label: str, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi]."""
        fresh = self._rng.randint(lo, hi)
        return int(
            self._next(label, fresh, lambda v: _whole(v) and lo <= v <= hi, lambda v: lo + (v - lo + 1) % (hi - lo + 1))
        )

    def uniform(self, label: str, lo: float, hi: float) -> float:
        return float(self._next(label, self._rng.uniform(lo, hi), lambda v: isinstance(v, int | float)))

    def coin(self, label: str, p: float = 0.5) -> bool:
        return bool(self._next(label, int(self._rng.random() < p), lambda v: v in (0, 1), lambda v: 1 - v))

    def index(self, label: str, n: int, weights: Sequence[float] | None = None) -> int:
        """An index in [0, n), uniform or proportional to `weights`. A replayed -k means the
        k-th option from the end (recorded as the index it stands for)."""
        if n <= 0:
            raise ValueError(f"{label}: nothing to choose from")
        if weights is None and self.weights is not None and len(self.weights.get(label, ())) == n:
            weights = self.weights[label]
        if weights is None:
            fresh = self._rng.randrange(n)
        else:
            fresh = self._rng.choices(range(n), weights=weights)[0]
        value = int(self._next(label, fresh, lambda v: _whole(v) and -n <= v < n, lambda v: (v + 1) % n))
        if value < 0:  # a mutant's prefix counts from the end ("the newest value"): keep what it meant
            value += n
            self.record[-1] = (label, value)
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


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
