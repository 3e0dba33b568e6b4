"""The fact a value carries (`Range`): bounds, values taken and reached, a value set and a box;
the dtype's own range, hulls, constants, and the domain slack by dtype."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from nnsmith_cov.abstract.dtype import DType

INF = math.inf
SLACK = 1e-3  # distance from a domain bound a "certainly reached" value must keep (float rounding)
# ... by the dtype the op computes in: float16 rounds at 1e-3 per op, float64 at 1e-16.
SLACKS = {DType.float16: SLACK, DType.float32: 1e-5, DType.float64: 1e-9}


@dataclass(frozen=True)
class Range:
    """What holds for every valid execution: lo <= each element <= hi; each value in
    `forced` is taken by some element; some element is <= `below`, some >= `above`.
    `integral`: every element is a whole number. `src` names the op a fact came from."""

    lo: float = -INF
    hi: float = INF
    forced: frozenset[float] = field(default_factory=frozenset)
    below: float = INF
    above: float = -INF
    integral: bool = False
    src: str = ""
    values: frozenset[float] | None = None  # every element is one of these (None: not known)
    # Per-element lower and upper bounds (the elements of a padding, a zeroed triangle are
    # known exactly); None when no more is known than lo and hi.
    box: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, compare=False, repr=False)

    def certainly_le(self, bound: float) -> bool:
        """Some element is certainly <= bound."""
        return self.hi <= bound or self.below <= bound or any(c <= bound for c in self.forced)

    def certainly_ge(self, bound: float) -> bool:
        return self.lo >= bound or self.above >= bound or any(c >= bound for c in self.forced)


def stored(bound: torch.Tensor) -> torch.Tensor:
    """A box bound as a `Range` keeps it: float and boolean bounds as they are, the
    whole-number bounds of integers in float64."""
    return bound if bound.is_floating_point() or bound.dtype is torch.bool else bound.double()


def dtype_range(dt: DType) -> Range:
    if dt is DType.bool:
        return Range(0.0, 1.0, integral=True, values=frozenset({0.0, 1.0}))
    if dt.is_float:
        return Range()
    info = torch.iinfo(dt.torch)
    return Range(float(info.min), float(info.max), integral=True)


def hull(rs: list[Range]) -> Range:
    return Range(min(r.lo for r in rs), max(r.hi for r in rs), integral=all(r.integral for r in rs))


def point(r: Range) -> bool:
    """Every element holds the same, known value."""
    return r.lo == r.hi and math.isfinite(r.lo)


def zero(r: Range) -> bool:
    return r.lo == r.hi == 0


def constant(value: float, src: str) -> Range:
    return Range(value, value, frozenset({value}), integral=float(value).is_integer(), src=src)


class Infeasible(Exception):
    """Raised by a transfer or a refinement that finds no value a valid execution may take."""
