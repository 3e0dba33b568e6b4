"""Mutation of kept tests on their recorded draws: lenient replay, mutants, the power schedule,
and a small campaign (Z3 graphs, coverage made up from each graph, no backends) in which
feedback with mutation finds a rare operator chain that uniform generation does not."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from nnsmith_cov.abstract.choice import ChoiceSource, ReplayDivergence, redraw
from nnsmith_cov.corpus.seeds import FRUITLESS_HALF, Seed, SeedPool
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.feedback.mutate import (
    ARMS,
    GROW,
    MUTATIONS,
    Mutation,
    MutationError,
    apply,
    breed,
    child,
    layout,
    make,
    plan,
    prepare,
    replay,
)
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import ALL_OPS, op_by_name

CFG = GenConfig(nodes=5, ops=ALL_OPS, max_elems=256)


def seed_of(test_id: int, gen: Generated) -> Seed:
    r = gen.record
    return Seed(test_id, list(r.draws[: r.insert_draws]), len(r.ops), tuple(r.draws), r.try_ok)


@pytest.fixture(scope="module")
def parents() -> list[Seed]:
    return [seed_of(i, generate(CFG, 500 + i)) for i in range(5)]


def assert_valid(graph: GraphIR, cfg: GenConfig) -> None:
    graph.check(lambda name: op_by_name(name) is not None)
    assert graph.insts and graph.inputs and graph.outputs
    for t in graph.types:
        assert all(d >= 1 for d in t.shape) and t.nelement() <= cfg.max_elems


# -- lenient replay ----------------------------------------------------------------------------
def test_strict_replay_still_raises_and_lenient_draws_fresh_instead():
    for bad in ([("op", 3)], [("forward", 7)]):
        with pytest.raises(ReplayDivergence):
            ChoiceSource(0, prefix=bad).coin("forward")
        lenient = ChoiceSource(0, prefix=bad, lenient=True)
        assert lenient.coin("forward") == ChoiceSource(0).coin("forward")
    src = ChoiceSource(0, prefix=[("op", None), ("x", 9), ("k", 2)], lenient=True)
    assert src.index("op", 5) == ChoiceSource(0).index("op", 5)  # None: a fresh draw
    assert src.index("k", 4) == 2  # looked ahead past "x" for its label
    assert src.record == [("op", src.record[0][1]), ("k", 2)]


def test_lenient_lookahead_stops_at_the_next_try():
    # An op's own attribute draw absent from the prefix is drawn fresh; the next try still lines up.
    src = ChoiceSource(1, prefix=[("op", 2), ("forward", 1), ("op", 4), ("tile.n", 3)], lenient=True)
    assert src.index("op", 9) == 2 and src.coin("forward") is True
    src.integer("conv.kernel", 1, 5)  # not in the prefix: the look-ahead must not eat ("op", 4)
    assert src.index("op", 9) == 4 and src.integer("tile.n", 1, 5) == 3


def test_a_redraw_takes_another_value_where_there_is_one():
    for seed in range(20):
        fresh = ChoiceSource(seed).index("bin.size", 7)
        assert ChoiceSource(seed, prefix=[("bin.size", redraw(fresh))], lenient=True).index("bin.size", 7) != fresh
        assert ChoiceSource(seed, prefix=[("one", redraw(0))], lenient=True).index("one", 1) == 0


# -- mutants -----------------------------------------------------------------------------------
def test_layout_splits_tries_by_their_op_draws(parents):
    for p in parents:
        lay = layout(p)
        assert lay is not None and all(t[0][0] == "op" for t in lay.tries)
        assert len(lay.head) + sum(map(len, lay.tries)) == len(p.prefix)
        assert lay.ops(range(len(lay.tries))) == p.n_ops
    assert layout(Seed(9, [("gf.input", 0)], 1)) is None


def test_insert_goes_in_the_middle_and_delete_removes_tries(parents):
    p = next(p for p in parents if len(layout(p).tries) >= 3)
    lay = layout(p)
    draws, nodes = apply(Mutation("insert", 1, 2), p)
    body = draws[len(lay.head) :]
    assert body[: len(lay.tries[0])] == lay.tries[0]
    assert body[len(lay.tries[0]) : len(lay.tries[0]) + 4] == [("op", None), ("forward", None)] * 2
    assert nodes == p.n_ops + 2
    draws, nodes = apply(Mutation("delete", 1, 1), p)
    assert len(draws) == len(p.draws) - len(lay.tries[1]) and nodes == max(1, p.n_ops - lay.ops([1]))
    with pytest.raises(MutationError):
        apply(Mutation("delete", 0, 1), p)  # the first try makes the first placeholder
    with pytest.raises(MutationError):
        apply(Mutation("splice", 1, donor=3, donor_at=1), p, parents[0])  # not the named donor


def test_mutants_are_valid_graphs_or_clean_failures(parents):
    made = 0
    for i, p in enumerate(parents):
        for kind in MUTATIONS:
            for s in range(3):
                try:
                    gen = breed(kind, p, CFG, 7919 * i + s, donor=parents[(i + 1) % len(parents)])
                except GenerationError:
                    continue
                if gen is not None:
                    assert_valid(gen.graph, CFG)
                    made += 1
    assert made >= 0.9 * len(parents) * len(MUTATIONS) * 3


def test_a_mutant_replays_from_parent_mutation_and_seed(parents):
    p, donor = parents[1], parents[2]
    for kind in MUTATIONS:
        gen = breed(kind, p, CFG, 42, donor=donor)
        assert gen is not None and gen.record.parent == p.test_id and gen.record.mutation["kind"] == kind
        record = json.loads(json.dumps(gen.record.to_json()))
        assert record["parent"] == p.test_id and record["mutation"] == gen.record.mutation
        again = replay(Mutation.from_json(record["mutation"]), p, CFG, 42, donor)
        assert again.graph.dumps() == gen.graph.dumps() and again.record.draws == gen.record.draws
        # the mutant's own draws replay it strictly, like any test
        assert generate(dataclasses.replace(CFG, nodes=len(gen.record.ops)), 1, gen.record.draws).graph.dumps() == (
            gen.graph.dumps()
        )


def test_mutations_change_the_graph_most_of_the_time(parents):
    changed = total = 0
    for i, p in enumerate(parents):
        parent_graph = generate(CFG, 500 + i).graph.dumps()
        for kind in MUTATIONS:
            gen = breed(kind, p, CFG, 31 * i + 5, donor=parents[(i + 1) % len(parents)])
            total += 1
            changed += gen is not None and gen.graph.dumps() != parent_graph
    assert changed >= 0.7 * total


def test_plans_are_drawn_from_the_seed_and_skip_what_does_not_apply(parents):
    p = parents[0]
    assert plan("delete", p, random.Random(3)) == plan("delete", p, random.Random(3))
    assert plan("splice", p, random.Random(3)) is None  # no donor
    single = Seed(1, [("op", 0), ("forward", 1)], 1, try_ok="1")
    assert plan("delete", single, random.Random(0)) is None
    with pytest.raises(MutationError):
        Mutation.from_json({"kind": "explode", "at": 0, "count": 0, "donor": None, "donor_at": 0})


def test_growing_a_parent_keeps_its_graph_and_adds_to_it(parents):
    p = parents[0]
    gen = child(GROW, p, CFG, 3)
    assert gen is not None and gen.record.ops[: p.n_ops] == generate(CFG, 500).record.ops
    assert len(gen.record.ops) > p.n_ops and gen.record.parent == 0 and gen.record.mutation is None
    assert child(GROW, p, CFG, 3, max_nodes=p.n_ops) is None  # no room within the cap
    # a mutation that cannot apply to this parent falls back to growing it
    single = seed_of(7, generate(dataclasses.replace(CFG, nodes=1), 11))
    if len(layout(single).tries) == 1:
        assert child("delete", single, CFG, 4).record.mutation is None


# -- the power schedule ------------------------------------------------------------------------
def test_energy_halves_with_fruitless_children_and_comes_back_with_a_gain():
    pool = SeedPool(8)
    for i in range(2):
        pool.add(Seed(i, [("op", 0)], 1), Hits(np.array([i], np.uint32), np.ones(1, np.uint32)))
    assert pool.energy().tolist() == [1.0, 1.0]
    for _ in range(int(FRUITLESS_HALF)):
        pool.outcome(0, gain=False)
    assert pool.energy().tolist() == pytest.approx([0.5, 1.0])
    picks = [pool.pick(np.random.default_rng(s)).test_id for s in range(600)]
    assert picks.count(1) > 1.5 * picks.count(0)
    pool.outcome(0, gain=True)
    assert pool.energy().tolist() == [1.0, 1.0] and pool.children == [9, 0]
    pool.outcome(99, gain=False)  # not in the pool: ignored
    assert pool.rare(Hits(np.array([0, 1, 5], np.uint32), np.ones(3, np.uint32))) == 2
    assert pool.donor(np.random.default_rng(0), pool.seeds[0]).test_id == 1
    # a kept child with new buckets alone leaves its parent's energy fading; one with a new branch restores it
    for _ in range(int(FRUITLESS_HALF)):
        pool.outcome(0, gain=False)
    pool.add(Seed(2, [("op", 0)], 1, parent=0), Hits(np.array([2], np.uint32), np.ones(1, np.uint32)), gain=False)
    assert pool.energy()[0] == pytest.approx(0.5)
    pool.add(Seed(3, [("op", 0)], 1, parent=0), Hits(np.array([3], np.uint32), np.ones(1, np.uint32)), gain=True)
    assert pool.energy()[0] == 1.0


def test_an_entry_remembers_only_its_rarest_branches():
    """Memory per entry stays bounded whatever the collector reaches (a binary collector: tens
    of thousands of blocks a test), and what it keeps is what makes it rare."""
    from nnsmith_cov.corpus.seeds import RARE_KEPT

    pool = SeedPool(10_000)
    common = np.arange(3000, dtype=np.uint32)
    for i in range(3):
        pool.add(Seed(i, [("op", 0)], 1), Hits(common, np.ones(len(common), np.uint32)))
    owner = np.concatenate([common, [9000, 9001]]).astype(np.uint32)  # alone on 9000 and 9001
    pool.add(Seed(3, [("op", 0)], 1), Hits(owner, np.ones(len(owner), np.uint32)))
    assert all(len(h) <= RARE_KEPT for h in pool.hits)
    assert {9000, 9001} <= set(pool.hits[3].tolist())
    rarity = pool.rarity()
    assert rarity[3] == pytest.approx(2 + (RARE_KEPT - 2) / 4)  # its two own, the rest shared by 4
    assert rarity[0] == pytest.approx(RARE_KEPT / 4)  # the first entries' branches became common
    assert [pool.pick(np.random.default_rng(s)).test_id for s in range(400)].count(3) > 100


def test_a_pick_leaves_out_entries_without_room_for_a_child():
    """A child must be able to add an op within the campaign's cap (`max_ops`): an entry at the
    cap is not drawn (before, its test silently became a fresh one)."""
    pool = SeedPool(8)
    for i, n_ops in enumerate((5, 20, 40)):
        pool.add(Seed(i, [("op", 0)], n_ops), Hits(np.array([i], np.uint32), np.ones(1, np.uint32)))
    assert {pool.pick(np.random.default_rng(s)).test_id for s in range(100)} == {0, 1, 2}
    draws = [pool.pick(np.random.default_rng(s), max_ops=40).test_id for s in range(300)]
    assert set(draws) == {0, 1} and min(draws.count(0), draws.count(1)) > 100
    assert pool.pick(np.random.default_rng(0), attempt=True, max_ops=5) is None and pool.children == [0, 0, 0]
    # entries whose energy ran out still give way only to those with room
    pool.fruitless = [10_000, 10_000, 10_000]
    assert {pool.pick(np.random.default_rng(s), max_ops=10).test_id for s in range(20)} == {0}


def test_a_grown_child_takes_the_ops_that_fit_within_its_cap(parents):
    p = parents[0]
    call = prepare(GROW, p, CFG, 3, max_nodes=p.n_ops + 1)
    assert call is not None and call.cfg.nodes == p.n_ops + 1 and call.min_ops == p.n_ops
    gen = make(call, 3)
    assert gen is not None and len(gen.record.ops) == p.n_ops + 1 and gen.record.parent == p.test_id
    assert prepare(GROW, p, CFG, 3, max_nodes=p.n_ops) is None


# -- a small campaign --------------------------------------------------------------------------
CHAIN_OPS = ["Tanh", "Sin", "Neg", "Abs", "Relu", "Cos"]
N = len(CHAIN_OPS)
TARGET = ("Tanh", "Sin", "Neg", "Abs")  # each reading the one before: a pattern a compiler pass might match


def chain_hits(graph: GraphIR) -> Hits:
    """Made-up coverage, like a pattern matcher's nested checks: a branch per op present and one
    per longer start of TARGET found as a chain (each op reading the one before as its first
    input): Tanh-Sin, Tanh-Sin-Neg and, the goal, all of TARGET, which uniform generation makes
    about once in thousands of tests."""
    producer = {v: inst for inst in graph.insts for v in inst.outputs}
    found = {CHAIN_OPS.index(inst.op) for inst in graph.insts}
    for inst in graph.insts:
        chain, node = [inst.op], inst
        while len(chain) < len(TARGET) and node.inputs and node.inputs[0] in producer:
            node = producer[node.inputs[0]]
            chain.insert(0, node.op)
        for k in range(2, len(TARGET) + 1):
            if tuple(chain[-k:]) == TARGET[:k]:
                found.add(N + k - 2)
    index = np.array(sorted(found), np.uint32)
    return Hits(index, np.ones(len(index), np.uint32))


def reached_target(hits: Hits) -> bool:
    return N + len(TARGET) - 2 in hits.index.tolist()


def stepping_stone(seed: int, base: GenConfig) -> Seed:
    """A graph uniform generation made that holds Tanh-Sin-Neg (kept for that new branch)."""
    gen = generate(base, seed)
    assert N + 1 in chain_hits(gen.graph).index.tolist()
    return seed_of(seed, gen)


@pytest.mark.slow
def test_mutants_of_a_kept_test_reach_a_rare_chain_far_more_often_than_fresh_graphs():
    # The corpus keeps Tanh-Sin-Neg (a new branch) once uniform generation stumbles on it;
    # from there the goal is one step, which growing and inserting in the middle take.
    base = GenConfig(nodes=4, ops=[op_by_name(n) for n in CHAIN_OPS], max_elems=64, binning=False)
    a, b = stepping_stone(13, base), stepping_stone(277, base)
    mutants = 0
    for i in range(210):
        parent, donor = (a, b) if i % 2 else (b, a)
        gen = child(ARMS[i % len(ARMS)], parent, base, 7000 + i, donor, 16)
        mutants += gen is not None and reached_target(chain_hits(gen.graph))
    fresh = sum(reached_target(chain_hits(generate(base, s).graph)) for s in range(300, 1500))
    # per test: at least 1 in 42 for mutants, at most 1 in 1200 for fresh graphs (off-var's way)
    assert mutants >= 5 and fresh <= 1, (mutants, fresh)


# -- in the campaign loop ----------------------------------------------------------------------
def _f32_ops() -> list:
    from nnsmith_cov.abstract.dtype import DType
    from nnsmith_cov.ops import select_ops

    def f32(op):
        sigs = [s for s in op.sigs if all(d is DType.float32 for d in (*s[0], *s[1]))]
        return type(op.__name__, (op,), {"sigs": sigs})

    return [f32(op) for op in select_ops(["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"])]


def _fake_campaign(folder, ops: list, tests: int, grow_max: tuple[int, ...] = ()) -> dict:
    from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
    from nnsmith_cov.campaign.run_dir import RunDir
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerHandle

    backend = "fake_coverage:SigmoidPays"
    settings = CaseSettings([backend], search={"method": "sampling", "max_iters": 8}, localize=False)
    cfg = FuzzConfig(
        GenConfig(nodes=3, ops=ops), settings, seed=2, max_tests=tests, feedback=True, mutation=True, grow_max=grow_max
    )
    worker = WorkerHandle([backend], RunDir(folder).worker_log(0), collector="fake_coverage:OpCollector")
    fuzzer = Fuzzer(cfg, RunDir(folder), worker, lambda ev: None, corpus=True)
    try:
        fuzzer.start()
        while not fuzzer.done():
            fuzzer.step()
        return fuzzer.scheduler.state()
    finally:
        fuzzer.close()
        worker.close()


@pytest.mark.slow
def test_the_campaign_keeps_mutants_that_name_their_parent_and_mutation(tmp_path):
    from nnsmith_cov.campaign.fuzz_config import GROW_FACTORS
    from nnsmith_cov.corpus.store import CorpusStore

    ops = _f32_ops()
    state = _fake_campaign(tmp_path / "on", ops, 60)
    assert state["config"]["mutation"] and sum(state["groups"]["mutation"]["hit_in"]) > 0
    with CorpusStore.open(tmp_path / "on" / "lmdb", readonly=True) as store:
        entries = dict(store.entries())
    mutants = {i: r for i, r in entries.items() if r.gen.get("mutation")}
    assert mutants, "no mutant entered the corpus"
    for r in entries.values():  # children stay within the cap (`FuzzConfig.max_grown`)
        if r.parent is not None:
            assert len(r.gen["ops"]) <= GROW_FACTORS[-1] * 3, (r.gen["ops"], r.gen.get("mutation"))
    for i, r in mutants.items():
        assert r.parent == r.gen["parent"] and r.parent in entries and r.parent < i
        assert Mutation.from_json(r.gen["mutation"]).kind in MUTATIONS
        # like any test, a mutant replays from its own draws
        again = generate(GenConfig(nodes=len(r.gen["ops"]), ops=ops), r.seed, [tuple(d) for d in r.draws])
        assert again.graph.dumps() == GraphIR.from_json(r.graph).dumps()


@pytest.mark.slow
def test_a_campaign_keeps_its_children_within_grow_max(tmp_path):
    from nnsmith_cov.corpus.store import CorpusStore

    _fake_campaign(tmp_path / "capped", _f32_ops(), 60, grow_max=(4,))
    with CorpusStore.open(tmp_path / "capped" / "lmdb", readonly=True) as store:
        children = [r for _, r in store.entries() if r.parent is not None]
    assert children and all(len(r.gen["ops"]) <= 4 for r in children)
    assert any(len(r.gen["ops"]) == 4 for r in children)


@pytest.mark.slow
def test_a_campaign_learns_among_several_caps_and_keeps_each_child_within_the_largest(tmp_path):
    from nnsmith_cov.corpus.store import CorpusStore

    state = _fake_campaign(tmp_path / "learned", _f32_ops(), 60, grow_max=(6, 4))
    assert state["config"]["caps"] == [4, 6]
    evidence = state["groups"]["grow_max"]
    assert sum(evidence["hit_in"]) + sum(evidence["miss_in"]) > 0  # seeded tests were charged to a cap
    with CorpusStore.open(tmp_path / "learned" / "lmdb", readonly=True) as store:
        children = [r for _, r in store.entries() if r.parent is not None]
    assert children and all(len(r.gen["ops"]) <= 6 for r in children)
    # each child names the cap it was drawn under, and holds no more ops than it
    assert all(r.gen["grow_max"] in (4, 6) and len(r.gen["ops"]) <= r.gen["grow_max"] for r in children)
