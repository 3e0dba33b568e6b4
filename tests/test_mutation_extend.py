"""The ``extend`` mutation: a child keeps its parent's graph and grows it right at the frontier
(the op its new branch most likely owes), reading the frontier's output."""

from __future__ import annotations

import json
import random

import pytest
from campaign_helpers import f32_only

from nnsmith_cov.abstract.choice import ChoiceSource, ReplayDivergence
from nnsmith_cov.corpus.seeds import Seed
from nnsmith_cov.feedback.mutate import Mutation, MutationError, apply, breed, frontier, layout, plan, replay
from nnsmith_cov.gen.generator import GenConfig, Generated, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import select_ops

CHAIN = ["Tanh", "Sin", "Neg", "Abs"]
# Forward only: the graph's instructions are then in the order the tries accepted them.
CFG = GenConfig(nodes=5, ops=[f32_only(op) for op in select_ops(CHAIN)], max_elems=64, binning=False, forward_prob=1.0)


def seed_of(test_id: int, gen: Generated, parent: int | None = None, mutation: dict | None = None) -> Seed:
    r = gen.record
    return Seed(test_id, list(r.draws[: r.insert_draws]), len(r.ops), tuple(r.draws), r.try_ok, parent, mutation)


def reads(graph: GraphIR, k: int) -> int:
    """The instruction whose output instruction `k`'s first input is (-1: an input or weight)."""
    first = graph.insts[k].inputs[0]
    return next((j for j, inst in enumerate(graph.insts) if first in inst.outputs), -1)


def test_a_negative_replayed_index_counts_from_the_end_and_is_recorded_as_the_index_it_means():
    src = ChoiceSource(0, prefix=[("pick", -1), ("pick", -3)], lenient=True)
    assert src.index("pick", 5) == 4 and src.index("pick", 5) == 2
    assert src.record == [("pick", 4), ("pick", 2)]
    # beyond the options: strict replay refuses, lenient draws fresh
    with pytest.raises(ReplayDivergence):
        ChoiceSource(0, prefix=[("pick", -6)]).index("pick", 5)
    assert ChoiceSource(0, prefix=[("pick", -6)], lenient=True).index("pick", 5) == ChoiceSource(0).index("pick", 5)


def test_extend_puts_each_new_op_on_the_output_of_the_one_before_it_starting_at_the_frontier():
    checked = accepted_new = 0
    for s in range(12):
        parent = generate(CFG, s)
        p = seed_of(1, parent)
        lay = layout(p)
        assert lay is not None
        for spot in [i for i in range(len(lay.tries)) if lay.ok[i]]:
            for count in (1, 2):
                child = replay(Mutation("extend", spot + 1, count), p, CFG, 1000 + s)
                k = sum(lay.ok[: spot + 1]) - 1  # the frontier's instruction
                new = child.record.try_ok[spot + 1 : spot + 1 + count].count("1")  # an op may not fit
                ops = child.record.ops
                # the parent's ops, in order, with the new ones right after the frontier
                assert ops[: k + 1] == parent.record.ops[: k + 1]
                assert ops[k + 1 + new : len(parent.record.ops) + new] == parent.record.ops[k + 1 :]
                assert [reads(child.graph, k + 1 + j) for j in range(new)] == [k + j for j in range(new)]
                checked += 1
                accepted_new += new
    assert checked >= 40 and accepted_new >= checked


def test_the_frontier_is_what_the_entry_changed_in_its_parent():
    gen = generate(CFG, 3)
    fresh = seed_of(1, gen)
    accepted = [i for i, c in enumerate(gen.record.try_ok) if c == "1"]
    assert len(accepted) >= 3 and frontier(fresh) == accepted  # nothing tells: every op
    extended = seed_of(2, gen, parent=1, mutation=Mutation("extend", accepted[1], 1).to_json())
    assert frontier(extended) == [accepted[1]]
    inserted = seed_of(3, gen, parent=1, mutation=Mutation("insert", accepted[0], 3).to_json())
    assert frontier(inserted) == [i for i in accepted if accepted[0] <= i < accepted[0] + 3]
    grown = seed_of(4, gen, parent=1)
    assert frontier(grown) == accepted[-max(1, -(-len(accepted) // 3)) :]
    op_draw = [i for i, (label, _) in enumerate(gen.record.draws) if label == "op"][accepted[-1]]
    swapped = seed_of(5, gen, parent=1, mutation=Mutation("op_swap", op_draw).to_json())
    assert frontier(swapped) == [accepted[-1]]
    broken = seed_of(6, gen, parent=1, mutation={"kind": "explode"})
    assert frontier(broken) == accepted
    # an extend is planned at one of them, from the seed
    plans = {plan("extend", extended, random.Random(s)) for s in range(20)}
    assert {m.at for m in plans} == {accepted[1] + 1} and {m.count for m in plans} == {1, 2}


def test_an_extended_child_replays_and_names_its_parent_and_mutation():
    p = seed_of(7, generate(CFG, 5))
    gen = breed("extend", p, CFG, 99)
    assert gen is not None and gen.record.parent == 7 and gen.record.mutation["kind"] == "extend"
    record = json.loads(json.dumps(gen.record.to_json()))
    again = replay(Mutation.from_json(record["mutation"]), p, CFG, 99)
    assert again.graph.dumps() == gen.graph.dumps() and again.record.draws == gen.record.draws
    # its own draws hold no "from the end" value: they replay strictly like any test's
    assert all(not isinstance(v, int) or v >= 0 for _, v in gen.record.draws)
    strict = generate(
        GenConfig(nodes=len(gen.record.ops), ops=CFG.ops, max_elems=64, binning=False), 1, gen.record.draws
    )
    assert strict.graph.dumps() == gen.graph.dumps()
    with pytest.raises(MutationError):
        apply(Mutation("extend", 0, 1), p)
    with pytest.raises(MutationError):
        apply(Mutation("extend", 1, 0), p)


# -- the chain: Tanh-Sin-Neg-Abs, each op reading the one before ------------------------------
GOAL = ("Tanh", "Sin", "Neg", "Abs")
CHAIN_CFG = GenConfig(nodes=4, ops=[f32_only(op) for op in select_ops(list(GOAL))], max_elems=64, binning=False)


def depth(graph: GraphIR) -> int:
    """The longest start of GOAL the graph holds as a chain (0: not even Tanh-Sin)."""
    producer = {v: inst for inst in graph.insts for v in inst.outputs}
    best = 0
    for inst in graph.insts:
        chain, node = [inst.op], inst
        while len(chain) < len(GOAL) and node.inputs and node.inputs[0] in producer:
            node = producer[node.inputs[0]]
            chain.insert(0, node.op)
        best = max([best] + [k for k in range(2, len(GOAL) + 1) if tuple(chain[-k:]) == GOAL[:k]])
    return best


def test_an_extended_entry_takes_the_next_step_of_a_chain_far_more_often_than_its_grown_children():
    # A fresh graph holding Tanh-Sin (seed 1), kept; its extend children are tried until one
    # holds Tanh-Sin-Neg, kept with its mutation (so its frontier, the Neg, is known). From
    # there the goal is one op on the frontier: extend draws it about once in four, growing
    # (ops appended reading any value) rarely.
    first = generate(CHAIN_CFG, 1)
    assert depth(first.graph) == 2
    entry = seed_of(1, first)
    stone = next(
        gen
        for s in range(200)
        if (gen := breed("extend", entry, CHAIN_CFG, 100 + s)) is not None and depth(gen.graph) == 3
    )
    kept = seed_of(2, stone, parent=1, mutation=stone.record.mutation)
    m = stone.record.mutation
    assert set(frontier(kept)) <= set(range(m["at"], m["at"] + m["count"])) and frontier(kept)

    def reached(kind: str, s: int) -> bool:
        gen = breed(kind, kept, CHAIN_CFG, 500 + s)
        return gen is not None and depth(gen.graph) == 4

    extended = sum(reached("extend", s) for s in range(40))
    grown = sum(reached("grow", s) for s in range(40))
    assert extended >= 6 and extended >= 3 * max(grown, 1), (extended, grown)
