"""The feedback scheduler: a discounted Thompson-sampling bandit over the generator's choices."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nnsmith_cov.abstract.bins import n_bins
from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.corpus.records import is_int
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback.arms import ArmGroup, Label, Prior
from nnsmith_cov.feedback.mutate import GROW, SCHEDULED
from nnsmith_cov.feedback.params import BanditParams, Proposal, is_number
from nnsmith_cov.feedback.reward import RecentRanks, novelty_score
from nnsmith_cov.feedback.rng_json import rng_from_json, rng_to_json
from nnsmith_cov.gen.generator import GenConfig, GenRecord
from nnsmith_cov.gen.graph_ir import DEFAULT_OPSET

# Version of the dict `Scheduler.state` returns; bump on any change of its layout.
# Example (3 ops, k = 2; every count list has one number per arm of its group):
#   {"schema": 4,
#    "config": {"op_names": ["Add", "Conv2d", "Relu"], "nodes": 10, "bins_k": 2, "seed": 7,
#               "feedback": true, "params": {"discount": 0.997, "prior_tests": 4.0,
#               "lift_cap": 32.0, "floor": 0.2, "size_factors": [0.5, 1.0, 1.5, 2.0], "window": 256},
#               "opsets": [13, 17, 20], "dynamic": true, "roundtrip": true, "mutation": true,
#               "forms": {"conv.form": ["bias", "add"]}, "vary": false, "caps": [20, 40]},
#    "steps": 120, "rate": {"hits": 3.7, "tests": 101.4, "seconds": 180.2, "timed": 99.0},
#    "groups": {"op": {"hit_in": [...], "miss_in": [...], "hit_out": [...], "miss_out": [...]},
#               "direction": {...}, "bin.size": {...}, "bin.pad": {...}, "bin.signed": {...},
#               "nodes": {...}, "seeded": {...}, "opset": {...}, "dynamic": {...}, "roundtrip": {...},
#               "mutation": {...}, "form": {...}, "grow_max": {...}},
#    "recent": [0.0, 2.3, ...],
#    "rng": {"bit_generator": "PCG64", "state": "0x...", "inc": "0x...", "has_uint32": 0, "uinteger": 0}}
# 128-bit generator words are hex strings: msgpack integers stop at 64 bits. Schema 1 (before
# the export arms) reads as opsets [20], dynamic false, the two groups without evidence; schema 2
# (before the round-trip arm) as roundtrip false, that group without evidence; schema 3 (before
# mutation and the ranked reward) as mutation false, the mutation group without evidence, no
# recent scores and the default window; schema 4 (before the export-form arms) as no forms;
# schema 5 (before off-var drew its sizes) as vary false; schema 6 (whose mutation arms were
# grow and the six edits of `feedback.mutate.MUTATIONS` but ``extend``) keeps grow's evidence,
# ``extend`` starts without any and the others' is dropped (they are no longer drawn); schema 7
# (before the cap on a child's ops was an arm) as no caps: the campaign's one cap applies;
# schema 8 (before the hedge, `BanditParams.hedge`) as hedge 0 and no hedged tests counted.
STATE_SCHEMA = 9

BIN_KINDS = (AttrKind.SIZE, AttrKind.PAD, AttrKind.SIGNED)
DIRECTIONS = ("forward", "backward")
ORIGINS = ("fresh", "seeded")
SHAPES = ("static", "dynamic")  # the export's input dims: all concrete, or some symbolic
TRIPS = ("direct", "roundtrip")  # backends compile the imported IR, or it printed and parsed back
# What each older state schema lacks: groups start without evidence, config keys as below.
_NEW_GROUPS = {
    1: {"opset", "dynamic", "roundtrip", "mutation", "form"},
    2: {"roundtrip", "mutation", "form"},
    3: {"mutation", "form"},
    4: {"form"},
    5: set(),
    6: set(),
    7: set(),
    8: set(),
    9: set(),
}
_NEW_CONFIG = {
    1: {"opsets": [DEFAULT_OPSET], "dynamic": False, "roundtrip": False, "mutation": False, "forms": {}},
    2: {"roundtrip": False, "mutation": False, "forms": {}},
    3: {"mutation": False, "forms": {}},
    4: {"forms": {}},
    5: {},
    6: {},
    7: {},
    8: {},
    9: {},
}
for _old in range(1, 6):
    _NEW_CONFIG[_old] = _NEW_CONFIG[_old] | {"vary": False}
for _old in range(1, 8):
    _NEW_CONFIG[_old] = _NEW_CONFIG[_old] | {"caps": []}
    _NEW_GROUPS[_old] = _NEW_GROUPS[_old] | {"grow_max"}
_SUMMARY_SAMPLES = 256
MAX_PRIOR_RATE = 0.9
COST_CAP = 4.0  # a test counts as at most this many average tests (and at least its inverse)
DEFAULT_PARAMS = BanditParams()  # a scheduler's constants unless it is given others


def reward_of(novelty: Novelty | None) -> float:
    """A test's reward in [0, 1]: 1 with a new branch, 0.25 per new bucket up to 1, 0 with nothing or no result.

    Bounded so that it reads as "how interesting" for the Beta posteriors: the
    bandit learns the rate of tests that add coverage, not the size of early
    windfalls (the first tests add thousands of branches whatever they contain).
    Under a composite collector each part's map counts the same: the mean of the
    parts' rewards, so ORT's blocks, new in almost every early test, cannot drown
    TVM's arcs.
    """
    if novelty is None:
        return 0.0
    if novelty.parts:
        return sum(min(1.0, Novelty(*p).reward) for p in novelty.parts) / len(novelty.parts)
    return min(1.0, novelty.reward)


class Scheduler:
    """Chooses the generator's knobs for the next test from what earlier tests reached.

    Use: `p = s.propose()`, generate with `Scheduler.apply(p, base)`, run the
    test, then `s.observe(p, gen.record, novelty)` (novelty None when the test
    produced no coverage result, e.g. no values were found: a zero reward, as
    the choices did cost a test). Not thread-safe; one scheduler per campaign,
    in the process that owns the coverage map.

    Arm groups and what a test exposes to each (only choices the generator
    reports it made earn anything):

    - ``op``: per op name; an op counts once if `record.ops` holds it at all,
      however often: a compiler's code for an op kind is mostly reached by its
      first instance, and counting repeats would let a boosted op collect credit
      for its own boost.
    - ``direction``: forward/backward, by their shares of `record.directions`.
    - ``bin.size``, ``bin.pad``, ``bin.signed``: the bins of one attribute kind
      (labels are the bin numbers of `BinChoice.bin`), by their shares of the
      kept bins of that kind in `record.bins`; dropped bins were not applied.
    - ``nodes``: the graph size asked for, one of `size_factors` times `nodes`.
    - ``seeded``: fresh or grown from the corpus, as the proposal (or the
      caller's replacement of it) says.

    - ``mutation`` (with `mutation`): for a seeded test, how the parent is
      changed: grown at the end, or extended at the op that made it
      interesting (`feedback.mutate.SCHEDULED`); picked once per test. The
      other edits of `feedback.mutate.MUTATIONS` (swap an op, re-draw an
      attribute, insert or delete tries, splice) are not drawn: they re-wire
      what made the parent interesting, and as arms beside ``extend`` they
      thinned its share until the chain fake found its goal in 5 of 12 seeds
      instead of 10 (the study is in `feedback.mutate`'s docstring).

    - ``grow_max`` (with two or more `caps`): for a seeded test, the most ops
      its child may hold (only entries with room are drawn as parents); picked
      once per test. The right cap differs by compiler: on ORT's binary map,
      children capped at 2x the size gained unique blocks and ran 1.1x the
      tests (docs/bench-feedback-ort-15min-grow-cap), while the chain fake,
      whose goal needs deep lineages, found it in 6 of 12 seeds at 2x and 10
      at 4x (scripts/bench_chain.py). Rates are per unit of time, so a cap
      that only makes children cheaper must still pay in coverage. Learned
      between 20 and 40 on ORT the arm saw the same rate for both (0.09-0.18
      after 15 minutes, docs/bench-feedback-ort-15min-learned-cap), and on
      the chain fake it found 6 of 12 seeds: one cap is the default.

    A group with no draws in a test (no pad attribute, say) learns nothing from it.

    The reward (`feedback.reward`): a test's novelty is scored on a log scale
    (new branches, a little for rare known branches reached beside a new one;
    new hit-count buckets alone score nothing) and the reward is the score's rank among the
    last `window` tests. `reward_of`'s 1 for any new branch saturated: on ORT's
    binary collector 1,332 of the first 1,387 tests were interesting, so every
    arm saw a rate near 1 and none could stand out. A rank has the same meaning
    at a 2 % and at a 96 % interesting rate: while interesting tests are rare a
    new branch ranks near 1 (the old reward), and when nearly all are, the
    tests that add more than their neighbours in time earn more. Measured with
    the simulator (scripts/sim_scheduler.py, "dense" scenario: every test adds
    some branches, tests with Conv2d four times as many; 103 ops, 3 seeds):
    with the rank, Conv2d's share rises to 1.9x uniform in tests 1200-1500 and
    tests add 5.4 branches on average, not 3.7; with `reward_of` (window 0)
    its share stays at 1.0x, as if there were no feedback. Buckets weighed a
    quarter of a branch until the "buckets" scenario (every test adds Poisson(40)
    new buckets, 200 with Relu; a new branch with probability 0.2 with Conv2d,
    else 0.02; 139 ops, 3 seeds, tests 700-2000): with that weight the bandit
    followed the decoy (Relu 1.8x, Conv2d 1.1x uniform; 0.043-0.056 tests with a
    new branch, 0.027-0.034 without feedback); counting branches alone, Conv2d
    goes to 6.5-10.2x, Relu to 0.6-1.0x, and 0.106-0.151 of the tests add a
    branch. Real campaigns look like the scenario: on ORT's binary collector,
    after 5 minutes, 82% of the tests kept added buckets and no block.

    The bandit (details in `ArmGroup`): per arm, discounted Beta posteriors of
    the interesting rate of tests with and without it; Thompson sampling on
    their ratio. Multi-draw groups (ops, directions, bins) hand the generator
    per-draw probabilities proportional to the sampled lifts; once-per-test
    groups (size, fresh/seeded) pick the arm with the highest sampled rate.
    Directions and bins move more gently than ops: every graph mixes both
    directions and many bins, tests differ little in their shares, and the
    contrast seen is a fraction of the effect (in the simulation, a direction
    that makes tests 15 times likelier to be interesting gets 60 % of the
    draws, a rewarding op ten times its uniform share). Small but sure
    differences are deliberately not amplified toward the best arm: variety
    that the reward cannot see is part of what a fuzzer is for.

    A fresh graph's first op is the exception: it is Thompson's pick, the op of
    the highest lift in the sample the op shares are made from (a floor of the
    graphs start with a drawn op, as before), and a first op that exports at
    some opsets only keeps the graph to those (`apply`). The shares set how
    often an op is *tried*; a try after the first lands only where a value fits
    it, and the ops that pay most can be the hardest to fit. In four off-var
    campaigns on ORT's binary collector (30 minutes, seeds 1 and 2; 15 minutes,
    seeds 3 and 4), GridSample's tests added the most blocks and it made 0.02-
    0.04 % of the graphs' ops for 0.72 % of the tries: even the 4x share the
    bandit gave it left it in about one graph in seventy. The first op is put
    against a placeholder made to fit it and nearly always goes in: picking it
    is how a lift becomes graphs that hold the op. And there is something to
    pick: ranked by their tests' new blocks on three of those campaigns, the
    ten top ops held by a test of the fourth meant 1.6-1.8x the campaign's mean
    new blocks per test, two of them 1.8-3.0x (`scripts/op_headroom.py`; on TVM's
    C++, 0.97-1.57x and no stable ranking). In the simulator ("fit": Conv2d pays,
    a try after the first puts it in 4 times in 100; 103 ops, 3 seeds, tests
    700-2000) the pick puts it in 82-84 % of the tests and 0.42 of them are
    interesting; with the shares alone 20-27 % and 0.13-0.16 (plain: 1-2 %,
    0.02-0.03). Picking among the top five instead (equal parts) did worse than
    the shares alone where one op pays, giving it a fifth of the picks (30 ops,
    tests 300-600: in 26-32 % of the tests against 41-44 %). The
    op shares of a picked op fall (its bystanders, now often in its graphs, share
    its rate), which is why the pick reads the lifts rather than the shares. The
    simulator's figures above were measured before the pick; with it, "dense"
    adds 10.8-10.9 branches per test (saturating reward 4.4-7.9, plain 3.8-4.0,
    Conv2d's share 3.2-4.0x) and "buckets" has 0.18-0.20 of the tests add a
    branch (plain 0.03-0.04; Conv2d 5.0-6.2x, the decoy Relu 0.8x).

    Rates are per unit of campaign time, not per test: a test is charged as
    many trials as it took average tests' time (`cost`, capped at COST_CAP), so
    a choice that looks interesting per test because it makes tests slow (the
    largest graphs, compile-heavy ops) must pay for the tests it displaces, as
    AFL favours fast inputs. Timings make a campaign's proposals depend on the
    machine; the tests themselves still replay exactly from their records.
    This is already the reward per second that AFL++'s and Entropic's schedules
    weigh, so no second cost term is added: an arm three times slower that is
    eight times likelier to pay still gains share (3.3-3.7x uniform in the
    simulator, 5.4-5.7x untimed), and one that only makes tests slow loses it.
    That `on` runs fewer tests than off-var is then not the reward's doing;
    the likely cause is a seeded graph's size, which no arm is charged for (a
    grown graph is its parent's ops plus half the proposal's size).

    Parameters (`BanditParams`) and why:

    - discount 0.997 per test (memory ~333 tests, half-life ~231): coverage
      rewards thin out and move within a campaign (an op's new branches run out
      once it has been tried enough); a few hundred tests is long enough to see
      a handful of interesting tests at a 2 % rate and short enough to follow a
      switch within a few hundred tests (see scripts/sim_scheduler.py).
    - prior: 4 tests' worth at the campaign's current (discounted) interesting
      rate, for every posterior. An arm without evidence is taken for an
      average one, lift 1. A flat Beta(1, 1) would claim a 50 % rate where the
      real one is 2 % and flood graphs with untried arms for hundreds of tests;
      a pessimistic one would starve them. Tying the prior to the current rate
      also keeps the lifts meaningful as the rate falls over a campaign.
    - lift cap 32: a lift is a ratio of small rates and its samples are heavy-
      tailed; the cap bounds what one lucky sample can do to a test.
    - floor 0.2: a fifth of every decision is uniform, so each op keeps at
      least 0.2/len(ops) per insertion, forward_prob stays in [0.1, 0.9], each
      bin keeps 0.2/bins, each size and origin is picked with probability
      >= 0.2/arms. What the reward cannot see (diversity of the corpus) is never
      traded away entirely.
    - hedge 0.5: half the tests are drawn as feedback off draws them (`propose`:
      a fresh graph, ops, bins and direction uniform, the opset, symbolic dims
      and round trip uniform, the size uniform among the ``nodes`` arm's), the
      other half steered or grown from the corpus. The floor keeps each arm
      alive per decision, but a test made of steered decisions is still
      steered as a whole, and on real compilers uniform draws are hard to beat
      on breadth: a graph has one opset and one size, and every test the
      bandit spends where it pays (opset 20, GridSample) is one the other
      opsets' and sizes' code does not get (`docs/feedback-choice-headroom/`:
      `on` held that code sooner and more fully, and less of the rest). Most
      of what uniform tests reach comes in a campaign's first minutes, so
      drawing them at half the rate gives up little, while the steered half
      keeps the depth only feedback finds. Measured against `off-var`
      (`docs/bench-feedback-*-hedge*`): on ORT's binary collector, 15 minutes,
      seeds 3-6 and seeds 3 and 4 again, 1.00x-1.01x the blocks, 0.98x-2.05x
      the unique blocks, `off-var`'s final coverage reached at 0.64-0.80 of the
      run in five of six pairs, and at 30 minutes, seeds 1 and 2, 1.41x and
      1.27x, reached at 0.83; on TVM's Python, 30 minutes, seeds 1-4, 7.40x,
      4.33x, 2.14x and 1.50x the unique arcs, reached at 0.21, 0.20, 0.96 and
      0.73; on TVM's C++, 30 minutes, seeds 1-4 twice, 0.78x-8.47x the unique
      blocks (geometric mean 2.55x), reached at 0.26-0.74 in seven of eight
      pairs. Without the hedge the ORT and Python seeds gave 0.51x-0.93x (ORT,
      four runs) and 0.21x-1.65x (TVM's Python, four runs), reaching once in
      eight; on ORT seeds 3 and 4 all four hedged campaigns ended above all
      four unhedged ones in total blocks.
      The hedge's tests are observed like the others (unbiased evidence for
      every arm) and counted in `hedged`; `fuzz --hedge 0` steers every test.
      Why half: on ORT seeds 3 and 4, 0.3 and 0.7 gave 1.24x and 1.37x the
      unique blocks (geometric means, one run each), 0.5 1.61x over two runs.
    - window 256: the rank of a reward is taken among about the discount's
      memory of tests (a little less), so rewards and posteriors describe the
      same stretch of the campaign; 0 restores `reward_of` (for ablations).

    The export arms: `opsets` are the ONNX opsets a graph may be exported at
    (the generator draws among those its ops allow, by the weights given), and
    with `dynamic` the share of graphs exported with symbolic input dims is an
    arm pair (static/dynamic) too. With `roundtrip`, so is the share of graphs
    the backends compile from their IR printed as text and parsed back
    (direct/roundtrip: the printer and parser are compiler code a test reaches
    only this way).

    Corpus admission stays AFL++'s rule (the ledger stores every interesting
    test, one that only adds new buckets of common branches included), not
    libFuzzer's smallest input per feature, for three reasons. The virgin map
    must stay the union of the stored bitmaps (what `CorpusStore.check`
    verifies), so a test whose buckets entered the map must keep its hits, and
    its graph is what reproduces them (`replay`, `reduce`). Selection
    already discounts such an entry: its energy (`SeedPool.rarity`) sums
    1 / (entries reaching it) over its branches, so an entry of common branches
    only is seldom picked, it earns no reward, and its children that add buckets
    alone do not restore its energy (`SeedPool.add`'s gain). Keeping such
    entries out of the seed pool altogether (libFuzzer's admission for seeds
    only) was measured on ORT and left both seeds behind: 1.5k and 2.5k fewer
    blocks in 15 minutes (`docs/bench-feedback-ort-15min-admission`).
    What remains, the disk such entries take on a saturating binary map (420
    of ORT's first 1,332 entries), is the store's budget to manage, not a
    judgement the scheduler should make.

    With `feedback=False` the scheduler proposes plain NNSmith: uniform weights
    (None), forward_prob 0.5, the configured node count, never seeded, the base
    config's opsets, dynamic and round-trip shares; it draws nothing and ignores
    observations, so the same generator seeds give the same graphs as the
    unguided loop. With `vary` too (the off-var ablation: the same choice space
    drawn at random) the size is drawn uniformly from the sizes the ``nodes``
    arm chooses among, the one draw it makes. Without it off-var was not the
    choice space at random: on the fake chain (tests/test_feedback_loop.py)
    sizes alone took off-var from 1 to 9 of 12 seeds, more than `on` (7).

    Levers tried on that fake and left out (scripts/bench_chain.py has the
    per-seed tables): a seeded-share floor rising with the corpus, rare-path
    energy (per branch 1/entries squared, with or without a cap on one entry's
    share; 1/tests reaching it), more patience with fruitless children,
    charging the size arm for fresh and grown tests only. None gained beyond
    what reshuffling the same draws moves (4-7 of 12 seeds against 7), and the
    fake says why: a child of the entry holding the deepest chain extends it in
    2-6 % of tries, a fresh graph of any size reaches depth 3 in 3 %, so more
    picks of the frontier cannot pull ahead. The ``seeded`` arm stays a learned
    Thompson choice: it already gives seeding the share its rate earns.

    All its randomness comes from one numpy PCG64 generator seeded with `seed`
    and carried in `state()`: a campaign's proposals replay exactly, and
    `Scheduler.from_state(s.state())` proposes what `s` would have next.
    """

    def __init__(
        self,
        op_names: Sequence[str],
        nodes: int,
        bins_k: int = 7,
        seed: int = 0,
        feedback: bool = True,
        params: BanditParams | None = None,
        opsets: Sequence[int] = (DEFAULT_OPSET,),
        dynamic: bool = False,
        roundtrip: bool = False,
        mutation: bool = False,
        forms: Mapping[str, Sequence[str]] | None = None,
        vary: bool = False,
        caps: Sequence[int] = (),
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        if bins_k < 2:
            raise ValueError("bins_k must be at least 2")
        if seed < 0:
            raise ValueError("seed must be non-negative")
        self.op_names = tuple(op_names)
        self.nodes = nodes
        self.bins_k = bins_k
        self.seed = seed
        self.feedback = feedback
        self.params = params or DEFAULT_PARAMS
        self.sizes = _sizes(nodes, self.params.size_factors)
        self.opsets = tuple(sorted(set(opsets)))
        self.dynamic = dynamic
        self.roundtrip = roundtrip
        self.mutation = mutation
        self.vary = vary  # without feedback: the size drawn uniformly among `sizes` (off-var)
        if not all(is_int(c) and c >= 1 for c in caps):
            raise ValueError("caps must be positive integers")
        self.caps = tuple(sorted(set(caps)))  # a seeded child's op caps to learn among (two or more)
        # the ops' export-form draws (`abstract.op.export_forms`): label -> option names
        self.forms = {str(k): tuple(str(o) for o in v) for k, v in (forms or {}).items()}
        self.groups: dict[str, ArmGroup] = {
            "op": ArmGroup("op", self.op_names),
            "direction": ArmGroup("direction", DIRECTIONS),
        }
        for kind in BIN_KINDS:
            self.groups[_bin_group(kind)] = ArmGroup(_bin_group(kind), bin_labels(kind, bins_k))
        self.groups["nodes"] = ArmGroup("nodes", self.sizes)
        self.groups["seeded"] = ArmGroup("seeded", ORIGINS)
        self.groups["opset"] = ArmGroup("opset", self.opsets)
        self.groups["dynamic"] = ArmGroup("dynamic", SHAPES if dynamic else SHAPES[:1])
        self.groups["roundtrip"] = ArmGroup("roundtrip", TRIPS if roundtrip else TRIPS[:1])
        self.groups["mutation"] = ArmGroup("mutation", SCHEDULED if mutation else (GROW,))
        if self.forms:  # one arm per (draw, option): "conv.form=add"
            self.groups["form"] = ArmGroup("form", [f"{k}={o}" for k, opts in self.forms.items() for o in opts])
        if len(self.caps) > 1:
            self.groups["grow_max"] = ArmGroup("grow_max", self.caps)
        self.ranks = RecentRanks(self.params.window) if self.params.window else None
        # seeded tests per way of changing the parent, and those that reached new coverage (not discounted)
        self.children = {str(a): [0, 0] for a in self.groups["mutation"].labels}
        self.hedged = [0, 0]  # the hedge's tests, and those that reached new coverage (not discounted)
        self.steps = 0  # tests observed
        # discounted reward and test count of the whole campaign: the prior's rate
        self._hits = 0.0
        self._tests = 0.0  # in cost units (see `cost`)
        self._seconds = 0.0  # discounted time and count of timed tests: the average test
        self._timed = 0.0
        self._rng = np.random.Generator(np.random.PCG64(seed))

    # -- deciding -------------------------------------------------------------------------
    def prior(self) -> Prior:
        """Beta pseudo-counts at the campaign's current interesting rate (0.5 before any test)."""
        # Per unit of time the rate can pass 1 (fast tests that all add coverage): cap it.
        rate = min((self._hits + 0.5) / (self._tests + 1.0), MAX_PRIOR_RATE)
        return self.params.prior_tests * rate, self.params.prior_tests * (1.0 - rate)

    def propose(self) -> Proposal:
        """The knobs for the next test (draws from the scheduler's generator in a fixed order)."""
        if not self.feedback:
            return Proposal(None, 0.5, None, self._any_size() if self.vary else self.nodes, False)
        # off-var's test: every knob uniform, a fresh graph (no draw without a hedge: the
        # proposals of a campaign from before it go on as they were)
        if self.params.hedge and self._rng.random() < self.params.hedge:
            dynamic, trip = (0.5 if self.dynamic else None), (0.5 if self.roundtrip else None)
            return Proposal(None, 0.5, None, self._any_size(), False, None, dynamic, trip, hedged=True)
        return self._propose(self._rng)

    def _any_size(self) -> int:
        """A size drawn uniformly among the ``nodes`` arm's (off-var's draw, and the hedge's)."""
        return self.sizes[int(self._rng.integers(len(self.sizes)))]

    def _propose(self, rng: np.random.Generator) -> Proposal:
        prior, p, g = self.prior(), self.params, self.groups
        lifts = g["op"].lifts(rng, prior, p.lift_cap)
        ops = g["op"].spread(lifts, p.floor)
        direction = g["direction"].share(rng, prior, p.lift_cap, p.floor)
        bins = {}
        for kind in BIN_KINDS:
            probs = g[_bin_group(kind)].share(rng, prior, p.lift_cap, p.floor)
            bins[kind.value] = [float(x) * len(probs) for x in probs]
        nodes = self.sizes[g["nodes"].pick(rng, prior, p.floor)]
        seeded = g["seeded"].pick(rng, prior, p.floor) == 1
        # Per-graph choices, but as shares, not Thompson picks: the generator still has to
        # draw among the opsets a graph's ops allow, and a mix keeps the coverage varied.
        opsets = g["opset"].share(rng, prior, p.lift_cap, p.floor)
        dynamic = g["dynamic"].share(rng, prior, p.lift_cap, p.floor)
        trip = g["roundtrip"].share(rng, prior, p.lift_cap, p.floor)
        form_weights = None
        if "form" in g:  # shares per draw label, relative to uniform among its options
            share = dict(zip(g["form"].labels, g["form"].share(rng, prior, p.lift_cap, p.floor)))
            form_weights = {k: [float(share[f"{k}={o}"]) * len(share) for o in opts] for k, opts in self.forms.items()}
        # Thompson's pick on the op shares' own sample (the op of the highest sampled lift);
        # a floor of fresh graphs start as before
        first = self.op_names[int(np.argmax(lifts))] if rng.random() >= p.floor else None
        mutation = None
        if self.mutation:  # drawn last, so that the draws before it are as without mutation
            mutation = str(g["mutation"].labels[g["mutation"].pick(rng, prior, p.floor)])
        cap = None
        if "grow_max" in g:  # after the mutation, for the same reason
            cap = int(g["grow_max"].labels[g["grow_max"].pick(rng, prior, p.floor)])
        return Proposal(
            {name: float(x) * len(ops) for name, x in zip(self.op_names, ops)},
            float(direction[0]),
            bins,
            nodes,
            seeded,
            {o: float(x) * len(opsets) for o, x in zip(self.opsets, opsets)},
            float(dynamic[1]) if self.dynamic else None,
            float(trip[1]) if self.roundtrip else None,
            mutation if seeded else None,
            form_weights,
            cap if seeded else None,
            first,
        )

    @staticmethod
    def apply(proposal: Proposal, base: GenConfig) -> GenConfig:
        """`base` with the proposal's knobs (None weights: the generator's uniform default;
        None opset weights, dynamic or round-trip share: the base config's). A first op
        that exports at some of the opsets only keeps the graph to those."""
        opset_weights = base.opset_weights if proposal.opset_weights is None else proposal.opset_weights
        first = next((o for o in base.ops if o.name() == proposal.first_op), None)
        if first is not None and len(base.opsets) > 1:
            weights = {o: (opset_weights or {}).get(o, 1.0) for o in base.opsets}
            kept = {o: w if first.export_dtypes(o) else 0.0 for o, w in weights.items()}
            if any(kept.values()):
                opset_weights = kept
        return dataclasses.replace(
            base,
            op_weights=proposal.op_weights,
            first_op=proposal.first_op,
            forward_prob=proposal.forward_prob,
            bin_weights=proposal.bin_weights,
            nodes=proposal.nodes,
            opset_weights=opset_weights,
            dynamic_prob=base.dynamic_prob if proposal.dynamic_prob is None else proposal.dynamic_prob,
            roundtrip_prob=base.roundtrip_prob if proposal.roundtrip_prob is None else proposal.roundtrip_prob,
            draw_weights=proposal.form_weights if proposal.form_weights is not None else base.draw_weights,
        )

    # -- learning -------------------------------------------------------------------------
    def observe(
        self,
        proposal: Proposal,
        record: GenRecord,
        novelty: Novelty | None,
        seconds: float | None = None,
        rare: int = 0,
    ) -> float:
        """Credit one finished test to the choices it was made of; returns the reward used.

        A test whose generation failed is observed with an empty `GenRecord`:
        only its size and origin are charged. `seconds`, the test's time, makes
        it cost `cost(seconds)` trials instead of one. `rare`: how many of its
        branches few corpus entries reach (`SeedPool.rare`).
        """
        if not self.feedback:
            return reward_of(novelty)
        reward = reward_of(novelty) if self.ranks is None else self.ranks.reward(novelty_score(novelty, rare))
        d = self.params.discount
        cost = self.cost(seconds)
        if seconds is not None:
            self._seconds = self._seconds * d + seconds
            self._timed = self._timed * d + 1.0
        self.steps += 1
        self._hits = self._hits * d + reward
        self._tests = self._tests * d + cost
        for group in self.groups.values():
            group.decay(d)
        exposures = {
            "op": _presence(self.groups["op"], record.ops),
            "direction": _shares(self.groups["direction"], record.directions),
            "nodes": _presence(self.groups["nodes"], [proposal.nodes]),
            "seeded": _presence(self.groups["seeded"], [ORIGINS[proposal.seeded]]),
        }
        if proposal.seeded:  # a test grown or mutated from the corpus: its way of changing the parent
            exposures["mutation"] = _presence(self.groups["mutation"], [proposal.mutation or GROW])
            if proposal.grow_max is not None:
                exposures["grow_max"] = _presence(self.groups["grow_max"], [proposal.grow_max])
            _tally(self.children.get(proposal.mutation or GROW), novelty)
        if proposal.hedged:
            _tally(self.hedged, novelty)
        if record.ops:  # a graph was made: it has an export plan
            exposures["opset"] = _presence(self.groups["opset"], [record.opset])
            exposures["dynamic"] = _presence(self.groups["dynamic"], [SHAPES[record.dynamic]])
            exposures["roundtrip"] = _presence(self.groups["roundtrip"], [TRIPS[record.roundtrip]])
        if "form" in self.groups:  # the forms the graph's ops were exported in
            forms = self.forms
            drawn = [f"{k}={forms[k][v]}" for k, v in record.draws if k in forms and _index_in(v, forms[k])]
            exposures["form"] = _presence(self.groups["form"], drawn)
        for kind in BIN_KINDS:
            name = _bin_group(kind)
            kept = [b.bin for b in record.bins if b.kept and b.kind == kind.value]
            exposures[name] = _shares(self.groups[name], kept)
        for name, exposure in exposures.items():
            if exposure is not None:
                self.groups[name].update(exposure, reward, cost)
        return reward

    def cost(self, seconds: float | None) -> float:
        """A test's time in (discounted) average tests, within [1/COST_CAP, COST_CAP]; 1 untimed."""
        if seconds is None or self._timed < 1.0 or self._seconds <= 0.0:
            return 1.0
        return float(np.clip(seconds / (self._seconds / self._timed), 1.0 / COST_CAP, COST_CAP))

    # -- persistence and display ----------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything the scheduler is, as JSON/msgpack-ready values (see STATE_SCHEMA)."""
        return {
            "schema": STATE_SCHEMA,
            "config": {
                "op_names": list(self.op_names),
                "nodes": self.nodes,
                "bins_k": self.bins_k,
                "seed": self.seed,
                "feedback": self.feedback,
                "params": self.params.to_json(),
                "opsets": list(self.opsets),
                "dynamic": self.dynamic,
                "roundtrip": self.roundtrip,
                "mutation": self.mutation,
                "forms": {k: list(v) for k, v in self.forms.items()},
                "vary": self.vary,
                "caps": list(self.caps),
            },
            "steps": self.steps,
            "rate": {"hits": self._hits, "tests": self._tests, "seconds": self._seconds, "timed": self._timed},
            "groups": {name: g.to_json() for name, g in self.groups.items()},
            "recent": [] if self.ranks is None else [float(x) for x in self.ranks.recent],
            "children": {k: list(v) for k, v in self.children.items()},
            "hedged": list(self.hedged),
            "rng": rng_to_json(self._rng),
        }

    @classmethod
    def from_state(cls, state: Any) -> Scheduler:
        """A scheduler that goes on exactly where the one that saved `state` stood; validates it."""
        schema = state.get("schema") if isinstance(state, dict) else None
        if schema not in _NEW_GROUPS:
            raise ValueError(f"scheduler state: expected schema {STATE_SCHEMA}")
        fields = {"schema", "config", "steps", "rate", "groups", "rng"}
        fields |= ({"recent", "children"} if schema >= 4 else set()) | ({"hedged"} if schema >= 9 else set())
        if set(state) != fields:
            raise ValueError("scheduler state: unexpected fields")
        cfg = state["config"]
        keys = {"op_names", "nodes", "bins_k", "seed", "feedback", "params", "opsets", "dynamic", "roundtrip"}
        keys |= {"mutation", "forms", "vary", "caps"}
        # `vary` may be absent before schema 6 (states converted by hand may keep it: harmless)
        loose = {"vary"} if schema < 7 else set()
        if not isinstance(cfg, dict) or set(cfg) - loose != keys - set(_NEW_CONFIG[schema]) - loose:
            raise ValueError("scheduler state: bad config")
        cfg = _NEW_CONFIG[schema] | cfg
        opsets = cfg["opsets"]
        if not isinstance(opsets, list) or not opsets or not all(isinstance(o, int) for o in opsets):
            raise ValueError("scheduler state: opsets must be a non-empty list of integers")
        if not all(isinstance(cfg[k], bool) for k in ("dynamic", "roundtrip", "mutation", "vary")):
            raise ValueError("scheduler state: dynamic, roundtrip, mutation and vary must be bools")
        names = cfg["op_names"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("scheduler state: op_names must be a list of strings")
        if not all(is_int(cfg[k]) for k in ("nodes", "bins_k", "seed")):
            raise ValueError("scheduler state: nodes, bins_k and seed must be integers")
        if not isinstance(cfg["feedback"], bool):
            raise ValueError("scheduler state: feedback must be a bool")
        params = BanditParams.from_json(cfg["params"])
        forms = cfg["forms"]
        if not isinstance(forms, dict) or not all(
            isinstance(v, list) and v and all(isinstance(o, str) for o in v) for v in forms.values()
        ):
            raise ValueError("scheduler state: forms must map draw labels to lists of option names")
        arms = {"opsets": opsets, "dynamic": cfg["dynamic"], "roundtrip": cfg["roundtrip"], "mutation": cfg["mutation"]}
        caps = cfg["caps"]
        if not isinstance(caps, list) or not all(is_int(c) for c in caps):
            raise ValueError("scheduler state: caps must be a list of integers")
        arms |= {"forms": forms, "vary": cfg["vary"], "caps": caps}
        s = cls(names, cfg["nodes"], cfg["bins_k"], cfg["seed"], cfg["feedback"], params, **arms)
        steps, rate, groups = state["steps"], state["rate"], state["groups"]
        if not isinstance(steps, int) or steps < 0:
            raise ValueError("scheduler state: steps must be a non-negative integer")
        if not isinstance(rate, dict) or set(rate) not in ({"hits", "tests"}, {"hits", "tests", "seconds", "timed"}):
            raise ValueError("scheduler state: bad rate")
        if not all(is_number(rate[k]) and math.isfinite(rate[k]) and rate[k] >= 0 for k in rate):
            raise ValueError("scheduler state: rate counts must be finite and non-negative")
        fresh = _NEW_GROUPS[schema]  # an older state has no evidence for them
        if not isinstance(groups, dict) or set(groups) != set(s.groups) - fresh:
            raise ValueError(f"scheduler state: expected the groups {sorted(set(s.groups) - fresh)}")
        if schema < 7 and cfg["mutation"] and isinstance(groups.get("mutation"), dict):
            groups = groups | {"mutation": _arms_since_7(groups["mutation"])}
        for name in groups:
            s.groups[name].load_json(groups[name])
        s.steps, s._hits, s._tests = steps, float(rate["hits"]), float(rate["tests"])
        s._seconds, s._timed = float(rate.get("seconds", 0.0)), float(rate.get("timed", 0.0))
        recent = state.get("recent", [])
        if not isinstance(recent, list) or not all(is_number(x) and math.isfinite(x) and x >= 0 for x in recent):
            raise ValueError("scheduler state: recent scores must be finite non-negative numbers")
        if s.ranks is not None:
            s.ranks = RecentRanks(s.ranks.window, recent)
        children = state.get("children", {k: list(v) for k, v in s.children.items()})
        if schema < 7 and isinstance(children, dict) and cfg["mutation"]:
            children = {a: children.get(a, [0, 0]) for a in SCHEDULED}
        if not isinstance(children, dict) or set(children) != set(s.children):
            raise ValueError(f"scheduler state: children must count the arms {sorted(s.children)}")
        for k, v in children.items():
            if not _is_tally(v):
                raise ValueError("scheduler state: children counts must be two non-negative integers")
            s.children[k] = list(v)
        hedged = state.get("hedged", [0, 0])
        if not _is_tally(hedged):
            raise ValueError("scheduler state: hedged must be two non-negative integers")
        s.hedged = list(hedged)
        rng_from_json(s._rng, state["rng"])
        return s

    def summary(self, top: int = 5) -> dict[str, Any]:
        """Per group, the `top` arms by their expected probability in the next proposal; "first":
        the ops most likely to be picked as a fresh graph's first op.

        For the status screen. Averaged over posterior samples drawn from a
        private generator seeded with the step count, so looking never moves
        the campaign's own draws.
        """
        out: dict[str, Any] = {"feedback": self.feedback, "tests": self.steps, "children": dict(self.children)}
        out["hedged"] = list(self.hedged)
        out["rate"] = self._hits / self._tests if self._tests else 0.0
        rng = np.random.default_rng(self.steps)
        prior, p = self.prior(), self.params
        for name, g in self.groups.items():
            if not self.feedback:
                probs = np.full(len(g), 1.0 / len(g))
                if name in ("seeded", "mutation", "grow_max"):
                    probs = np.eye(len(g))[0]  # never seeded, so never mutated
            elif name in ("nodes", "seeded", "mutation", "grow_max"):
                picks = [g.pick(rng, prior, p.floor) for _ in range(_SUMMARY_SAMPLES)]
                probs = np.bincount(picks, minlength=len(g)) / _SUMMARY_SAMPLES
            else:
                probs = np.mean(
                    [g.share(rng, prior, p.lift_cap, p.floor) for _ in range(_SUMMARY_SAMPLES // 8)], axis=0
                )
            out[name] = _top_arms(g, probs, top)
        if self.feedback:  # the first op of a fresh graph: Thompson's pick (`_propose`), else drawn
            g = self.groups["op"]
            picks = [int(np.argmax(g.lifts(rng, prior, p.lift_cap))) for _ in range(_SUMMARY_SAMPLES)]
            out["first"] = _top_arms(g, (1.0 - p.floor) * np.bincount(picks, minlength=len(g)) / _SUMMARY_SAMPLES, top)
        if not self.feedback and not self.vary:
            out["nodes"] = [[self.nodes, 1.0]]  # the configured size, arm or not
        return out


# -- helpers ----------------------------------------------------------------------------------
def _top_arms(group: ArmGroup, probs: np.ndarray, top: int) -> list[list[Any]]:
    """The `top` arms of `group` by `probs` (ties by position), as [label, probability] pairs."""
    order = sorted(range(len(group)), key=lambda i: (-probs[i], i))[:top]
    return [[group.labels[i], round(float(probs[i]), 4)] for i in order]


ARMS_BEFORE_7 = (GROW, "op_swap", "attr", "dtype_rank", "insert", "delete", "splice")  # schema 6's


def _arms_since_7(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-6 mutation group's counts as the arms drawn since: grow's kept, the rest zero."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if not isinstance(v, list) or len(v) != len(ARMS_BEFORE_7):
            out[k] = v  # not schema 6's: load_json refuses it
            continue
        out[k] = [v[ARMS_BEFORE_7.index(a)] if a in ARMS_BEFORE_7 else 0.0 for a in SCHEDULED]
    return out


def _sizes(nodes: int, factors: Sequence[float]) -> tuple[int, ...]:
    """Distinct node counts around `nodes`, rounded half up, at least 1, in factor order."""
    out: list[int] = []
    for f in factors:
        n = max(1, math.floor(nodes * f + 0.5))
        if n not in out:
            out.append(n)
    return tuple(out)


def _tally(counts: list[int] | None, novelty: Novelty | None) -> None:
    """One more test in `counts` ([tests, with new coverage])."""
    if counts is not None:
        counts[0] += 1
        counts[1] += bool(novelty is not None and novelty.interesting)


def _is_tally(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(is_int(x) and x >= 0 for x in v)


def _bin_group(kind: AttrKind) -> str:
    return f"bin.{kind.value}"


def bin_labels(kind: AttrKind, k: int) -> list[int]:
    """Bin numbers (as `BinChoice.bin` reports them) in the order of the generator's weight list."""
    first = {AttrKind.SIZE: 1, AttrKind.PAD: 0, AttrKind.SIGNED: -k}[kind]
    return list(range(first, first + n_bins(kind, k)))


def _index_in(v: Any, options: Sequence[str]) -> bool:
    return is_int(v) and 0 <= v < len(options)


def _presence(group: ArmGroup, labels: Sequence[Label]) -> np.ndarray | None:
    """1 for each known arm among `labels`, however often it occurs; None when none is known."""
    hit = sorted({group.index[x] for x in labels if x in group.index})
    if not hit:
        return None
    e = np.zeros(len(group))
    e[hit] = 1.0
    return e


def _shares(group: ArmGroup, labels: Sequence[Label]) -> np.ndarray | None:
    """Each arm's share of `labels` (unknown labels ignored); None when there are none."""
    idx = [group.index[x] for x in labels if x in group.index]
    if not idx:
        return None
    return np.bincount(idx, minlength=len(group)) / len(idx)
