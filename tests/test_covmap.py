"""Hit buckets, the virgin map and Hits on hand-made counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnsmith_cov.coverage.covmap import BUCKET_LUT, UNSEEN, Hits, VirginMap, classify


def _hits(pairs: dict[int, int]) -> Hits:
    return Hits.from_arrays(np.array(list(pairs), np.uint32), np.array(list(pairs.values()), np.uint32))


def test_buckets_follow_afl_ranges():
    expected = {0: 0, 1: 1, 2: 2, 3: 4, 4: 8, 7: 8, 8: 16, 15: 16, 16: 32, 31: 32, 32: 64, 127: 64, 128: 128, 255: 128}
    for count, bit in expected.items():
        assert BUCKET_LUT[count] == bit, count
    assert classify(np.array([1000, 300, 5], np.uint32)).tolist() == [128, 128, 8]


def test_new_branches_and_new_buckets_are_told_apart_on_an_8_branch_map():
    m = VirginMap(8)
    first = m.update(_hits({1: 1, 5: 3}))
    assert (first.new_branches, first.new_buckets) == (2, 0)
    assert m.virgin.tolist() == [UNSEEN, 0xFE, UNSEEN, UNSEEN, UNSEEN, 0xFB, UNSEEN, UNSEEN]
    again = m.update(_hits({1: 1, 5: 3}))
    assert not again.interesting
    more = m.update(_hits({1: 2, 5: 3, 6: 1}))  # branch 1 in a new bucket, branch 6 new
    assert (more.new_branches, more.new_buckets) == (1, 1)
    assert m.update(_hits({1: 2})).interesting is False
    assert m.count() == 3 and m.covered().tolist() == [1, 5, 6]
    assert m.count(np.array([True, True, False, False, False, False, True, False])) == 2


def test_a_flaky_branch_counts_once_reached_and_its_hit_counts_never_make_a_test_new():
    m = VirginMap(8)
    m.update(_hits({1: 1, 2: 1}))
    before = m.virgin.copy()
    m.flag(np.array([2, 6, 99]))  # 2 reached, 6 not yet; 99 lies outside the map: ignored
    assert m.virgin.tolist() == before.tolist()  # the map is untouched: the union of kept hits
    assert not m.update(_hits({1: 1, 2: 200})).interesting  # a new bucket of a flaky branch
    first = m.update(_hits({1: 1, 6: 3}))  # a flaky branch's first reach is a new branch
    assert (first.new_branches, first.new_buckets) == (1, 0)
    assert m.virgin[6] == UNSEEN & ~BUCKET_LUT[3]  # kept with its count, as its test's bitmap holds
    assert not m.update(_hits({1: 1, 6: 9})).interesting
    both = m.update(_hits({1: 2, 2: 200}))  # new for branch 1: the test is kept, 2's count with it
    assert (both.new_branches, both.new_buckets) == (0, 1) and m.virgin[2] == UNSEEN & ~BUCKET_LUT[1] & ~BUCKET_LUT[200]
    assert m.covered().tolist() == [1, 2, 6] and m.count() == 3
    assert m.steady(_hits({1: 4, 2: 5, 6: 1})).index.tolist() == [1]  # rarity and energy weigh steady ones


def test_novelty_does_not_record():
    m = VirginMap(4)
    assert m.novelty(_hits({2: 9})).new_branches == 1
    assert m.count() == 0


def test_reward_weighs_branches_over_buckets():
    m = VirginMap(4)
    m.update(_hits({0: 1}))
    assert m.novelty(_hits({0: 2})).reward < m.novelty(_hits({1: 1})).reward


def test_hits_merge_sums_counts_and_drops_zeros():
    h = Hits.from_arrays(np.array([5, 1, 5, 3], np.uint32), np.array([1, 2, 3, 0], np.uint32))
    assert h.index.tolist() == [1, 5] and h.count.tolist() == [2, 4]
    both = h + _hits({1: 1, 7: 2})
    assert both.index.tolist() == [1, 5, 7] and both.count.tolist() == [3, 4, 2]


def test_hits_wire_round_trip_and_validation():
    h = _hits({3: 1, 9: 200})
    back = Hits.from_wire(h.to_wire(), size=10)
    assert back.index.tolist() == [3, 9] and back.count.tolist() == [1, 200]
    with pytest.raises(ValueError, match="outside a universe"):
        Hits.from_wire(h.to_wire(), size=9)
    with pytest.raises(ValueError, match="differ in length"):
        Hits.from_wire({"index": h.to_wire()["index"], "count": b""})
    with pytest.raises(ValueError, match="outside a map"):
        VirginMap(9).update(h)


def test_map_serialization_round_trip_and_rejects_bad_bytes():
    m = VirginMap(16)
    m.update(_hits({0: 1, 15: 40}))
    back = VirginMap.from_bytes(m.to_bytes(), 16)
    assert np.array_equal(back.virgin, m.virgin)
    with pytest.raises(ValueError, match="expected 17"):
        VirginMap.from_bytes(m.to_bytes(), 17)
    with pytest.raises(ValueError, match="not zlib"):
        VirginMap.from_bytes(b"garbage", 16)


@given(st.lists(st.dictionaries(st.integers(0, 63), st.integers(1, 600), max_size=12), max_size=8))
def test_map_agrees_with_a_set_of_seen_buckets(tests):
    """The virgin map equals the naive model: the set of (branch, bucket) pairs seen so far."""
    m, seen = VirginMap(64), set()
    for t in tests:
        pairs = {(i, int(classify(np.array([c]))[0])) for i, c in t.items()}
        fresh = pairs - seen
        new_branches = len({i for i, _ in fresh} - {i for i, _ in seen})
        got = m.update(_hits(t))
        assert (got.new_branches, got.new_buckets) == (new_branches, len(fresh) - new_branches)
        seen |= pairs
    assert m.count() == len({i for i, _ in seen})
