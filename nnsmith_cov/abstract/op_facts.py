"""The kinds of per-op facts a spec declares for the analyses that read graphs (the range
analysis of `gen.feasibility`, the value search): what its elements do, how it moves
with its inputs, where its inputs must lie. The defaults live on `OpSpec`; each op says
what holds of it, so adding an op is one place."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


class Elements(enum.Enum):
    """Where an op's output elements come from, relative to its first input's."""

    COMPUTED = "computed"  # the default: new numbers
    ALL = "all"  # every input element appears in the output (reordered, reshaped, repeated)
    SOME = "some"  # each output element is one of the input's, and not every one need appear
    ONE_OF = "one_of"  # each output element is one of the input's, picked by value (a maximum)


class Monotone(enum.Enum):
    """How an op's output moves with its inputs, element by element."""

    NONE = "none"  # the default: no order kept (or not declared)
    MOVES = "moves"  # non-decreasing, and it only moves, picks, clamps or zeroes elements: exact in any dtype
    RISING = "rising"  # non-decreasing in every input
    FALLING = "falling"  # non-increasing (one input)
    MAGNITUDE = "magnitude"  # non-decreasing in each element's magnitude (reductions of |x|)

    @property
    def trend(self) -> int:
        """+1 rising, -1 falling, 0 neither (as a map of the element's value)."""
        return {Monotone.MOVES: 1, Monotone.RISING: 1, Monotone.FALLING: -1}.get(self, 0)


class Domain(NamedTuple):
    """Where every element of an input of a valid execution lies: in [lo, hi] (ends left out
    where open) and, with `nonzero`, not 0."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    nonzero: bool = False

    @property
    def bounded(self) -> bool:
        """Whether it is an interval narrower than the whole line (not only "not 0")."""
        return self.lo > float("-inf") or self.hi < float("inf")


@dataclass(frozen=True)
class ValueMap:
    """A unary op that is one fixed function of each element (no attribute changes it): the
    range analysis maps bounds through `fn`, in float64. Its trend is the op's `monotone`,
    the interval its input keeps to the op's first `input_domains` entry."""

    fn: Callable[[Any], Any] | None = None  # None: the op's `torch_fn`
    whole: bool = False  # every result is a whole number (Floor, Sign)
    # Interior minima (where, value) of a map that rises but for them (Gelu's dip)
    dips: tuple[tuple[float, float], ...] = ()
