"""Attribute bins (Algorithm 2): each bin's range, kinds, and the choice source under them."""

from __future__ import annotations

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from nnsmith_cov.abstract.bins import bin_range, draw_bin, n_bins
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.op import AttrKind


@given(seed=st.integers(0, 2**31), k=st.integers(2, 10), data=st.data())
def test_bin_ranges_lie_in_their_exponential_bin(seed, k, data):
    i = data.draw(st.integers(1, k))
    lo, hi = bin_range(ChoiceSource(seed), i, k)
    if i == k:
        assert lo == 2 ** (k - 1) and hi is None
    else:
        assert 2 ** (i - 1) <= lo <= hi <= 2**i


@pytest.mark.parametrize("kind", list(AttrKind)[:3])
@given(seed=st.integers(0, 2**31))
def test_drawn_bins_constrain_the_attribute(kind, seed):
    x = z3.Int("x")
    b, cons = draw_bin(ChoiceSource(seed), x, kind, 7, None)
    s = z3.Solver()
    s.add(cons)
    assert s.check() == z3.sat
    v = s.model().eval(x).as_long()
    if b == 0:
        assert v == 0 and kind is not AttrKind.SIZE
    elif b > 0:
        assert 2 ** (b - 1) <= v and (b == 7 or v <= 2**b)
    else:
        assert kind is AttrKind.SIGNED and -(2**-b) <= v <= -(2 ** (-b - 1)) or (b == -7 and v <= -64)


def test_bin_counts_per_kind():
    assert n_bins(AttrKind.SIZE, 7) == 7
    assert n_bins(AttrKind.PAD, 7) == 8
    assert n_bins(AttrKind.SIGNED, 7) == 15


def test_choice_source_is_seeded_and_recorded():
    a, b = ChoiceSource(42), ChoiceSource(42)
    draws_a = [a.integer("n", 0, 100), a.choice("c", "xyz"), a.coin("f"), a.sample("s", range(10), 3)]
    draws_b = [b.integer("n", 0, 100), b.choice("c", "xyz"), b.coin("f"), b.sample("s", range(10), 3)]
    assert draws_a == draws_b
    assert [label for label, _ in a.record] == ["n", "c", "f", "s", "s", "s"]
    replay = ChoiceSource(7, prefix=a.record)
    assert [replay.integer("n", 0, 100), replay.choice("c", "xyz")] == draws_a[:2]
