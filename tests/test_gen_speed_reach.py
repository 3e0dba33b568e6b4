"""Issue 29: cheaper binning checks, fixed-rank ops reached through a Reshape bridge, ops of
dtypes no value has through a Cast bridge."""

from __future__ import annotations

import math

import pytest
import torch
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.symbols import context, fresh_context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor
from nnsmith_cov.gen.feasibility.layout import triangle
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import DEFAULT_OPSET
from nnsmith_cov.gen.reach import BRIDGE_OP, backward_ranks, bridge_for
from nnsmith_cov.gen.solver import BudgetSolver, SolverTimeout, _rlimit_count
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
    assert backward_ranks(BY_NAME["Reshape"]) is None  # any rank
    # Ops with their own in_ranks_for: the ranks for which it answers.
    assert backward_ranks(BY_NAME["Addmm"]) == {2}
    assert backward_ranks(BY_NAME["AffineGrid"]) == {4, 5}
    assert backward_ranks(BY_NAME["Flatten"]) == set(range(1, 6))


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


def _holds(model: z3.ModelRef, cons: list) -> bool:
    return all(z3.is_true(model.eval(c, model_completion=True)) for c in cons)


@pytest.mark.parametrize("lazy", [False, True])
def test_the_model_satisfies_everything_committed_whatever_the_last_check_said(lazy):
    with fresh_context():
        x, y = int_sym("x"), int_sym("y")
        s = BudgetSolver(10_000, 0, 1_000_000, 10_000_000, lazy=lazy)
        committed = [x >= 1, y >= 1, x * y <= 64]
        assert s.try_add(committed)
        assert s.try_add([x >= 5])
        committed.append(x >= 5)
        checks = s.checks
        assert not s.try_add([y >= 20])  # unsat: Z3 holds no model now
        m = s.model()
        assert _holds(m, committed) and m.eval(y).as_long() < 20
        # Lazy, the last sat check's model was never fetched: one more check solved the
        # committed set again; eager, the kept model answered without one.
        assert s.checks == checks + 1 + lazy
        assert s.model() is m  # asked again, no further check


def test_a_lazy_solver_told_to_keep_models_keeps_the_current_one():
    with fresh_context():
        x = int_sym("x")
        s = BudgetSolver(10_000, 0, 1_000_000, 10_000_000, lazy=True)
        assert s.try_add([x >= 3, x <= 9])
        s.keep_models()  # fetched now, while Z3 still holds it
        checks = s.checks
        assert not s.try_add([x >= 10])
        assert _holds(s.model(), [x >= 3, x <= 9]) and s.checks == checks + 1


def test_a_solver_with_nothing_committed_has_no_model():
    with fresh_context():
        s = BudgetSolver(10_000, 0, 1_000_000, 10_000_000, lazy=True)
        assert not s.try_add([False])
        with pytest.raises(SolverTimeout):
            s.model()


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


def test_a_cast_bridge_comes_from_a_dtype_the_op_takes():
    ops = [BY_NAME[n] for n in ("Abs", "BitShift", "CastF32", "CastI64", BRIDGE_OP)]
    f32 = DType.float32
    br = bridge_for(
        BY_NAME["BitShift"], {f32}, [(f32, 2), (DType.float16, 3)], ops, DEFAULT_OPSET, 1.0, ChoiceSource(0)
    )
    # Backward onto the float32 placeholder (the only dtype a Cast in `ops` makes), from uint8.
    assert br is not None and br.op is BY_NAME["CastF32"] and not br.forward
    assert br.dtype is DType.uint8 and br.then is BY_NAME["BitShift"]
    # No Cast to a placeholder's dtype: no bridge, and nothing drawn.
    draw = ChoiceSource(0)
    assert bridge_for(BY_NAME["BitShift"], {f32}, [(DType.float16, 2)], ops, DEFAULT_OPSET, 1.0, draw) is None
    assert not draw.record
    # A dtype the graph has, of another rank: a Reshape to the rank every data input takes.
    rank = bridge_for(BY_NAME["Addmm"], {f32}, [(f32, 4)], ops, DEFAULT_OPSET, 1.0, ChoiceSource(0))
    assert rank is not None and rank.op is BY_NAME[BRIDGE_OP] and rank.forward and rank.rank == 2


def test_a_cast_bridge_brings_an_op_of_a_missing_dtype_into_more_graphs():
    # BitShift takes uint8 only; Abs and Relu keep the first placeholder's dtype, and the
    # Casts, seldom drawn, seldom bring uint8 in: without a bridge BitShift reaches only
    # graphs that start in uint8.
    casts = ("CastF16", "CastF32", "CastF64", "CastI32", "CastI64", "CastBool")
    ops = [BY_NAME[n] for n in ("Abs", "Relu", "BitShift", *casts)]
    rare = dict.fromkeys(casts, 0.05)
    shifts = {0.0: 0, 1.0: 0}
    bridged = 0
    for prob in shifts:
        for seed in range(12):
            g = generate(GenConfig(nodes=6, ops=ops, bridge_prob=prob, op_weights=rare), seed).graph
            shifts[prob] += sum(i.op == "BitShift" for i in g.insts)
            # The bridge: a Cast reading a uint8 value that a BitShift also reads.
            u8 = {v for i in g.insts if i.op in casts for v in i.inputs if g.types[v].dtype is DType.uint8}
            bridged += prob == 1.0 and any(i.op == "BitShift" and u8 & set(i.inputs) for i in g.insts)
    assert shifts[1.0] > shifts[0.0]
    assert bridged >= 2


def test_a_backward_try_without_a_placeholder_goes_forward():
    moved = 0
    for seed in range(6):
        rec = generate(GenConfig(nodes=10, ops=ALL_OPS), seed).record
        ways = [bool(v) for label, v in rec.draws[: rec.insert_draws] if label == "forward"]
        done = [w for w, ok in zip(ways, rec.try_ok) if ok == "1"]
        assert len(done) == len(rec.directions)
        moved += sum(not w and d == "forward" for w, d in zip(done, rec.directions))
    assert moved >= 1


@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 4), (1, 2, 6, 3), (5, 1), (1, 7)])
def test_the_analysis_triangle_is_torchs(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape)))
    for d in range(-7, 8):
        assert torch.equal(triangle("Tril", d, x), torch.tril(x, d))
        assert torch.equal(triangle("Triu", d, x), torch.triu(x, d))
    inf = torch.tensor(math.inf).expand(shape)  # bounds: infinities stay, zeros come in
    assert torch.equal(triangle("Triu", 1, inf), torch.triu(inf, 1))


def test_positive_makes_the_terms_the_operators_make():
    with fresh_context():
        t = AbsTensor([int_sym("a"), 3, int_sym("b") * 2, 0], DType.float32)
        fast = t.positive()
        assert fast[1] is True and fast[3] is False
        for got, d in zip(fast, t.shape):
            if isinstance(d, z3.ExprRef):
                assert got.eq(d >= 1)
