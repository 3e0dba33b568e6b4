"""Drawing one attribute bin (Algorithm 2's SampleFromBin): the part of binning that specs
drawing their own ranges (Slice) share with the generator, so ops need not import gen/."""

from __future__ import annotations

import math
from collections.abc import Sequence

import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.abstract.terms import conj, eq, ge, le


def n_bins(kind: AttrKind, k: int) -> int:
    """How many bins a kind draws from: SIZE 1..k, PAD 0..k, SIGNED -k..k."""
    return {AttrKind.SIZE: k, AttrKind.PAD: k + 1, AttrKind.SIGNED: 2 * k + 1}[kind]


def bin_range(draw: ChoiceSource, i: int, k: int) -> tuple[int, int | None]:
    """SampleFromBin: a sub-range of [2^(i-1), 2^i); the last bin is open."""
    if i == k:
        return 2 ** (k - 1), None
    b, t = sorted((draw.uniform("bin_lo", i - 1, i), draw.uniform("bin_hi", i - 1, i)))
    return math.floor(2**b), math.floor(2**t)


def draw_bin(
    draw: ChoiceSource,
    sym: z3.ArithRef,
    kind: AttrKind,
    k: int,
    weights: Sequence[float] | None,
) -> tuple[int, z3.BoolRef]:
    """Pick a bin for one attribute and return (bin id, its constraint)."""
    idx = draw.index(f"bin.{kind.value}", n_bins(kind, k), weights)
    if kind is AttrKind.SIZE:
        i, sign = idx + 1, 1
    elif kind is AttrKind.PAD:
        i, sign = idx, 1
    else:
        i, sign = abs(idx - k), (1 if idx >= k else -1)
    if i == 0:
        return 0, eq(sym, 0)
    lo, hi = bin_range(draw, i, k)
    if sign > 0:
        cons = ge(sym, lo) if hi is None else conj(ge(sym, lo), le(sym, hi))
    else:
        cons = le(sym, -lo) if hi is None else conj(le(sym, -lo), ge(sym, -hi))
    return sign * i, cons
