"""The feedback scheduler in simulated campaigns (synthetic records, no backends) and on real records."""

from __future__ import annotations

import dataclasses
import json

import msgpack
import numpy as np
import pytest

from nnsmith_cov.abstract.bins import n_bins
from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback import BanditParams, Proposal, Scheduler, reward_of
from nnsmith_cov.feedback.simulate import SharesOnly, run, synthetic_record
from nnsmith_cov.gen.binning import BinChoice, weights_for
from nnsmith_cov.gen.generator import GenConfig, GenRecord, generate
from nnsmith_cov.ops import ALL_OPS, op_by_name

NAMES = ["Conv2d", "Relu"] + [f"Op{i}" for i in range(28)]
K = len(NAMES)
FLOOR = BanditParams().floor
pytestmark = pytest.mark.usefixtures("every_test_steered")  # (the bandit as it steers)
NEW = Novelty(1, 0)
NOTHING = Novelty(0, 0)


def conv_rule(rec: GenRecord, t: int) -> float:
    return 0.5 if "Conv2d" in rec.ops else 0.02


def op_probs(p: Proposal) -> np.ndarray:
    w = np.array([p.op_weights[n] for n in NAMES]) if p.op_weights else np.ones(K)
    return w / w.sum()


def record(ops=(), directions=(), bins=()) -> GenRecord:
    r = GenRecord(seed=0)
    r.ops, r.directions, r.bins = list(ops), list(directions), list(bins)
    return r


# -- learning in simulated campaigns ---------------------------------------------------------
def test_a_rewarding_op_rises_well_above_the_others():
    trace = run(Scheduler(NAMES, 10, seed=1), conv_rule, 400, seed=1)
    conv = trace.op_prob("Conv2d", 300, 400) * K
    others = max(trace.op_prob(n, 300, 400) for n in NAMES[1:]) * K
    assert conv > 3.0 and conv > 2.5 * others
    plain = run(Scheduler(NAMES, 10, seed=1, feedback=False), conv_rule, 400, seed=1)
    assert trace.rate(200) > 2 * plain.rate(200)


def test_a_rewarding_op_that_rarely_fits_is_held_by_many_more_tests_through_the_first_op():
    # Conv2d pays, but a try after the first puts it in 3 times in 100 (GridSample on ORT: ~4)
    fit = {"Conv2d": 0.03}
    first = run(Scheduler(NAMES, 10, seed=3), conv_rule, 600, seed=3, fit=fit)
    shares = run(SharesOnly(NAMES, 10, seed=3), conv_rule, 600, seed=3, fit=fit)
    plain = run(Scheduler(NAMES, 10, seed=3, feedback=False), conv_rule, 600, seed=3, fit=fit)
    assert first.held("Conv2d", 300, 600) > 2.0 * shares.held("Conv2d", 300, 600)
    assert plain.held("Conv2d", 300, 600) < 0.1
    assert first.rate(300, 600) > 1.5 * shares.rate(300, 600) and first.rate(300, 600) > 1.5 * plain.rate(300, 600)
    # the op weights are the same sample's: what the other tries draw is unchanged in kind
    assert first.op_prob("Conv2d", 300, 600) * K > 2.0


def test_the_first_op_is_thompsons_pick_and_a_floor_of_graphs_start_as_before():
    s = Scheduler(NAMES, 10, seed=4)
    run(s, conv_rule, 300, seed=4)
    firsts = [s.propose().first_op for _ in range(400)]
    assert 0.1 < firsts.count(None) / 400 < 0.3  # the floor (0.2)
    assert firsts.count("Conv2d") / 400 > 0.5  # the rewarding op, once its lift is sure
    assert Scheduler(NAMES, 10, seed=4, feedback=False).propose().first_op is None
    p = next(p for p in (s.propose() for _ in range(20)) if p.first_op == "Conv2d")
    old = p.to_json()
    del old["first_op"]  # a proposal recorded before the first op was chosen
    assert Proposal.from_json(old) == dataclasses.replace(p, first_op=None)


def test_a_first_op_keeps_the_graph_to_the_opsets_it_exports_at():
    base = GenConfig(nodes=4, ops=ALL_OPS, opsets=tuple(range(11, 21)))
    p = Proposal(None, 0.5, None, 4, False, opset_weights={o: 1.0 for o in range(11, 21)}, first_op="GridSample")
    cfg = Scheduler.apply(p, base)
    grid = op_by_name("GridSample")
    assert cfg.first_op == "GridSample"
    assert {o for o, w in cfg.opset_weights.items() if w > 0} == {o for o in range(11, 21) if grid.export_dtypes(o)}
    assert min(o for o, w in cfg.opset_weights.items() if w > 0) > 11
    gens = [generate(cfg, s) for s in range(6)]
    assert all(g.record.opset >= 16 for g in gens)
    assert sum(g.record.ops[0] == "GridSample" for g in gens) >= 3
    # an op that exports at every opset leaves the weights alone
    relu = Scheduler.apply(dataclasses.replace(p, first_op="Relu"), base)
    assert relu.opset_weights == p.opset_weights


def test_the_generator_starts_with_the_first_op_where_it_exports():
    cfg = GenConfig(nodes=4, ops=ALL_OPS, opsets=(20,), first_op="GridSample")
    gens = [generate(cfg, s) for s in range(6)]
    assert all(g.record.ops[0] == "GridSample" for g in gens if g.record.try_ok.startswith("1"))
    assert sum(g.record.try_ok.startswith("1") for g in gens) >= 3
    # GridSample does not export at opset 11: the first op is drawn as the others are
    old = dataclasses.replace(cfg, opsets=(11,))
    assert generate(old, 5).record.ops == generate(dataclasses.replace(old, first_op=None), 5).record.ops


def test_a_switch_of_the_rewarding_op_is_followed():
    def switching(rec: GenRecord, t: int) -> float:
        return 0.5 if ("Conv2d" if t < 600 else "Relu") in rec.ops else 0.02

    trace = run(Scheduler(NAMES, 10, seed=2), switching, 1400, seed=2)
    assert trace.op_prob("Conv2d", 400, 600) * K > 3.0
    relu, conv = trace.op_prob("Relu", 1200, 1400) * K, trace.op_prob("Conv2d", 1200, 1400) * K
    assert relu > 2.0 and relu > 1.5 * conv


def test_the_rewarding_direction_gains_probability():
    def backward_majority(rec: GenRecord, t: int) -> float:
        return 0.3 if 2 * rec.directions.count("backward") > len(rec.directions) else 0.02

    trace = run(Scheduler(NAMES, 10, seed=3), backward_majority, 400, seed=3)
    assert trace.forward_prob(200, 400) < 0.45


def test_the_rewarding_bin_gains_probability():
    def zero_pad(rec: GenRecord, t: int) -> float:
        return 0.4 if any(b.kept and b.kind == "pad" and b.bin == 0 for b in rec.bins) else 0.02

    trace = run(Scheduler(NAMES, 10, seed=4), zero_pad, 400, seed=4)
    pad0 = trace.bin_prob(AttrKind.PAD, 0, 200, 400)
    assert pad0 * n_bins(AttrKind.PAD, 7) > 1.3
    assert pad0 > max(trace.bin_prob(AttrKind.PAD, i, 200, 400) for i in range(1, 8))


def test_without_feedback_everything_stays_plain():
    s = Scheduler(NAMES, 10, seed=5, feedback=False)
    before = s.state()
    trace = run(s, conv_rule, 200, seed=5)
    assert all(p == Proposal(None, 0.5, None, 10, False) for p in trace.proposals)
    assert s.state() == before
    base = GenConfig(nodes=10, ops=ALL_OPS)
    assert Scheduler.apply(trace.proposals[0], base) == base
    summary = s.summary()
    assert summary["feedback"] is False and summary["nodes"][0] == [10, 1.0]


# -- guarantees -------------------------------------------------------------------------------
def test_no_arm_falls_below_the_floor():
    s = Scheduler(NAMES, 10, seed=6)
    trace = run(s, conv_rule, 300, seed=6)
    for p in trace.proposals[-100:]:
        assert op_probs(p).min() >= FLOOR / K - 1e-12
        assert FLOOR / 2 - 1e-12 <= p.forward_prob <= 1 - FLOOR / 2 + 1e-12
        for kind in ("size", "pad", "signed"):
            w = np.array(p.bin_weights[kind])
            assert (w / w.sum()).min() >= FLOOR / len(w) - 1e-12
    # once-per-test choices: the size the scheduler likes least is still picked now and then
    picks = np.array([s.propose().nodes for _ in range(1000)])
    for size in s.sizes:
        assert np.mean(picks == size) >= 0.7 * FLOOR / len(s.sizes)
    assert np.mean([s.propose().seeded for _ in range(500)]) >= 0.7 * FLOOR / 2


def test_restored_state_continues_identically():
    s = Scheduler(NAMES, 10, seed=7)
    run(s, conv_rule, 150, seed=7)
    state = s.state()
    copies = [
        Scheduler.from_state(json.loads(json.dumps(state))),
        Scheduler.from_state(msgpack.unpackb(msgpack.packb(state))),
    ]
    rng = np.random.default_rng(0)
    for t in range(40):
        p = s.propose()
        assert all(c.propose() == p for c in copies)
        rec = synthetic_record(p, NAMES, rng)
        for sched in [s, *copies]:
            sched.observe(p, rec, NEW if t % 5 == 0 else NOTHING)
    assert all(c.state() == s.state() for c in copies)


def test_same_seed_same_proposals_and_the_summary_does_not_disturb_them():
    a, b = Scheduler(NAMES, 10, seed=8), Scheduler(NAMES, 10, seed=8)
    run(a, conv_rule, 200, seed=8)
    run(b, conv_rule, 200, seed=8)
    summary = a.summary(top=3)
    assert summary["tests"] == 200 and len(summary["op"]) == 3 and len(summary["direction"]) == 2
    # Conv2d starts most fresh graphs; as one op among the others its share is lower than
    # without that pick (bystanders in its graphs share its rate), still the top one
    assert summary["op"][0][0] == "Conv2d" and summary["op"][0][1] > 2 / K
    assert summary["first"][0][0] == "Conv2d" and summary["first"][0][1] > 0.5
    json.dumps(summary)
    assert a.propose() == b.propose()
    assert Scheduler(NAMES, 10, seed=9).propose() != Scheduler(NAMES, 10, seed=8).propose()


def test_only_the_choices_made_are_credited():
    s = Scheduler(NAMES, 10, seed=10)
    p = dataclasses.replace(s.propose(), nodes=5, seeded=True)
    bins = [
        BinChoice("Conv2d#0", "k", "size", 3),
        BinChoice("Conv2d#0", "k", "size", 3),
        BinChoice("Conv2d#0", "s", "size", 6, kept=False),  # dropped by binning: not applied
        BinChoice("Pad#1", "p", "pad", 0),
        BinChoice("Slice#2", "special0", "free", 0),  # no generic bins: no arm
    ]
    s.observe(p, record(["Conv2d", "Conv2d", "Conv2d", "Relu", "NotAnOp"], ["forward"] * 3 + ["backward"], bins), NEW)
    g = s.state()["groups"]
    op_hits = dict(zip(NAMES, g["op"]["hit_in"]))
    assert op_hits["Conv2d"] == op_hits["Relu"] == 1.0  # present counts once, however often
    assert all(op_hits[n] == 0.0 for n in NAMES[2:])  # absent ops earn nothing ...
    assert all(g["op"]["hit_out"][i] == 1.0 for i in range(2, K))  # ... and count as "without"
    assert g["direction"]["hit_in"] == [0.75, 0.25]
    size = dict(zip(range(1, 8), g["bin.size"]["hit_in"]))
    assert size[3] == 1.0 and sum(size.values()) == 1.0
    assert g["bin.pad"]["hit_in"][0] == 1.0 and sum(g["bin.signed"]["hit_in"]) == 0.0  # no signed draws: no evidence
    assert sum(g["bin.signed"]["hit_out"]) == 0.0
    assert dict(zip(s.sizes, g["nodes"]["hit_in"]))[5] == 1.0 and g["seeded"]["hit_in"] == [0.0, 1.0]


def test_sizes_are_judged_per_unit_of_time_not_per_test():
    """Bigger graphs are likelier to be interesting per test but slower still: timed, the
    scheduler prefers the small ones; untimed, it would prefer the big ones."""

    def campaign(timed: bool) -> dict[int, int]:
        s, rng = Scheduler(NAMES, 10, seed=5), np.random.default_rng(5)
        picks = {n: 0 for n in s.sizes}
        for t in range(1500):
            p = s.propose()
            scale = p.nodes / 10
            novelty = NEW if rng.random() < 0.1 * scale else NOTHING
            s.observe(p, record(["Relu"]), novelty, scale**2 if timed else None)
            if t >= 1000:
                picks[p.nodes] += 1
        return picks

    timed, untimed = campaign(True), campaign(False)
    assert max(timed, key=timed.get) == min(timed) and timed[min(timed)] > 2 * timed[max(timed)]
    assert max(untimed, key=untimed.get) == max(untimed)
    s = Scheduler(NAMES, 10, seed=5)
    s.observe(s.propose(), record(), NOTHING, 2.0)
    assert s.cost(None) == 1.0 and s.cost(4.0) == 2.0 and s.cost(100.0) == 4.0 and s.cost(0.0) == 0.25
    # Fast tests that all add coverage: more hits than (cost-weighted) trials, still a valid prior.
    for _ in range(200):
        s.observe(s.propose(), record(["Relu"]), NEW, 0.01)
    a0, b0 = s.prior()
    assert a0 > 0 and b0 > 0 and s.propose().nodes in s.sizes


def test_time_charged_does_not_starve_a_slow_op_that_pays_for_its_time():
    """Conv2d makes a test three times slower and eight times likelier to add coverage: per
    second it still pays, so its share rises well above uniform (measured over seeds 1, 2, 9:
    3.3-3.7x uniform timed, 5.4-5.7x untimed)."""
    s, rng = Scheduler(NAMES, 10, seed=9), np.random.default_rng(9)
    conv = []
    for t in range(1200):
        p = s.propose()
        rec = synthetic_record(p, NAMES, rng)
        slow = "Conv2d" in rec.ops
        s.observe(p, rec, NEW if rng.random() < (0.16 if slow else 0.02) else NOTHING, 3.0 if slow else 1.0)
        if t >= 800:
            conv.append(op_probs(p)[0])
    assert np.mean(conv) > 2.0 / K, np.mean(conv) * K


def test_a_failed_generation_charges_only_size_and_origin():
    s = Scheduler(NAMES, 10, seed=11)
    p = s.propose()
    s.observe(p, GenRecord(seed=0), None)
    g = s.state()["groups"]
    for name in ("op", "direction", "bin.size", "bin.pad", "bin.signed"):
        assert not any(any(v) for v in g[name].values()), name
    assert sum(g["nodes"]["miss_in"]) == 1.0 and sum(g["seeded"]["miss_in"]) == 1.0


def test_reward_saturates_and_weighs_branches_over_buckets():
    assert reward_of(None) == 0.0 and reward_of(NOTHING) == 0.0
    assert reward_of(Novelty(1, 0)) == 1.0 and reward_of(Novelty(40, 3)) == 1.0
    assert reward_of(Novelty(0, 2)) == 0.5 and reward_of(Novelty(0, 9)) == 1.0


# -- formats and the generator ---------------------------------------------------------------
def test_proposals_fit_the_generator_and_round_trip():
    s = Scheduler([o.name() for o in ALL_OPS], 6, seed=12)
    base = GenConfig(nodes=6, ops=ALL_OPS)
    p = s.propose()
    assert Proposal.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert np.mean(list(p.op_weights.values())) == pytest.approx(1.0)
    cfg = Scheduler.apply(p, base)
    assert cfg.nodes == p.nodes in s.sizes == (3, 6, 9, 12) and cfg.forward_prob == p.forward_prob
    for kind in (AttrKind.SIZE, AttrKind.PAD, AttrKind.SIGNED):
        assert weights_for(cfg.bin_weights, kind, cfg.bins) == p.bin_weights[kind.value]
    gen = generate(cfg, seed=3)
    s.observe(p, gen.record, NEW)
    g = s.state()["groups"]
    assert sum(g["op"]["hit_in"]) == len(set(gen.record.ops))
    kept = [b for b in gen.record.bins if b.kept and b.kind in ("size", "pad", "signed")]
    assert kept and sum(sum(g[f"bin.{k}"]["hit_in"]) for k in ("size", "pad", "signed")) == pytest.approx(
        len({b.kind for b in kept})
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("op_weights", {"Add": -1.0}),
        ("bin_weights", {"pad": [1.0, "x"]}),
        ("forward_prob", 1.5),
        ("nodes", True),
        ("mutation", "shuffle"),
        ("first_op", 3),
        ("first_op", ["Add"]),
    ],
)
def test_malformed_proposals_are_rejected(field, value):
    obj = Scheduler(NAMES, 10, seed=14).propose().to_json() | {field: value}
    with pytest.raises(ValueError):
        Proposal.from_json(obj)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda st: st.update(schema=99),
        lambda st: st["groups"]["op"]["hit_in"].pop(),
        lambda st: st["groups"]["direction"]["miss_out"].__setitem__(0, -1.0),
        lambda st: st["groups"].pop("seeded"),
        lambda st: st["rng"].update(state="not hex"),
        lambda st: st["config"]["params"].update(floor=0.0),
        lambda st: st["rate"].update(hits=float("nan")),
        lambda st: st.update(recent=[1.0, -2.0]),
        lambda st: st["config"].update(mutation="yes"),
        lambda st: st.pop("recent"),
        lambda st: st["children"].update(grow=[1, -1]),
    ],
)
def test_malformed_states_are_rejected(corrupt):
    st = json.loads(json.dumps(Scheduler(NAMES, 10, seed=13).state()))
    corrupt(st)
    with pytest.raises(ValueError):
        Scheduler.from_state(st)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        Scheduler([], 10)
    with pytest.raises(ValueError):
        Scheduler(["Add", "Add"], 10)
    with pytest.raises(ValueError):
        Scheduler(NAMES, 0)
    with pytest.raises(ValueError):
        BanditParams(floor=0.0)


# -- the ranked reward, mutation arms, older states ------------------------------------------
def test_the_score_counts_new_branches_on_a_log_scale_and_buckets_not_at_all():
    from nnsmith_cov.feedback.reward import novelty_score

    assert novelty_score(None) == 0.0 and novelty_score(NOTHING) == 0.0 and novelty_score(NOTHING, rare=9) == 0.0
    assert novelty_score(Novelty(1, 0)) == 1.0
    # buckets alone (loops run a new number of times) score nothing, however many, rare or not
    assert novelty_score(Novelty(0, 3)) == novelty_score(Novelty(0, 5000)) == novelty_score(Novelty(0, 50), 9) == 0.0
    assert novelty_score(Novelty(2, 700)) == novelty_score(Novelty(2, 0))
    assert novelty_score(Novelty(40, 0)) < 10 * novelty_score(Novelty(1, 0))  # not forty times one
    assert novelty_score(Novelty(2, 0), rare=3) > novelty_score(Novelty(2, 0))
    # a composite's parts count the same: the mean of their scores
    assert novelty_score(Novelty(3, 0, ((3, 0), (0, 0)))) == pytest.approx(novelty_score(Novelty(3, 0)) / 2)


def test_hand_made_novelties_score_and_rank_in_the_order_a_fuzzer_would_want():
    from nnsmith_cov.feedback.reward import RecentRanks, novelty_score

    # worst to best: nothing; one new branch; one beside rare known ones; a few new branches;
    # a windfall
    examples = [(NOTHING, 0), (NEW, 0), (NEW, 3), (Novelty(3, 0), 0), (Novelty(40, 0), 0)]
    scores = [novelty_score(n, rare) for n, rare in examples]
    assert scores == sorted(set(scores)), scores  # strictly increasing
    window = [novelty_score(Novelty(int(b), int(k))) for b, k in np.random.default_rng(1).poisson((2, 3), (64, 2))]
    rewards = [RecentRanks(64, window).reward(s) for s in scores]
    assert rewards == sorted(rewards) and rewards[0] == 0.0 and rewards[1] < 0.3 and rewards[-1] > 0.95
    # most tests adding buckets alone (native code, minutes in): they earn nothing, a new branch
    # ranks at the top
    busy = RecentRanks(64, [novelty_score(Novelty(int(b > 8), 5)) for b in np.random.default_rng(2).poisson(3, 64)])
    assert busy.reward(novelty_score(Novelty(0, 40))) == 0.0 and busy.reward(novelty_score(NEW)) > 0.85


def test_the_rank_still_tells_tests_apart_when_most_add_something():
    from nnsmith_cov.feedback.reward import RecentRanks, novelty_score

    busy = RecentRanks(100, [novelty_score(Novelty(int(n), 2)) for n in np.random.default_rng(0).poisson(4, 100)])
    rewards = [busy.reward(novelty_score(n)) for n in (Novelty(30, 0), Novelty(4, 2), Novelty(0, 2), NOTHING)]
    assert rewards[0] > 0.95 and 0.3 < rewards[1] < 0.7 and rewards[2] < 0.1 and rewards[3] == 0.0
    assert rewards == sorted(rewards, reverse=True)
    quiet = RecentRanks(100, [0.0] * 100)  # interesting tests are rare: any new branch is worth ~1, as before
    assert quiet.reward(novelty_score(Novelty(1, 0))) > 0.99 and quiet.reward(novelty_score(Novelty(0, 1))) == 0.0
    assert reward_of(Novelty(30, 0)) == reward_of(Novelty(1, 0)) == 1.0  # the saturating one cannot


def test_with_dense_rewards_the_rank_finds_the_richer_op_and_saturation_does_not():
    from nnsmith_cov.feedback.simulate import run_novelty

    def dense(rec: GenRecord, t: int, rng: np.random.Generator) -> Novelty:
        return Novelty(int(rng.poisson(12 if "Conv2d" in rec.ops else 3)), int(rng.poisson(5)))

    ranked = run_novelty(Scheduler(NAMES, 10, seed=3), dense, 500, seed=3)
    flat = run_novelty(Scheduler(NAMES, 10, seed=3, params=BanditParams(window=0)), dense, 500, seed=3)
    assert np.mean(ranked.interesting) > 0.95 and ranked.op_prob("Conv2d", 350) * K > 1.5
    assert flat.op_prob("Conv2d", 350) * K < 1.2
    assert np.mean(ranked.added[250:]) > np.mean(flat.added[250:])


def test_mutation_arms_are_learned_for_seeded_tests():
    from nnsmith_cov.feedback.mutate import SCHEDULED

    s = Scheduler(NAMES, 10, seed=4, mutation=True)
    props = [s.propose() for _ in range(300)]
    assert {p.mutation for p in props if p.seeded} == set(SCHEDULED) == {"grow", "extend"} and all(
        p.mutation is None for p in props if not p.seeded
    )
    for _ in range(600):  # extending pays, growing does not
        p = s.propose()
        s.observe(p, record(["Relu"]), NEW if p.seeded and p.mutation == "extend" else NOTHING)
    picks = [p.mutation for p in (s.propose() for _ in range(600)) if p.seeded]
    assert picks.count("extend") > 0.7 * len(picks)
    tried, gained = s.children["extend"]
    assert tried > 0 and gained == tried and sum(g for _, g in s.children.values()) == gained
    # without mutation the proposals are what they were: nothing more is drawn
    a, b = Scheduler(NAMES, 10, seed=5), Scheduler(NAMES, 10, seed=5, mutation=True)
    pa, pb = a.propose(), b.propose()
    assert dataclasses.replace(pb, mutation=None) == pa and pa.mutation is None


def test_the_cap_on_a_childs_ops_is_learned_among_the_campaigns_caps():
    s = Scheduler(NAMES, 10, seed=6, mutation=True, caps=(40, 20))
    assert s.caps == (20, 40) and "grow_max" in s.groups
    props = [s.propose() for _ in range(300)]
    assert {p.grow_max for p in props if p.seeded} == {20, 40}
    assert all(p.grow_max is None for p in props if not p.seeded)
    for _ in range(600):  # small children pay, large ones do not
        p = s.propose()
        s.observe(p, record(["Relu"]), NEW if p.seeded and p.grow_max == 20 else NOTHING)
    picks = [p.grow_max for p in (s.propose() for _ in range(600)) if p.seeded]
    assert picks.count(20) > 0.7 * len(picks)
    back = Scheduler.from_state(json.loads(json.dumps(s.state())))
    assert back.caps == (20, 40) and back.propose() == s.propose()
    # one cap (or none) is no choice: nothing is drawn, the proposal names no cap
    a, b = Scheduler(NAMES, 10, seed=5, mutation=True), Scheduler(NAMES, 10, seed=5, mutation=True, caps=(40,))
    pa = [a.propose() for _ in range(50)]
    assert pa == [b.propose() for _ in range(50)] and all(p.grow_max is None for p in pa)
    with pytest.raises(ValueError, match="caps"):
        Scheduler(NAMES, 10, caps=(0, 20))


def test_the_hedge_draws_its_share_of_tests_as_feedback_off_does_and_learns_from_them():
    params = BanditParams(hedge=0.3)
    s = Scheduler(NAMES, 10, seed=3, params=params, opsets=(13, 17, 20), dynamic=True, roundtrip=True, mutation=True)
    run(s, conv_rule, 300, seed=3)
    assert 0.2 * 300 < s.hedged[0] < 0.4 * 300 and 0 < s.hedged[1] <= s.hedged[0]
    props = [s.propose() for _ in range(2000)]
    hedged = [p for p in props if p.hedged]
    assert 0.27 < len(hedged) / len(props) < 0.33
    off = Scheduler(NAMES, 10, feedback=False, vary=True).propose()  # what off-var proposes
    uniform = dataclasses.replace(off, dynamic_prob=0.5, roundtrip_prob=0.5, hedged=True)
    assert {_frozen(dataclasses.replace(p, nodes=off.nodes)) for p in hedged} == {_frozen(uniform)}
    assert {p.nodes for p in hedged} == set(s.sizes)  # every size, as off-var draws them
    # the others are steered (Conv2d pays: above its uniform weight), some of them seeded
    steered = [p for p in props if not p.hedged]
    assert np.mean([p.op_weights["Conv2d"] for p in steered]) > 2 and any(p.seeded for p in steered)
    # a hedged test is evidence like any other: the groups of the choices it made learn from it
    before = s.groups["op"].to_json()
    rec = synthetic_record(hedged[0], NAMES, np.random.default_rng(0))
    s.observe(hedged[0], rec, NEW)
    assert s.groups["op"].to_json() != before and s.hedged[0] > 0
    assert Scheduler.from_state(json.loads(json.dumps(s.state()))).hedged == s.hedged
    # no hedge: every test steered; a hedge of 1 would be feedback off
    none = Scheduler(NAMES, 10, seed=3, params=BanditParams(hedge=0.0))
    assert not any(none.propose().hedged for _ in range(300))
    with pytest.raises(ValueError, match="hedge"):
        BanditParams(hedge=1.0)


def _frozen(p: Proposal) -> tuple:
    return tuple(json.dumps(v, sort_keys=True) for v in p.to_json().values())


def test_a_schema_8_state_resumes_without_a_hedge():
    s = Scheduler(NAMES, 10, seed=7, mutation=True, params=BanditParams(hedge=0.0))
    run(s, conv_rule, 50, seed=7)
    old = json.loads(json.dumps(s.state()))
    assert old["schema"] == 9
    old["schema"] = 8
    del old["hedged"], old["config"]["params"]["hedge"]
    back = Scheduler.from_state(old)
    assert back.params.hedge == 0.0 and back.hedged == [0, 0] and back.propose() == s.propose()
    assert Scheduler.from_state(json.loads(json.dumps(back.state()))).state() == back.state()
    for bad in ([1], [1, -1], [1, 2.5], "2"):
        with pytest.raises(ValueError, match="hedged"):
            Scheduler.from_state(json.loads(json.dumps(s.state())) | {"hedged": bad})
    proposal = s.propose().to_json()
    del proposal["hedged"]
    assert Proposal.from_json(proposal).hedged is False
    with pytest.raises(ValueError, match="hedged"):
        Proposal.from_json(proposal | {"hedged": 1})


def test_a_schema_7_state_resumes_without_cap_arms():
    s = Scheduler(NAMES, 10, seed=7, mutation=True)
    run(s, conv_rule, 50, seed=7)
    old = json.loads(json.dumps(s.state()))
    old["schema"] = 7
    del old["hedged"], old["config"]["params"]["hedge"]  # (nor the hedge: schema 9)
    del old["config"]["caps"]
    back = Scheduler.from_state(old)
    assert back.caps == () and "grow_max" not in back.groups and back.propose() == s.propose()
    with pytest.raises(ValueError, match="caps"):
        Scheduler.from_state(old | {"schema": 8, "config": old["config"] | {"caps": ["20"]}})
    proposal = s.propose().to_json()
    del proposal["grow_max"]
    assert Proposal.from_json(proposal).grow_max is None
    with pytest.raises(ValueError, match="grow_max"):
        Proposal.from_json(proposal | {"grow_max": 0})


def test_a_schema_3_state_resumes_with_mutation_off_and_the_default_window():
    s = Scheduler(NAMES, 10, seed=7)
    run(s, conv_rule, 50, seed=7)
    old = json.loads(json.dumps(s.state()))
    old["schema"] = 3
    del old["hedged"], old["config"]["params"]["hedge"]  # (nor the hedge: schema 9)
    del old["config"]["mutation"], old["groups"]["mutation"], old["recent"], old["config"]["params"]["window"]
    del old["children"], old["config"]["forms"]  # (schema 3 had no export-form arms either)
    del old["config"]["vary"], old["config"]["caps"]  # (nor the sizes of off-var, nor cap arms)
    back = Scheduler.from_state(old)
    assert back.mutation is False and back.params.window == BanditParams.window and list(back.ranks.recent) == []
    assert back.groups["op"].to_json() == s.groups["op"].to_json() and back.steps == s.steps
    assert back.propose() == s.propose()
    assert Scheduler.from_state(json.loads(json.dumps(back.state()))).state() == back.state()
    old_proposal = s.propose().to_json()
    del old_proposal["mutation"]
    assert Proposal.from_json(old_proposal).mutation is None


def test_a_schema_5_state_resumes_with_plain_sizes_and_the_same_proposals():
    s = Scheduler(NAMES, 10, seed=7, mutation=True)
    run(s, conv_rule, 50, seed=7)
    old = json.loads(json.dumps(s.state()))
    old["schema"] = 5
    del old["hedged"], old["config"]["params"]["hedge"]  # (nor the hedge: schema 9)
    del old["config"]["vary"], old["config"]["caps"]
    back = Scheduler.from_state(old)
    assert back.vary is False and back.propose() == s.propose()
    assert Scheduler.from_state(json.loads(json.dumps(back.state()))).state() == back.state()
    with pytest.raises(ValueError, match="vary"):
        Scheduler.from_state(old | {"schema": 6, "config": old["config"] | {"vary": "yes"}})


def test_a_schema_6_state_resumes_with_grows_evidence_and_extend_without_any():
    s = Scheduler(NAMES, 10, seed=7, mutation=True)
    run(s, conv_rule, 80, seed=7)
    old = json.loads(json.dumps(s.state()))
    assert tuple(s.groups["mutation"].labels) == ("grow", "extend") and old["schema"] == 9
    del old["config"]["caps"]
    # schema 6 drew grow and six edits: one count per arm, children for each
    old["schema"] = 6
    del old["hedged"], old["config"]["params"]["hedge"]  # (nor the hedge: schema 9)
    old["groups"]["mutation"] = {k: [v[0], 1.0, 2.0, 3.0, 4.0, 5.0, 6.0] for k, v in old["groups"]["mutation"].items()}
    old["children"] = {"grow": [9, 2]} | {
        k: [1, 0] for k in ("op_swap", "attr", "dtype_rank", "insert", "delete", "splice")
    }
    back = Scheduler.from_state(old)
    saved, now = s.groups["mutation"].to_json(), back.groups["mutation"].to_json()
    assert all(now[k] == [saved[k][0], 0.0] for k in now)
    assert back.children == {"grow": [9, 2], "extend": [0, 0]} and back.steps == s.steps
    assert back.groups["op"].to_json() == s.groups["op"].to_json()
    assert Scheduler.from_state(json.loads(json.dumps(back.state()))).state() == back.state()
    assert {back.propose().mutation for _ in range(200)} == {None, "grow", "extend"}
    # a schema-7 state must have the arms drawn now
    with pytest.raises(ValueError, match="mutation"):
        Scheduler.from_state(old | {"schema": 7})
