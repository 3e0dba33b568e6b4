"""Graph generation: determinism, replay, both insertion directions, caps, bias knobs, budgets."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from nnsmith_cov.abstract.choice import ChoiceSource, ReplayDivergence
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import ALL_OPS, op_by_name

SEEDS = range(40)


def test_same_seed_same_graph_and_draws(cfg10):
    a, b = generate(cfg10, 7), generate(cfg10, 7)
    assert a.graph.dumps() == b.graph.dumps()
    assert a.record.draws == b.record.draws
    assert a.record.ops == b.record.ops and a.record.directions == b.record.directions


def test_graph_does_not_depend_on_process_history(cfg10, tmp_path):
    # Z3 answers depend on what its context saw before; each graph gets its own.
    fresh = generate(cfg10, 5).graph.dumps()
    for s in range(30, 40):
        generate(cfg10, s)
    assert generate(cfg10, 5).graph.dumps() == fresh
    subprocess.run(
        [sys.executable, "-m", "nnsmith_cov.cli", "generate", "--seed", "5", "-o", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    assert GraphIR.loads((tmp_path / "graph.json").read_text()).dumps() == fresh


def test_different_seeds_differ(cfg10):
    hashes = {generate(cfg10, s).graph.content_hash() for s in range(20)}
    assert len(hashes) == 20


def test_recorded_draws_replay_the_graph(cfg10):
    first = generate(cfg10, 11)
    # Another seed, but the recorded draws come first: the graph must be the same.
    replayed = generate(cfg10, 999, prefix=first.record.draws)
    assert replayed.graph.dumps() == first.graph.dumps()


def test_replay_divergence_is_reported():
    src = ChoiceSource(0, prefix=[("op", 3)])
    with pytest.raises(ReplayDivergence):
        src.coin("forward")


def test_graphs_are_well_formed_and_sized(cfg10):
    for seed in SEEDS:
        gen = generate(cfg10, seed)
        g = gen.graph
        g.check(lambda name: op_by_name(name) is not None)
        assert len(g.insts) == cfg10.nodes
        assert g.inputs, "every model has at least one input"
        assert g.outputs
        for t in g.types:
            assert all(d >= 1 for d in t.shape)
            assert t.nelement() <= cfg10.max_elems


def test_element_cap_binds_weights_too():
    cfg = GenConfig(nodes=8, ops=ALL_OPS, max_elems=64)
    for seed in SEEDS:
        g = generate(cfg, seed).graph
        assert max(g.types[v].nelement() for v in range(len(g.types))) <= 64
        assert all(g.types[w].nelement() <= 64 for w in g.weights)


def test_element_cap_binds_what_an_op_expands_on_the_way():
    # IndexPut's ONNX form expands its row to one per position before the ScatterND:
    # 64 positions of a 64-element row would be a 4096-element tensor in the backend.
    cfg = GenConfig(nodes=4, ops=[op_by_name("IndexPut"), op_by_name("Add")], max_elems=64)
    puts = 0
    for seed in range(40):
        g = generate(cfg, seed).graph
        for inst in g.insts:
            if inst.op == "IndexPut":
                puts += 1
                _, index, row = (g.types[v] for v in inst.inputs)
                assert index.shape[0] * row.nelement() <= 64
    assert puts >= 20


def test_both_insertion_directions_happen(cfg10):
    directions = collections.Counter()
    for seed in SEEDS:
        directions.update(generate(cfg10, seed).record.directions)
    assert directions["forward"] > 50 and directions["backward"] > 50


@pytest.mark.parametrize("prob, only", [(1.0, "forward"), (0.0, "backward")])
def test_forward_probability_is_obeyed(prob, only):
    cfg = GenConfig(nodes=6, ops=ALL_OPS, forward_prob=prob)
    for seed in range(10):
        assert set(generate(cfg, seed).record.directions) == {only}


def test_operator_weights_bias_the_choice():
    cfg = GenConfig(nodes=10, ops=ALL_OPS, op_weights={"Add": 200.0})
    counts = collections.Counter()
    for seed in range(20):
        counts.update(generate(cfg, seed).record.ops)
    assert counts["Add"] > sum(counts.values()) / 2


def test_ops_filter_is_obeyed():
    ops = [op_by_name(n) for n in ("Add", "Relu", "Sub")]
    for seed in range(10):
        assert set(generate(GenConfig(nodes=5, ops=ops), seed).graph.op_counts()) <= {"Add", "Relu", "Sub"}


def test_binning_records_choices_and_can_be_off(cfg10):
    on = generate(cfg10, 3).record
    assert on.bins and any(b.kept for b in on.bins)
    assert all(b.kind in {"size", "pad", "signed", "free"} for b in on.bins)
    off = generate(GenConfig(nodes=10, ops=ALL_OPS, binning=False), 3).record
    assert off.bins == []


def test_binning_moves_dims_off_the_boundary():
    def dims(binning: bool) -> list[int]:
        cfg = GenConfig(nodes=10, ops=ALL_OPS, binning=binning)
        return [d for s in range(25) for t in generate(cfg, s).graph.types for d in t.shape]

    with_bins, without = dims(True), dims(False)
    # Without binning Z3 answers boundary values (1, or 2 where a dim must
    # differ from a broadcast 1) for nearly every free dim; binning spreads them.
    # (Many dims are 1 by construction: keepdim reductions, Unsqueeze, Expand sources.)
    assert sum(d <= 2 for d in without) / len(without) > 0.85
    assert sum(d <= 2 for d in with_bins) / len(with_bins) < 0.5
    assert len(set(with_bins)) > 3 * len(set(without))


def test_bin_weights_steer_bins():
    # All weight on the last SIZE bin: every kept dim bin is 7 ([64, inf)).
    cfg = GenConfig(nodes=4, ops=ALL_OPS, bin_weights={"size": [0, 0, 0, 0, 0, 0, 1]})
    bins = [b for s in range(10) for b in generate(cfg, s).record.bins if b.kind == "size"]
    assert bins and {b.bin for b in bins} == {7}


def test_bad_bin_weights_rejected():
    cfg = GenConfig(nodes=4, ops=ALL_OPS, bin_weights={"size": [1, 1]})
    with pytest.raises(ValueError, match="need 7 entries"):
        generate(cfg, 0)


def test_solver_budget_gives_up_cleanly():
    # A budget too small for any check: a clean GenerationError, nothing else.
    with pytest.raises(GenerationError):
        generate(GenConfig(nodes=10, ops=ALL_OPS, timeout_ms=1), 0)


def test_the_per_graph_solver_budget_is_work_not_time(monkeypatch):
    # A graph that runs out of Z3 work keeps what fit, the same graph however fast the
    # machine: here the clock is made to jump 10 s at every check.
    cfg = GenConfig(nodes=30, ops=ALL_OPS, work_budget=150_000, timeout_ms=3_600_000)
    # The first seed whose graph stops short of 30 nodes (which one depends on the op library):
    # it stopped for want of work.
    first = next(g for g in (generate(cfg, s) for s in range(20)) if len(g.graph.insts) < 30)
    assert first.record.solver_work >= cfg.work_budget
    import nnsmith_cov.gen.solver as solver

    now = [0.0]
    monkeypatch.setattr(solver.time, "monotonic", lambda: now.__setitem__(0, now[0] + 10.0) or now[0])
    again = generate(cfg, first.record.seed)
    assert again.graph.content_hash() == first.graph.content_hash()


@pytest.mark.parametrize("kwargs", [{"nodes": 0}, {"forward_prob": 2.0}, {"bins": 1}, {"max_elems": 0}])
def test_bad_config_rejected(kwargs):
    with pytest.raises(ValueError):
        GenConfig(ops=ALL_OPS, **kwargs)
