"""Hunt exceptions that escape the graph generators as anything but their expected errors.

Drives the generators over many seeds with the flags a campaign can set (opsets 11-20,
dynamic and round-trip shares of 0.5, 1..30 nodes, binning on and off, the feedback
scheduler's proposals, growth from a recorded prefix, mutation where available, the
GraphFuzzer and LEMON baselines) and, on every `--prepare-every`-th graph, runs what a
worker does with it (value search, torch module, ONNX export). Prints, per flag set, the
counts of each outcome; an escape is counted under its exception type and innermost
nnsmith_cov frame. Each escape is also written as one JSON line (`--escapes`) holding what
re-runs it: `--replay FILE` runs those lines again.

    nice .venv/bin/python scripts/hunt_generator_errors.py --seeds 2000 --escapes /tmp/escapes.jsonl
    .venv/bin/python scripts/hunt_generator_errors.py --replay /tmp/escapes.jsonl

Expected outcomes: generation `GenerationError` (and `ReplayDivergence` when growing a
prefix); export `ExportError`; a value search that finds no values. Everything else escapes.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnsmith_cov.abstract.choice import ReplayDivergence
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.baselines import generate_with
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback.scheduler import Proposal, Scheduler
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError, GenRecord, generate
from nnsmith_cov.ops import select_ops

FLAG_SETS = ("nnsmith", "scheduler", "grow", "mutate", "graphfuzzer", "lemon")
CAMPAIGN_OPSETS = tuple(range(11, 21))
MAX_NODES = 30
EXPECTED_GEN = (GenerationError, ReplayDivergence)


@dataclass
class Case:
    """One generation to try: everything that re-runs it (JSON-able)."""

    flags: str
    seed: int
    nodes: int
    binning: bool
    proposal: dict[str, Any] | None = None  # a scheduler's proposal (Proposal.to_json)
    parent_seed: int | None = None  # grow / mutate: the parent graph's seed (made with `nodes`)
    grow_nodes: int | None = None  # grow: the grown graph's node count
    mutation: str | None = None  # mutate: the operator

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Tally:
    """Outcomes of one flag set."""

    runs: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    escapes: collections.Counter[str] = field(default_factory=collections.Counter)
    first: dict[str, int] = field(default_factory=dict)  # escape signature -> its first seed


# Attributes Z3 first set beyond +-ATTR_LIMIT, solved again within it ("Op.attr" -> count).
WIDE: collections.Counter[str] = collections.Counter()


# The first lines of the export errors met (expected, but worth a look: "ours" or PyTorch's?).
EXPORT_ERRORS: collections.Counter[str] = collections.Counter()


def count_wide_attrs() -> None:
    """Count what `OpSpec.wide_attrs` finds (the models the attribute limit had to fix)."""
    original = OpSpec.wide_attrs

    def counted(self: OpSpec, model: Any) -> list[str]:
        found = original(self, model)
        WIDE.update(f"{self.name()}.{name}" for name in found)
        return found

    OpSpec.wide_attrs = counted  # type: ignore[method-assign]


def innermost(e: BaseException) -> str:
    """The innermost frame of the traceback inside nnsmith_cov (else the innermost one)."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "/nnsmith_cov/" in f.filename] or frames
    if not ours:
        return "?"
    f = ours[-1]
    return f"{f.filename.split('/nnsmith_cov/')[-1]}:{f.lineno} {f.name}"


def base_config(ops: tuple, nodes: int, binning: bool) -> GenConfig:
    return GenConfig(
        nodes=nodes,
        ops=ops,
        binning=binning,
        opsets=CAMPAIGN_OPSETS,
        dynamic_prob=0.5,
        roundtrip_prob=0.5,
    )


def make_case(flags: str, seed: int, scheduler: Scheduler | None) -> Case:
    """The case of `seed` under `flags`: its knobs drawn from the seed alone (the proposal
    from `scheduler`, which carries its own state)."""
    rng = random.Random(f"hunt/{flags}/{seed}")
    case = Case(flags, seed, rng.randint(1, MAX_NODES), rng.random() < 0.5)
    if scheduler is not None:
        case.proposal = scheduler.propose().to_json()
    if flags in ("grow", "mutate"):
        case.parent_seed = rng.getrandbits(62)
        case.nodes = rng.randint(1, MAX_NODES // 2)
        case.grow_nodes = case.nodes + max(1, rng.randint(1, MAX_NODES) // 2)
    if flags == "mutate":
        from nnsmith_cov.feedback import mutate

        case.mutation = rng.choice(mutate.MUTATIONS)
    return case


def generate_case(case: Case, ops: tuple) -> Generated | None:
    """The graph of `case`; None when the case does not apply (a parent that failed, a
    mutation that does not fit). Raises what the generators raise."""
    cfg = base_config(ops, case.nodes, case.binning)
    if case.proposal is not None:
        cfg = Scheduler.apply(Proposal.from_json(case.proposal), cfg)
    if case.flags in ("nnsmith", "scheduler", "graphfuzzer", "lemon"):
        name = "nnsmith" if case.flags == "scheduler" else case.flags
        return generate_with(name, cfg, case.seed)
    assert case.parent_seed is not None and case.grow_nodes is not None
    try:
        parent = generate(cfg, case.parent_seed)
    except GenerationError:
        return None
    prefix = parent.record.draws[: parent.record.insert_draws]
    if case.flags == "grow":  # as the fuzz loop's _grow
        return generate(dataclasses.replace(cfg, nodes=case.grow_nodes), case.seed, prefix=prefix)
    from nnsmith_cov.corpus.seeds import Seed
    from nnsmith_cov.feedback import mutate

    rec = parent.record
    seed = Seed(0, list(prefix), len(rec.ops), tuple(rec.draws), getattr(rec, "try_ok", ""))
    return mutate.breed(str(case.mutation), seed, cfg, case.seed, max_nodes=4 * MAX_NODES)


def prepare(gen: Generated, seed: int, search: dict[str, Any]) -> str:
    """What a worker does with a graph: value search, then the module and its ONNX export.
    Returns the expected outcome's name; raises anything else."""
    from nnsmith_cov.materialize.model_dir import materialize_and_export
    from nnsmith_cov.materialize.onnx_export import ExportError
    from nnsmith_cov.search.gradient import search_values

    found = search_values(gen.graph, seed, **search)
    if not found.ok:
        return "no-values"
    try:
        materialize_and_export(gen.graph, found.values)
    except ExportError as e:
        EXPORT_ERRORS[(str(e).strip().splitlines() or [""])[0][:100]] += 1
        return "ExportError"
    return "exported"


def run_case(
    case: Case, ops: tuple, prepare_it: bool, search: dict[str, Any]
) -> tuple[str, BaseException | None, Generated | None]:
    """(outcome, escaped exception or None, graph) of one case."""
    try:
        gen = generate_case(case, ops)
    except EXPECTED_GEN as e:
        return type(e).__name__, None, None
    except Exception as e:
        return "escape:generate", e, None
    if gen is None:
        return "not-applicable", None, None
    if not prepare_it:
        return "generated", None, gen
    try:
        return prepare(gen, case.seed, search), None, gen
    except Exception as e:
        return "escape:prepare", e, gen


def fake_novelty(rng: random.Random, gen: Generated | None, hot: set[str]) -> Novelty | None:
    """A made-up reward that favours a few ops, so the scheduler's proposals drift far from
    uniform as in a campaign."""
    if gen is None:
        return None
    hits = sum(op in hot for op in gen.record.ops)
    return Novelty(rng.randint(0, 3) * hits, rng.randint(0, 2))


def cases(flags: str, start: int, count: int, ops: tuple) -> Iterator[tuple[Case, Callable[[Generated | None], None]]]:
    """The cases of a flag set, each with a callback that feeds its graph back (scheduler)."""
    scheduler = None
    rng = random.Random(f"hunt/{flags}/feedback/{start}")
    hot: set[str] = set()
    if flags == "scheduler":
        names = [o.name() for o in ops]
        hot = set(rng.sample(names, 8))
        scheduler = Scheduler(names, 15, 7, start, feedback=True, opsets=CAMPAIGN_OPSETS, dynamic=True, roundtrip=True)
    for seed in range(start, start + count):
        case = make_case(flags, seed, scheduler)

        def feed(gen: Generated | None, case: Case = case) -> None:
            if scheduler is not None and case.proposal is not None:
                record = gen.record if gen is not None else GenRecord(case.seed)
                scheduler.observe(Proposal.from_json(case.proposal), record, fake_novelty(rng, gen, hot))

        yield case, feed


def report(tallies: dict[str, Tally], elapsed: float, out=sys.stdout) -> None:
    print(f"--- {elapsed:.0f} s", file=out)
    for flags, t in tallies.items():
        shown = ", ".join(f"{k} {v}" for k, v in sorted(t.outcomes.items()))
        print(f"{flags}: {t.runs} seeds: {shown}", file=out)
        for sig, n in t.escapes.most_common():
            print(f"    {n:5d}  {sig}  (first seed {t.first[sig]})", file=out)
    if WIDE:
        print("attributes solved again within the limit:", dict(WIDE.most_common()), file=out)
    for message, n in EXPORT_ERRORS.most_common():
        print(f"    {n:5d}  ExportError: {message}", file=out)
    out.flush()


def hunt(args: argparse.Namespace, ops: tuple) -> dict[str, Tally]:
    tallies = {f: Tally() for f in args.flags}
    escapes = args.escapes.open("a") if args.escapes else None
    search = {"method": "gradient", "max_iters": args.search_iters, "budget_ms": args.search_ms}
    t0 = time.monotonic()
    streams = {f: cases(f, args.start, args.seeds, ops) for f in args.flags}
    # Round robin over the flag sets, so that a run cut short has covered each of them.
    for i in range(args.seeds):
        for flags, stream in streams.items():
            case, feed = next(stream)
            wide = WIDE.total()
            outcome, err, gen = run_case(case, ops, args.prepare_every > 0 and i % args.prepare_every == 0, search)
            feed(gen)
            t = tallies[flags]
            t.runs += 1
            t.outcomes[outcome] += 1
            t.outcomes["(wide attribute solved again)"] += WIDE.total() > wide
            if err is not None:
                sig = f"{outcome.split(':')[1]}: {type(err).__name__} at {innermost(err)}"
                t.escapes[sig] += 1
                t.first.setdefault(sig, case.seed)
                if escapes is not None:
                    line = {"case": case.to_json(), "signature": sig, "message": str(err)[:300]}
                    escapes.write(json.dumps(line) + "\n")
                    escapes.flush()
        if args.report_every and (i + 1) % args.report_every == 0:
            report(tallies, time.monotonic() - t0)
    report(tallies, time.monotonic() - t0)
    if escapes is not None:
        escapes.close()
    return tallies


def replay(path: Path, ops: tuple, search: dict[str, Any]) -> int:
    """Re-run recorded escapes; prints what each gives now. Exit status 1 if any still escapes."""
    still = 0
    for n, text in enumerate(path.read_text().splitlines(), 1):
        try:
            obj = json.loads(text)
            case = Case(**obj["case"])
        except (ValueError, TypeError, KeyError) as e:
            print(f"{path}:{n}: not an escape record ({e})", file=sys.stderr)
            return 2
        outcome, err, _ = run_case(case, ops, obj["signature"].startswith("prepare"), search)
        now = f"{type(err).__name__} at {innermost(err)}: {str(err)[:120]}" if err is not None else outcome
        still += err is not None
        print(f"{case.flags} seed {case.seed}: was {obj['signature']}; now {now}")
    return 1 if still else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=1000, help="seeds per flag set")
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument("--flags", nargs="+", choices=FLAG_SETS, default=list(FLAG_SETS), help="flag sets to run")
    p.add_argument("--ops", nargs="+", help="operators (default: all)")
    p.add_argument("--prepare-every", type=int, default=10, help="search and export every Nth graph (0: never)")
    p.add_argument("--search-iters", type=int, default=64)
    p.add_argument("--search-ms", type=float, default=2000.0)
    p.add_argument("--report-every", type=int, default=100, help="print the counts every N seeds (0: at the end)")
    p.add_argument("--escapes", type=Path, help="append each escape as a JSON line to this file")
    p.add_argument("--replay", type=Path, help="re-run the escapes recorded in this file")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.start < 0 or args.prepare_every < 0:
        p.error("--seeds must be positive, --start and --prepare-every non-negative")
    try:
        ops = select_ops(args.ops)
    except ValueError as e:
        p.error(str(e))
    if "mutate" in args.flags:
        try:
            import nnsmith_cov.feedback.mutate  # noqa: F401
        except ImportError:
            print("mutation is not available here: skipping that flag set", file=sys.stderr)
            args.flags = [f for f in args.flags if f != "mutate"]
    if args.replay is not None:
        if not args.replay.is_file():
            p.error(f"{args.replay}: no such file")
        return replay(
            args.replay, ops, {"method": "gradient", "max_iters": args.search_iters, "budget_ms": args.search_ms}
        )
    count_wide_attrs()
    tallies = hunt(args, ops)
    return 1 if any(t.escapes for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
