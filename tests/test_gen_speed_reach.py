"""Issue 29: cheaper binning checks, and fixed-rank ops reached through a Reshape bridge."""

from __future__ import annotations

import pytest
import z3

from nnsmith_cov.gen.generator import GenConfig, generate
from nnsmith_cov.gen.reach import BRIDGE_OP, backward_ranks
from nnsmith_cov.gen.solver import _rlimit_count
from nnsmith_cov.ops import ALL_OPS

BY_NAME = {o.name(): o for o in ALL_OPS}


def test_rlimit_count_reads_what_z3_reports():
    s = z3.Solver()
    x, y = z3.Ints("x y")
    s.add(x * y > 7, x > 1, y < 9)
    assert s.check() == z3.sat
    stats = s.statistics()
    assert _rlimit_count(stats, -1) == stats.get_key_value("rlimit count") > 0


def test_bin_check_rlimit_and_bridge_prob_are_checked():
    with pytest.raises(ValueError, match="bin_check_rlimit"):
        GenConfig(ops=ALL_OPS, bin_check_rlimit=0)
    with pytest.raises(ValueError, match="bridge_prob"):
        GenConfig(ops=ALL_OPS, bridge_prob=1.5)


def test_bridges_off_by_default_draw_nothing():
    ops = [BY_NAME[n] for n in ("Abs", "Conv2d", BRIDGE_OP)]
    for seed in range(6):
        rec = generate(GenConfig(nodes=6, ops=ops), seed).record
        assert not any(label == "bridge" for label, _ in rec.draws)


def test_a_tiny_bin_cap_keeps_no_bin_and_the_graph_unchanged_before_binning():
    full = generate(GenConfig(nodes=5, ops=ALL_OPS), 3)
    capped = generate(GenConfig(nodes=5, ops=ALL_OPS, bin_check_rlimit=1), 3)
    # Insertion does not see the cap: the same ops; binning then keeps nothing.
    assert capped.record.ops == full.record.ops
    assert capped.record.bins and not any(b.kept for b in capped.record.bins)
    assert any(b.kept for b in full.record.bins)


def test_backward_ranks_follow_the_class():
    assert backward_ranks(BY_NAME["Conv2d"]) == {4}
    assert backward_ranks(BY_NAME["MaxPool1d"]) == {3}
    assert backward_ranks(BY_NAME["PixelShuffle"]) == {4}
    assert backward_ranks(BY_NAME["Relu"]) == set(range(6))
    assert backward_ranks(BY_NAME["Reshape"]) is None  # its in_ranks_for draws


def test_a_bridge_brings_a_fixed_rank_op_into_more_graphs():
    # Abs and Relu keep whatever rank the graph starts with: Conv2d needs rank 4, which
    # without a bridge only a start at rank 4 or a Reshape drawn by chance gives it.
    ops = [BY_NAME[n] for n in ("Abs", "Relu", "Conv2d", BRIDGE_OP)]
    convs = {0.0: 0, 1.0: 0}
    bridged = 0
    for prob in convs:
        for seed in range(10):
            rec = generate(GenConfig(nodes=6, ops=ops, bridge_prob=prob), seed).record
            convs[prob] += rec.ops.count("Conv2d")
            bridged += prob == 1.0 and (BRIDGE_OP, "Conv2d") in list(zip(rec.ops, rec.ops[1:]))
    assert convs[1.0] > convs[0.0]
    assert bridged >= 2


def test_no_bridge_without_forward_insertion():
    ops = [BY_NAME[n] for n in ("Abs", "Conv2d", BRIDGE_OP)]
    for seed in range(4):
        rec = generate(GenConfig(nodes=5, ops=ops, forward_prob=0.0, bridge_prob=1.0), seed).record
        assert set(rec.directions) <= {"backward"}
