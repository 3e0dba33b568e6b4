"""Issue 29: cheaper binning checks, and fixed-rank ops reached through a Reshape bridge."""

from __future__ import annotations

import pytest
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.symbols import context, fresh_context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.reach import BRIDGE_OP, backward_ranks
from nnsmith_cov.gen.solver import BudgetSolver, _rlimit_count
from nnsmith_cov.ops import ALL_OPS

BY_NAME = {o.name(): o for o in ALL_OPS}


def test_rlimit_count_reads_what_z3_reports():
    s = z3.Solver()
    x, y = z3.Ints("x y")
    s.add(x * y > 7, x > 1, y < 9)
    assert s.check() == z3.sat
    stats = s.statistics()
    assert _rlimit_count(stats, -1) == stats.get_key_value("rlimit count") > 0


@pytest.mark.parametrize(
    "setting, bad",
    [("bin_check_rlimit", 0), ("bridge_prob", 1.5), ("bin_work_budget", 0), ("insert_check_rlimit", 0)],
)
def test_generation_caps_and_shares_are_checked(setting, bad):
    with pytest.raises(ValueError, match=setting):
        GenConfig(ops=ALL_OPS, **{setting: bad})


def test_bridges_off_draw_nothing():
    ops = [BY_NAME[n] for n in ("Abs", "Relu", "Conv2d", BRIDGE_OP)]
    drawn = False
    for seed in range(10):
        off = generate(GenConfig(nodes=6, ops=ops, bridge_prob=0.0), seed).record
        assert not any(label == "bridge" for label, _ in off.draws)
        drawn |= any(label == "bridge" for label, _ in generate(GenConfig(nodes=6, ops=ops), seed).record.draws)
    assert drawn  # on by default


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


def test_an_unsat_try_add_reports_its_core():
    with fresh_context():
        x, y = int_sym("x"), int_sym("y")
        s = BudgetSolver(10_000, 0, 1_000_000, 10_000_000)
        assert s.try_add([x >= 1, y >= 1, x + y <= 10]) and s.last_core is None
        # Only the first and the last bin contradict each other (with x + y <= 10).
        assert not s.try_add([x >= 6, y >= 2, x <= 9, y >= 5])
        assert s.last_core is not None and {0, 3} <= set(s.last_core)
        assert s.try_add([x >= 6, y >= 2, x <= 9]) and s.last_core is None
        assert not s.try_add([True, False]) and s.last_core == [1]


def test_a_tiny_binning_budget_keeps_no_bin_and_the_same_ops():
    full = generate(GenConfig(nodes=5, ops=ALL_OPS), 3)
    capped = generate(GenConfig(nodes=5, ops=ALL_OPS, bin_work_budget=1), 3)
    assert capped.record.ops == full.record.ops
    assert capped.record.bins and not any(b.kept for b in capped.record.bins)


def test_a_tiny_insertion_cap_rejects_every_op():
    with pytest.raises(GenerationError, match="no operator"):
        generate(GenConfig(nodes=2, ops=ALL_OPS, insert_check_rlimit=1, max_tries_per_node=3), 1)


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 3), (4, 2), (3, 3), (0, 4)])
def test_a_linear_reshape_has_no_unknowns(n, m):
    with fresh_context():
        op = BY_NAME[BRIDGE_OP](0)
        op.out_rank, op.linear = m, True
        op.setup(ChoiceSource(n * 10 + m), [(DType.float32, n)])
        x = AbsTensor([int_sym(f"d{i}") for i in range(n)], DType.float32)
        (out,) = op.type_transfer([x])
        assert not op.sym and out.rank == m
        cons = op.requires([x])
        if n:
            assert not cons
            # Every input dim lands in the output whole or in a merge; the others are 1.
            s = z3.Solver(ctx=context())
            s.add(*(d >= 2 for d in x.shape))
            total = z3.IntVal(1, context())
            for d in out.shape:
                total = total * d
            s.add(total != z3.Product(*x.shape) if n > 1 else total != x.shape[0])
            assert s.check() == z3.unsat
            assert sum(isinstance(d, int) and d == 1 for d in out.shape) == max(m - n, 0)


def test_a_bridge_is_a_linear_reshape():
    ops = [BY_NAME[n] for n in ("Abs", "Relu", "Conv2d", BRIDGE_OP)]
    bridged = 0
    for seed in range(10):
        g = generate(GenConfig(nodes=6, ops=ops, bridge_prob=1.0), seed).graph
        bridged += sum("units" in inst.attrs for inst in g.insts if inst.op == BRIDGE_OP)
    assert bridged >= 2
