"""Mutation of kept tests on their recorded draws (the Hypothesis idea, used as AFL uses its queue).

A corpus entry is its draws. A mutant edits a few of them and the generator replays the edited
list leniently (`ChoiceSource(lenient=True)`): a draw that no longer fits its call is drawn fresh
from the same seed, so Z3 still decides shapes and attributes and every mutant is a valid graph
or a clean `GenerationError`. The draws are read as a layout:

- *head*: before the first ``op`` draw (the Z3 seed, the opset);
- *tries*: one per insertion try, each starting at its ``op`` draw (the first one also holds the
  first placeholder's rank and dtype), accepted or rejected as `GenRecord.try_ok` says;
- *tail*: after the insertion loop (bins, their order, weights vs inputs, the export plan).

The operators (``grow`` and ``extend`` are the arms of the scheduler's ``mutation`` group):

- ``op_swap``: one try's ``op`` draw is drawn again (by the proposal's op weights, another op);
- ``attr``: one attribute draw is drawn again: a bin, or an op's own setup draw (an axis, a kernel);
- ``dtype_rank``: one signature, rank or dtype draw is drawn again;
- ``insert``: 1-3 fresh tries go in between two tries (not only at the end);
- ``delete``: 1-3 consecutive tries (never the first, which makes the first placeholder) go;
- ``splice``: the tries from a point on are another entry's tail (and its bins);
- ``extend``: 1-2 fresh tries go right after the entry's *frontier* (`frontier`: the op its new
  branches most likely owe), in the frontier's direction, each reading the newest value (the
  frontier's output, then the op before it): the parent's graph stays whole and grows there.

Why ``extend``: the other operators keep the parent's draws but not what they meant. A try
after an edit reads its input by position among the values that fit, so an op put in anywhere
but at the end re-wires the ops after it; growing appends ops that read any value. On the
chain fake (`scripts/bench_chain.py`) a child of the entry holding Tanh-Sin-Neg made the whole
chain in 1 of 51 tries, barely better than a fresh graph, so steering toward such entries could
not pay. ``extend`` puts the next op on the op that paid: a child of an entry made by an
``extend`` (its frontier known) reaches the next step whenever it draws the right op (8 of 40
children against 2 of 40 grown, tests/test_mutation_extend.py). The other operators are no
longer the scheduler's arms: with them beside ``extend``, the bandit, rewarded once in tens of
tests, spread the seeded tests over eight arms and the campaign found the chain in 5 of 12
seeds within 150 tests (9 of 12 with extend's prior weighted 4x, 5 of 12 with 16x); with
``grow`` and ``extend`` alone in 10 of 12, and 12 of 12 within 300 (off-var: 9 and 11;
scripts/bench_chain.py has the tables).

A `Mutation` names the edit exactly (positions, the donor), so (parent draws, mutation, seed)
replays the same graph: `apply` is pure and the generator is deterministic.
"""

from __future__ import annotations

import dataclasses
import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nnsmith_cov.abstract.choice import ReplayDivergence, Replayed, redraw
from nnsmith_cov.corpus.records import is_int
from nnsmith_cov.corpus.seeds import Seed
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError, generate

Draw = tuple[str, Replayed]

GROW = "grow"  # the parent's insertion draws with more tries at the end (the loop's `_grow`)
MUTATIONS = ("op_swap", "attr", "dtype_rank", "insert", "delete", "splice", "extend")
ARMS = (GROW, *MUTATIONS)  # what a proposal may name
# What a campaign's scheduler draws among: the two ways of changing a parent that keep its graph
# whole (see the module's docstring). The other operators stay for the children they made
# (replay, repro) and for callers that ask for them.
SCHEDULED = (GROW, "extend")
MAX_STRETCH = 3  # tries inserted or deleted at once
MAX_EXTEND = 2  # tries an ``extend`` puts after the frontier

# Draws that shape the graph rather than set an attribute: never picked by ``attr``.
_STRUCTURE = frozenset(
    {"op", "forward", "fwd.sig", "fwd.input", "fwd.param_rank", "bwd.placeholder", "init.rank", "init.dtype"}
    | {"z3.seed", "export.opset", "bin.order", "placeholder.weight", "export.dynamic", "export.dynamic_dim"}
    | {"export.dim", "export.roundtrip", "bin_lo", "bin_hi"}  # a sub-range of a bin rarely changes the value
)
_TYPING = frozenset({"fwd.sig", "fwd.param_rank", "init.rank", "init.dtype"})


class MutationError(ValueError):
    """A stored mutation does not fit the draws it is applied to."""


@dataclass(frozen=True)
class Mutation:
    """One edit of a parent's draws. `at`: a draw index (op_swap, attr, dtype_rank) or a try
    index (insert, delete, splice); `count`: tries inserted or deleted; `donor`, `donor_at`: the
    entry whose tries from `donor_at` on replace the parent's from `at` on (splice)."""

    kind: str
    at: int
    count: int = 0
    donor: int | None = None
    donor_at: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(obj: Any) -> Mutation:
        names = {f.name for f in dataclasses.fields(Mutation)}
        if not isinstance(obj, dict) or set(obj) != names or obj["kind"] not in MUTATIONS:
            raise MutationError("mutation: unexpected fields or kind")
        ints = [obj[k] for k in ("at", "count", "donor_at")] + ([] if obj["donor"] is None else [obj["donor"]])
        if not all(is_int(x) and x >= 0 for x in ints):
            raise MutationError("mutation: positions must be non-negative integers")
        return Mutation(**obj)


@dataclass(frozen=True)
class Layout:
    head: list[Draw]
    tries: list[list[Draw]]
    ok: list[bool]  # per try: it inserted an operator
    tail: list[Draw]

    def ops(self, tries: Sequence[int]) -> int:
        return sum(self.ok[i] for i in tries)


def layout(seed: Seed) -> Layout | None:
    """The parent's draws split into head, tries and tail; None without an ``op`` draw."""
    draws = list(seed.draws) or list(seed.prefix)
    cut = len(seed.prefix)
    starts = [i for i, (label, _) in enumerate(draws[:cut]) if label == "op"]
    if not starts:
        return None
    tries = [draws[a:b] for a, b in zip(starts, [*starts[1:], cut])]
    ok = [i < len(seed.try_ok) and seed.try_ok[i] == "1" for i in range(len(tries))]
    if not seed.try_ok:  # an entry from before try_ok was recorded: spread its ops over the tries
        ok = [i < seed.n_ops for i in range(len(tries))]
    return Layout(draws[: starts[0]], tries, ok, draws[cut:])


def frontier(seed: Seed) -> list[int]:
    """The accepted tries whose operators most likely made the entry interesting, where an
    ``extend`` grows it: those its own edit of its parent made (``insert``/``extend``: the
    tries it put in; a changed draw: its try; ``delete``: the one before the cut), the last
    third of its ops when grown (the new ones come at the end) or spliced (the donor's tail),
    and all of them for a fresh entry (nothing tells which op paid) or an edit of a head or
    tail draw (a bin names no try)."""
    lay = layout(seed)
    if lay is None:
        return []
    accepted = [i for i in range(len(lay.tries)) if lay.ok[i]]
    if seed.parent is None:
        return accepted
    mutation = None
    if seed.mutation is not None:
        try:
            mutation = Mutation.from_json(seed.mutation)
        except MutationError:
            return accepted
    if mutation is None or mutation.kind == "splice":
        return accepted[-max(1, -(-len(accepted) // 3)) :]
    lo, hi = 0, len(lay.tries)
    if mutation.kind in ("insert", "extend"):
        lo, hi = mutation.at, mutation.at + mutation.count
    elif mutation.kind == "delete":
        hi = mutation.at
    else:  # a changed draw: the try it lies in, if any
        draws = list(seed.draws) or list(seed.prefix)
        starts = [i for i, (label, _) in enumerate(draws[: len(seed.prefix)]) if label == "op"]
        if not starts[0] <= mutation.at < len(seed.prefix):
            return accepted
        lo = bisect_right(starts, mutation.at) - 1
        hi = lo + 1
    found = [i for i in accepted if lo <= i < hi]
    return found[-1:] if mutation.kind == "delete" else found or accepted


def plan(kind: str, parent: Seed, rng: random.Random, donor: Seed | None = None) -> Mutation | None:
    """A random mutation of `kind` for `parent`; None when it does not apply (nothing to edit)."""
    lay = layout(parent)
    if lay is None:
        return None
    n = len(lay.tries)
    if kind in ("op_swap", "attr", "dtype_rank"):
        draws = list(parent.draws) or list(parent.prefix)
        if kind == "op_swap":
            spots = [i for i, (label, _) in enumerate(draws[: len(parent.prefix)]) if label == "op"]
        elif kind == "attr":
            spots = [i for i, (label, _) in enumerate(draws) if label not in _STRUCTURE]
        else:
            spots = [i for i, (label, _) in enumerate(draws) if label in _TYPING or label.endswith("rank")]
        return Mutation(kind, rng.choice(spots)) if spots else None
    if kind == "extend":
        spots = frontier(parent)
        return Mutation(kind, rng.choice(spots) + 1, rng.randint(1, MAX_EXTEND)) if spots else None
    if kind == "insert":
        at = rng.randint(1, n - 1) if n > 1 else n
        return Mutation(kind, at, rng.randint(1, MAX_STRETCH))
    if kind == "delete":
        if n < 2:
            return None
        at = rng.randint(1, n - 1)
        return Mutation(kind, at, rng.randint(1, min(MAX_STRETCH, n - at)))
    if kind == "splice":
        other = layout(donor) if donor is not None else None
        if other is None or donor is None or len(other.tries) < 2:
            return None
        return Mutation(kind, rng.randint(1, n), donor=donor.test_id, donor_at=rng.randint(1, len(other.tries) - 1))
    raise ValueError(f"unknown mutation {kind!r}")


def apply(mutation: Mutation, parent: Seed, donor: Seed | None = None) -> tuple[list[Draw], int]:
    """The mutated draws (None: draw fresh) and the operator count to ask the generator for."""
    lay = layout(parent)
    if lay is None:
        raise MutationError("the parent has no insertion draws")
    n, kind, at = len(lay.tries), mutation.kind, mutation.at
    nodes = parent.n_ops
    if kind in ("op_swap", "attr", "dtype_rank"):
        draws: list[Draw] = list(parent.draws) or list(parent.prefix)
        if at >= len(draws):
            raise MutationError(f"mutation at draw {at} of {len(draws)}")
        label, value = draws[at]
        # drawn again (an operator by the op weights), another value wherever the call has one
        draws[at] = (label, redraw(value) if isinstance(value, int | float) else None)
        return draws, max(nodes, 1)
    if kind == "insert":
        if not 1 <= at <= n or mutation.count < 1:
            raise MutationError("insert outside the parent's tries")
        fresh: list[Draw] = [("op", None), ("forward", None)] * mutation.count
        body = [d for t in lay.tries[:at] for d in t] + fresh + [d for t in lay.tries[at:] for d in t]
        return lay.head + body + lay.tail, nodes + mutation.count
    if kind == "extend":
        if not 1 <= at <= n or mutation.count < 1:
            raise MutationError("extend outside the parent's tries")
        # The frontier's direction; its newest value (-1: counted from the end) is the new op's
        # input (forward: the frontier's output) or the placeholder it produces (backward: the
        # frontier's newest input), so each new op sits on the frontier and the next on it.
        forward = next((v for label, v in lay.tries[at - 1] if label == "forward"), 1)
        hook: list[Draw] = [("fwd.sig", None), ("fwd.input", -1)] if forward else [("bwd.placeholder", -1)]
        fresh = [("op", None), ("forward", forward), *hook] * mutation.count
        body = [d for t in lay.tries[:at] for d in t] + fresh + [d for t in lay.tries[at:] for d in t]
        return lay.head + body + lay.tail, nodes + mutation.count
    if kind == "delete":
        end = at + mutation.count
        if not 1 <= at < end <= n:
            raise MutationError("delete outside the parent's tries")
        kept = [i for i in range(n) if not at <= i < end]
        body = [d for i in kept for d in lay.tries[i]]
        return lay.head + body + lay.tail, max(1, nodes - lay.ops(range(at, end)))
    if kind == "splice":
        other = layout(donor) if donor is not None else None
        if other is None or donor is None or donor.test_id != mutation.donor:
            raise MutationError(f"splice needs entry {mutation.donor} as its donor")
        if not 1 <= at <= n or not 1 <= mutation.donor_at < len(other.tries):
            raise MutationError("splice outside the tries")
        body = [d for t in lay.tries[:at] for d in t] + [d for t in other.tries[mutation.donor_at :] for d in t]
        count = lay.ops(range(at)) + other.ops(range(mutation.donor_at, len(other.tries)))
        return lay.head + body + other.tail, max(1, count)
    raise MutationError(f"unknown mutation {kind!r}")


@dataclass(frozen=True)
class Call:
    """One call of the generator for a seeded test: what an internal error's record keeps."""

    cfg: GenConfig
    prefix: list[Draw]
    lenient: bool  # a mutant: the edited draws are replayed leniently
    parent: int
    mutation: Mutation | None  # None: grown
    min_ops: int = 0  # a grown graph must hold more operators than this, else it is no child


def prepare(
    kind: str | None, parent: Seed, cfg: GenConfig, seed: int, donor: Seed | None = None, max_nodes: int = 0
) -> Call | None:
    """The generator call for `parent` grown (`kind` None or GROW: `cfg.nodes // 2` more ops
    after its insertion draws, replayed strictly) or mutated by `kind` (its edit drawn from
    `seed`), within `max_nodes` operators (0: no cap; a grown graph then takes the ops that
    fit); None when it does not apply."""
    if kind in (None, GROW):
        nodes = parent.n_ops + max(1, cfg.nodes // 2)
        if max_nodes > 0:
            nodes = min(nodes, max_nodes)
        if nodes <= parent.n_ops:
            return None
        return Call(
            dataclasses.replace(cfg, nodes=nodes), list(parent.prefix), False, parent.test_id, None, parent.n_ops
        )
    mutation = plan(kind, parent, random.Random(f"mutate/{seed}"), donor)
    return None if mutation is None else mutation_call(mutation, parent, cfg, donor, max_nodes)


def mutation_call(
    mutation: Mutation, parent: Seed, cfg: GenConfig, donor: Seed | None = None, max_nodes: int = 0
) -> Call:
    draws, nodes = apply(mutation, parent, donor)
    if max_nodes > 0:
        nodes = min(nodes, max_nodes)
    return Call(dataclasses.replace(cfg, nodes=nodes), draws, True, parent.test_id, mutation)


def make(call: Call, seed: int) -> Generated | None:
    """Run the call; the child names its parent and mutation. None for a grown graph that did
    not grow; raises GenerationError (and ReplayDivergence, growing) like `generate`."""
    gen = generate(call.cfg, seed, prefix=call.prefix, lenient=call.lenient)
    gen.record.parent = call.parent
    gen.record.mutation = None if call.mutation is None else call.mutation.to_json()
    return gen if len(gen.record.ops) > call.min_ops else None


def replay(
    mutation: Mutation, parent: Seed, cfg: GenConfig, seed: int, donor: Seed | None = None, max_nodes: int = 0
) -> Generated:
    """The mutant's graph again: the parent's draws edited by `mutation`, replayed leniently
    with `seed`; raises GenerationError when no graph can be made."""
    gen = make(mutation_call(mutation, parent, cfg, donor, max_nodes), seed)
    assert gen is not None  # a mutant has no minimum size
    return gen


def breed(
    kind: str, parent: Seed, cfg: GenConfig, seed: int, donor: Seed | None = None, max_nodes: int = 0
) -> Generated | None:
    """A mutant of `parent` by the operator `kind`, its edit drawn from `seed`; None when the
    operator does not apply to this parent. Raises GenerationError like `generate`."""
    call = prepare(kind, parent, cfg, seed, donor, max_nodes)
    return None if call is None else make(call, seed)


def child(
    kind: str | None, parent: Seed, cfg: GenConfig, seed: int, donor: Seed | None = None, max_nodes: int = 0
) -> Generated | None:
    """A seeded test as the campaign makes it: `parent` mutated by `kind`, or grown where `kind`
    is None or GROW or the mutation does not apply or fails; None when neither gives a graph
    (the caller then makes a fresh one)."""
    for k in dict.fromkeys([kind or GROW, GROW]):
        call = prepare(k, parent, cfg, seed, donor, max_nodes)
        if call is None:
            continue
        try:
            gen = make(call, seed)
        except (GenerationError, ReplayDivergence):
            continue
        if gen is not None:
            return gen
    return None
