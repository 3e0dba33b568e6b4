"""Synthetic tests for the scheduler: records drawn from a proposal and rewards from a rule, no Z3 or backends."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from nnsmith_cov.abstract.bins import n_bins
from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback.scheduler import Proposal, Scheduler, bin_labels
from nnsmith_cov.gen.binning import BinChoice
from nnsmith_cov.gen.generator import GenRecord

# Attribute draws per inserted op, by kind: every graph has many SIZE dims
# (placeholder shapes, kernels), few paddings, fewer signed attributes.
BIN_DRAWS_PER_NODE = {AttrKind.SIZE: 2.0, AttrKind.PAD: 0.3, AttrKind.SIGNED: 0.2}
MAX_TRIES = 10  # draws per slot of a graph before the slot stays empty (`synthetic_record`'s `fit`)

# P(interesting | record, test number): the environment a simulation runs in.
Rule = Callable[[GenRecord, int], float]
# What a test adds (record, test number, the simulation's generator): for campaigns where most
# tests add something and only the amount tells them apart.
NoveltyRule = Callable[[GenRecord, int, np.random.Generator], Novelty]


def synthetic_record(
    proposal: Proposal,
    op_names: Sequence[str],
    rng: np.random.Generator,
    bins_k: int = 7,
    keep_prob: float = 0.9,
    fit: Mapping[str, float] | None = None,
) -> GenRecord:
    """What a generator following `proposal` could report: ops, directions and bins drawn from its weights.

    The first op is `proposal.first_op` (drawn by its `op_weights` without one) and always
    goes in, as the generator's first op goes in against a placeholder made for it.
    Each later slot draws by `op_weights` until an op goes in, op o with probability
    `fit[o]` (default 1: every try goes in), at most MAX_TRIES times; each bin is kept with
    probability `keep_prob`, as binning drops what does not fit.
    """
    names = list(op_names)
    later = _normalized(proposal.op_weights, names)
    if proposal.first_op is not None:
        ops = [names.index(proposal.first_op)]
    else:
        ops = [int(rng.choice(len(names), p=later))]
    for _ in range(proposal.nodes - 1):
        for _ in range(MAX_TRIES):
            op = int(rng.choice(len(names), p=later))
            if fit is None or rng.random() < fit.get(names[op], 1.0):
                ops.append(op)
                break
    forward = rng.random(len(ops)) < proposal.forward_prob
    record = GenRecord(seed=int(rng.integers(2**31)))
    record.ops = [names[i] for i in ops]
    record.directions = ["forward" if f else "backward" for f in forward]
    for kind, per_node in BIN_DRAWS_PER_NODE.items():
        labels = bin_labels(kind, bins_k)
        weights = (proposal.bin_weights or {}).get(kind.value)
        p = None if weights is None else np.asarray(weights, float) / sum(weights)
        for idx in rng.choice(len(labels), size=rng.poisson(per_node * len(ops)), p=p):
            owner = f"{names[ops[rng.integers(len(ops))]]}#0"
            record.bins.append(BinChoice(owner, "a", kind.value, labels[idx], bool(rng.random() < keep_prob)))
    # The export plan, drawn only where there is a choice (so plain proposals replay as before).
    opsets = sorted(proposal.opset_weights or {})
    if len(opsets) > 1:
        record.opset = opsets[rng.choice(len(opsets), p=_normalized(proposal.opset_weights, opsets))]
    if proposal.dynamic_prob is not None:
        record.dynamic = bool(rng.random() < proposal.dynamic_prob)
    if proposal.roundtrip_prob is not None:
        record.roundtrip = bool(rng.random() < proposal.roundtrip_prob)
    return record


@dataclass
class Trace:
    """What a simulated campaign did, one entry per test; readers average over tests [lo, hi)."""

    op_names: tuple[str, ...]
    bins_k: int
    proposals: list[Proposal] = field(default_factory=list)
    interesting: list[bool] = field(default_factory=list)
    added: list[int] = field(default_factory=list)  # new branches per test
    ops: list[frozenset[str]] = field(default_factory=list)  # the ops each test's graph held

    def held(self, name: str, lo: int = 0, hi: int | None = None) -> float:
        """Share of tests whose graph held op `name`."""
        return float(np.mean([name in ops for ops in self.ops[lo:hi]]))

    def op_prob(self, name: str, lo: int = 0, hi: int | None = None) -> float:
        """Mean per-insertion probability of op `name`."""
        i = self.op_names.index(name)
        return float(np.mean([_normalized(p.op_weights, self.op_names)[i] for p in self.proposals[lo:hi]]))

    def forward_prob(self, lo: int = 0, hi: int | None = None) -> float:
        return float(np.mean([p.forward_prob for p in self.proposals[lo:hi]]))

    def bin_prob(self, kind: AttrKind, index: int, lo: int = 0, hi: int | None = None) -> float:
        """Mean probability of the bin at `index` of the generator's weight list for `kind`."""
        k = n_bins(kind, self.bins_k)
        out = []
        for p in self.proposals[lo:hi]:
            w = (p.bin_weights or {}).get(kind.value)
            out.append(1.0 / k if w is None else w[index] / sum(w))
        return float(np.mean(out))

    def opset_prob(self, opset: int, lo: int = 0, hi: int | None = None) -> float:
        """Mean probability of exporting at `opset` (0 for proposals without opset weights)."""
        out = []
        for p in self.proposals[lo:hi]:
            w = p.opset_weights or {}
            out.append(w.get(opset, 0.0) / sum(w.values()) if w else 0.0)
        return float(np.mean(out))

    def dynamic_prob(self, lo: int = 0, hi: int | None = None) -> float:
        return float(np.mean([p.dynamic_prob or 0.0 for p in self.proposals[lo:hi]]))

    def roundtrip_prob(self, lo: int = 0, hi: int | None = None) -> float:
        return float(np.mean([p.roundtrip_prob or 0.0 for p in self.proposals[lo:hi]]))

    def rate(self, lo: int = 0, hi: int | None = None) -> float:
        """Share of interesting tests."""
        return float(np.mean(self.interesting[lo:hi]))


class SharesOnly(Scheduler):
    """The scheduler without its pick of a fresh graph's first op (every op drawn by the shares):
    what the pick adds, measured by the "fit" scenario and its test."""

    def propose(self) -> Proposal:
        return dataclasses.replace(super().propose(), first_op=None)


def run(scheduler: Scheduler, rule: Rule, tests: int, seed: int, fit: Mapping[str, float] | None = None) -> Trace:
    """Propose, synthesize a record, reward it by `rule` (a new branch or nothing), observe; `tests` times.
    `fit`: per op, the chance that a try after the first goes in (`synthetic_record`)."""

    def novelty(record: GenRecord, t: int, rng: np.random.Generator) -> Novelty:
        return Novelty(int(rng.random() < rule(record, t)), 0)

    return run_novelty(scheduler, novelty, tests, seed, fit)


def run_novelty(
    scheduler: Scheduler, rule: NoveltyRule, tests: int, seed: int, fit: Mapping[str, float] | None = None
) -> Trace:
    """As `run`, with `rule` saying what each test adds."""
    rng = np.random.default_rng(seed)
    trace = Trace(scheduler.op_names, scheduler.bins_k)
    for t in range(tests):
        proposal = scheduler.propose()
        record = synthetic_record(proposal, scheduler.op_names, rng, scheduler.bins_k, fit=fit)
        novelty = rule(record, t, rng)
        scheduler.observe(proposal, record, novelty)
        trace.proposals.append(proposal)
        trace.interesting.append(novelty.interesting)
        trace.added.append(novelty.new_branches)
        trace.ops.append(frozenset(record.ops))
    return trace


def _normalized(weights: dict | None, names: Sequence) -> np.ndarray:
    w = np.array([1.0 if weights is None else weights.get(n, 1.0) for n in names])
    return w / w.sum()
