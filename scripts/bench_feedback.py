#!/usr/bin/env python3
"""Feedback on vs off at equal wall time, several seeds, one campaign per core.

Runs one campaign per (seed, mode), `--jobs` at a time (one worker and one core each,
same time budget), then per seed reads the corpora and prints each timeline, the table of
total, pass-only and unique branches (reached by that seed's one mode only), and the first
mode's ratios to each other mode: total branches, unique branches, and when the first mode
reached the other's final coverage as a fraction of the run (issue 27's goals: on / off-var
>= 1.15x total, >= 3x unique, at most 0.5 of the time). Writes into --out:
summary.csv / summary.json / summary.md (those ratios, per seed and their geometric mean;
in the .json and .md also the headroom: the pool of branches any campaign reached, every seed
and mode together, and the total ratio the first mode would have had it reached the whole pool;
each mode's seeds compared with each other as the modes are, the ratios chance alone gives, and
where each mode's unique branches came from: the corpus entries that first reached them, the
largest of those finds, the unique ratio without each side's five largest, and how the tests
that reached them were made: fresh, grown from a kept test or mutated, beside each origin's
share of the corpus, its entries' milliseconds each and new branches per second), and with
two seeds or more each pair's A12 and Mann-Whitney p over the seeds' final totals
(FuzzBench's yardsticks; two seeds can never reach p < 0.05), coverage-time.png (every mode of
every seed), and per seed `nnsmith-cov report`'s table and figures (seed-S/report).

Modes: `on` (feedback with mutation of kept tests), `off` (plain NNSmith: opset 20, static
shapes, no IR text round trip), `off-var` (feedback off drawing the export choices the
scheduler has arms for uniformly: opsets 11-20, symbolic dims and the round trip each in half
the graphs, and the graph size among the size arm's choices (`--vary-size`), never mutating),
`on-nomut` (feedback, kept tests only grown at the end), `on-grow20` (`on` with children of
kept tests capped at 20 operators, `--grow-max 20`: 2 x the default size), `on-learn` (`on` with the
cap an arm the scheduler learns between 20 and 40, `--grow-max 20,40`), `on-nohedge` (`on` with
every test steered or grown, `--hedge 0`: `on` before its hedge). The committed TVM run of
docs/bench-feedback-tvm-30min/ predates `--vary-size`: its off-var kept the configured size
(on the fake chain, scripts/bench_chain.py, drawing the size alone took off-var from 1 to 9 of
12 seeds).

    python scripts/bench_feedback.py --modes on,off-var,on-nomut --seeds 1,2 --jobs 6 --time 30m
    python scripts/bench_feedback.py --backends ort --collector binary --seeds 1,2 --jobs 6
    python scripts/bench_feedback.py --reuse --out out/bench-feedback    # only the tables again
    python scripts/bench_feedback.py --fill --out out/lever    # only the campaigns out/lever lacks

`--fill` lets a lever be measured against a baseline run earlier: copy the earlier seed-S/MODE
folders (and their .log files) into --out, and only the other modes run. The baseline's runs
then come from another stretch of the machine's time: say so when reporting.

It needs no TVM for `--backends ort`; the campaigns run with this script's Python.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

# The `fuzz` flags of each mode.
MODES = {
    "on": ["--feedback", "on", "--mutation", "on"],
    "on-nomut": ["--feedback", "on", "--mutation", "off"],
    "on-grow20": ["--feedback", "on", "--mutation", "on", "--grow-max", "20"],
    "on-learn": ["--feedback", "on", "--mutation", "on", "--grow-max", "20,40"],
    "on-nohedge": ["--feedback", "on", "--mutation", "on", "--hedge", "0"],
    "off": ["--feedback", "off"],
    "off-var": ["--feedback", "off", "--opsets", "11-20", "--dynamic", "0.5", "--roundtrip", "0.5", "--vary-size"],
}
GOALS = {"total": 1.15, "unique": 3.0, "reach": 0.5}  # issue 27: on vs off-var


class BenchError(Exception):
    """Bad arguments or a failed campaign: one line for the user."""


@dataclass(frozen=True)
class Run:
    """What the ratios need of one campaign: its branches and its coverage over time."""

    covered: frozenset[str]
    times: Sequence[float]  # elapsed seconds after each new-coverage step
    branches: Sequence[int]  # branches covered by then
    tests: int = 0  # tests the campaign ran in its time (feedback's choices change their cost)


@dataclass(frozen=True)
class Ratio:
    """The first mode against another for one seed (None: undefined, e.g. nothing to divide by)."""

    seed: int
    first: str
    other: str
    total: float | None  # first's branches / other's
    unique: float | None  # branches only first reached / branches only other reached
    reach: float | None  # when first reached other's final coverage, as a share of other's run; None: never
    first_total: int
    other_total: int
    first_unique: int
    other_unique: int
    first_tests: int = 0
    other_tests: int = 0

    def met(self) -> dict[str, bool]:
        """Which of the issue's goals this pair meets."""
        return {
            "total": self.total is not None and self.total >= GOALS["total"],
            "unique": self.unique is not None and self.unique >= GOALS["unique"],
            "reach": self.reach is not None and self.reach <= GOALS["reach"],
        }


@dataclass(frozen=True)
class Headroom:
    """How far the first mode's total ratio could go on what the benchmark's campaigns reached.

    The pool is every branch any campaign of the benchmark reached (all seeds, all modes, the
    same time each): code these settings showed reachable in that time. Had the first mode
    reached the whole pool, its total ratio would be `ceiling`; a goal above it asks for code
    that no campaign, steered or not, reached."""

    seed: int
    first: str
    other: str
    pool: int
    first_share: float  # the first mode's branches / pool
    other_share: float
    ceiling: float | None  # pool / the other mode's branches


@dataclass(frozen=True)
class SeedSpread:
    """Two seeds of one mode compared as the first mode is with another: the ratios that
    chance alone gives (same settings, another seed), the yardstick for a pair's ratios."""

    mode: str
    seed_a: int
    seed_b: int
    total: float | None  # a's branches / b's
    unique: float | None  # branches only a reached / branches only b reached
    a_unique: int
    b_unique: int


@dataclass(frozen=True)
class Find:
    """One corpus entry that first reached some of a mode's unique branches."""

    branches: int  # unique branches this entry reached before any other entry of its campaign
    elapsed_s: float
    test: int
    status: str
    origin: str = "fresh"  # how its graph was made: fresh, grown from an entry, or a mutation's kind


@dataclass(frozen=True)
class Finds:
    """Where one mode's unique branches of one seed came from (`first_finds`).

    On native code a single test can reach hundreds of branches nothing else reaches (a new
    error path of the compiler, a kernel variant): then the unique column counts a few lucky
    tests, and its ratio says more about those draws than about steering. `top` is how many of
    the unique branches the TOP largest finds hold."""

    seed: int
    mode: str
    unique: int
    tests: int  # corpus entries that first reached at least one unique branch
    largest: Find | None
    top: int
    # per origin (`origin_of`): [tests run, corpus entries, unique branches they reached first,
    # the entries' milliseconds (generation and every stage), the new branches they added];
    # whether mutants earn their share of the campaign's tests in what only this mode reached,
    # and what a test of each origin costs and adds (why one mode runs fewer tests)
    origins: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Trimmed:
    """The unique ratio of a pair with each side's TOP largest finds left out."""

    seed: int
    first: str
    other: str
    unique: float | None
    first_rest: int
    other_rest: int


TOP = 5  # the largest finds left out of the trimmed unique ratio


@dataclass(frozen=True)
class AcrossSeeds:
    """A pair's final totals over all seeds, as FuzzBench compares fuzzers: the Vargha-Delaney
    A12 effect size (the chance that a campaign of the first mode ends above one of the other,
    ties half) and the two-sided Mann-Whitney U test's p-value. With n campaigns a side the
    smallest p the exact test can give is `min_p` (n = 2: 0.33): a table of two seeds can show
    an effect, never its significance."""

    first: str
    other: str
    seeds: int
    a12: float
    p: float
    min_p: float


def parse_seeds(text: str) -> list[int]:
    """ "1,2" or "1-3" (or a mix) to distinct non-negative seeds in order."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            span = range(int(lo), int(hi) + 1) if sep else [int(lo)]
        except ValueError:
            raise BenchError(f"--seeds: {part!r} is not a seed or a range like 1-3") from None
        seeds.extend(s for s in span if s not in seeds)
    if not seeds or any(s < 0 for s in seeds):
        raise BenchError("--seeds: give non-negative seeds, e.g. 1,2")
    return seeds


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",")]
    if len(modes) < 2 or len(set(modes)) != len(modes) or not set(modes) <= set(MODES):
        raise BenchError(f"--modes takes two or more different modes of {', '.join(MODES)}")
    return modes


def unique_sets(runs: Mapping[str, Run]) -> dict[str, frozenset[str]]:
    """Per mode, the branches no other mode of the seed reached (the Venn diagram's own regions)."""
    return {m: r.covered - frozenset().union(*(o.covered for k, o in runs.items() if k != m)) for m, r in runs.items()}


def ratios(seed: int, runs: Mapping[str, Run], first: str) -> list[Ratio]:
    """`first` against each other mode of one seed. Unique branches are those no other mode
    of this seed reached."""
    unique = {m: len(u) for m, u in unique_sets(runs).items()}
    a = runs[first]
    out = []
    for mode, b in runs.items():
        if mode == first:
            continue
        total = len(a.covered) / len(b.covered) if b.covered else None
        uniq = _over(unique[first], unique[mode])
        target = b.branches[-1] if b.branches else 0
        when = next((t for t, n in zip(a.times, a.branches) if n >= target), None)
        end = b.times[-1] if b.times else 0.0
        reach = when / end if when is not None and end > 0 else None
        out.append(
            Ratio(
                seed,
                first,
                mode,
                total,
                uniq,
                reach,
                len(a.covered),
                len(b.covered),
                unique[first],
                unique[mode],
                a.tests,
                b.tests,
            )
        )
    return out


def across_seeds(rows: Sequence[Ratio]) -> list[AcrossSeeds]:
    """Per pair, A12 and the Mann-Whitney U test over the seeds' final totals (two seeds or more)."""
    from scipy.stats import mannwhitneyu

    out = []
    for pair in dict.fromkeys((r.first, r.other) for r in rows):
        mine = [r for r in rows if (r.first, r.other) == pair]
        if len(mine) < 2:
            continue
        a, b = [r.first_total for r in mine], [r.other_total for r in mine]
        a12 = sum((x > y) + 0.5 * (x == y) for x in a for y in b) / (len(a) * len(b))
        p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)  # (scipy: exact for few seeds and no ties)
        least = 2 / math.comb(len(a) + len(b), len(a))  # the exact test's p when every first is above every other
        out.append(AcrossSeeds(*pair, len(mine), a12, p, least))
    return out


def _over(a: int, b: int) -> float | None:
    return a / b if b else (math.inf if a else None)


def headroom(per_seed: Mapping[int, Mapping[str, Run]], first: str) -> list[Headroom]:
    """Per seed and other mode: the pooled branches of every campaign and the ratio ceiling."""
    pool = len(frozenset().union(*(r.covered for runs in per_seed.values() for r in runs.values())))
    out = []
    for seed, runs in per_seed.items():
        a = len(runs[first].covered)
        for mode, r in runs.items():
            if mode == first:
                continue
            b = len(r.covered)
            shares = (a / pool, b / pool) if pool else (0.0, 0.0)
            out.append(Headroom(seed, first, mode, pool, *shares, pool / b if b else None))
    return out


def seed_spread(per_seed: Mapping[int, Mapping[str, Run]]) -> list[SeedSpread]:
    """Every pair of seeds of each mode, compared with each other."""
    seeds = list(per_seed)
    out = []
    for mode in dict.fromkeys(m for runs in per_seed.values() for m in runs):
        for i, sa in enumerate(seeds):
            for sb in seeds[i + 1 :]:
                if mode not in per_seed[sa] or mode not in per_seed[sb]:
                    continue
                a, b = per_seed[sa][mode].covered, per_seed[sb][mode].covered
                only_a, only_b = len(a - b), len(b - a)
                out.append(SeedSpread(mode, sa, sb, _over(len(a), len(b)), _over(only_a, only_b), only_a, only_b))
    return out


Entry = tuple[float, int, str, str, np.ndarray]  # elapsed, test id, status, origin, branch indices
ORIGIN_FIELDS = ("tests", "entries", "unique", "ms", "new")  # what `Finds.origins` holds per origin


def origin_of(parent: int | None, gen: Mapping[str, object]) -> str:
    """How a kept test's graph was made: "fresh", "uniform" (a fresh graph of the scheduler's
    hedge, drawn as without feedback), "grow" (its parent's draws with more tries at the end)
    or the kind of mutation of its parent's draws ("extend", ...)."""
    mutation = gen.get("mutation")
    if isinstance(mutation, dict) and isinstance(mutation.get("kind"), str):
        return mutation["kind"]
    if gen.get("hedged") is True:
        return "uniform"
    return "fresh" if parent is None else "grow"


def attribute(entries: Iterable[Entry], wanted: np.ndarray) -> list[Find]:
    """Each entry's share of the `wanted` branches (a boolean mask over the universe) that it
    reached first, entries taken in the order given (elapsed time); largest first."""
    wanted = wanted.copy()
    finds = []
    for elapsed, test, status, origin, index in entries:
        index = index[index < len(wanted)]
        new = index[wanted[index]]
        if len(new):
            wanted[new] = False
            finds.append(Find(len(new), elapsed, test, status, origin))
    return sorted(finds, key=lambda f: (-f.branches, f.elapsed_s))


def by_origin(finds: Sequence[Find], counts: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """Per origin, [tests run, corpus entries, unique branches first reached, the entries'
    milliseconds, their new branches] (`ORIGIN_FIELDS`); `counts` gives the campaign's tests,
    corpus entries, milliseconds and new branches by origin (an origin that found nothing unique
    still shows)."""
    out = {o: [int(c[0]), int(c[1]), 0, round(float(c[2]), 1), int(c[3])] for o, c in sorted(counts.items())}
    for f in finds:
        out.setdefault(f.origin, [0, 0, 0, 0.0, 0])[2] += f.branches
    return out


def entry_cost(timings: Mapping[str, float], gen: Mapping[str, object]) -> float:
    """A kept test's milliseconds: its generation and every stage it ran (search, export, backends)."""
    gen_ms = gen.get("gen_ms")
    return float(sum(timings.values())) + (float(gen_ms) if isinstance(gen_ms, (int, float)) else 0.0)


def tests_by_origin(tests_run: int, children: object, hedged: object = None) -> dict[str, int]:
    """The campaign's tests per origin: the scheduler's children per arm (`Scheduler.children`:
    arm -> [tried, with new coverage]) and its hedge's tests (`Scheduler.hedged`, as "uniform"),
    the rest fresh; all fresh without those records."""
    tried = {}
    if isinstance(children, dict):
        tried = {str(a): int(c[0]) for a, c in children.items() if isinstance(c, list) and c and int(c[0]) > 0}
    if isinstance(hedged, list) and hedged and int(hedged[0]) > 0:
        tried["uniform"] = int(hedged[0])
    return {"fresh": max(0, tests_run - sum(tried.values()))} | tried


def first_finds(folder: Path, keys: frozenset[str]) -> tuple[list[Find], dict[str, list[float]]]:
    """The corpus entries of the campaign in `folder` that first reached the branches `keys`,
    and per origin [tests run, corpus entries (tests kept with a bitmap), their milliseconds and
    new branches]."""
    from nnsmith_cov.corpus.records import CorpusError
    from nnsmith_cov.corpus.store import CorpusStore
    from nnsmith_cov.coverage.universe import Universe
    from nnsmith_cov.report.load import corpus_folder

    try:
        with CorpusStore.open(corpus_folder(folder), readonly=True) as store:
            with store.snapshot() as view:
                data, virgin = view.get("meta", b"universe"), view.virgin()
            if data is None or virgin is None:
                raise BenchError(f"{folder}: damaged corpus (no universe or coverage map)")
            universe = Universe.from_bytes(bytes(data))
            wanted = np.zeros(len(universe), dtype=bool)
            for i in virgin.covered():
                wanted[i] = universe.key(int(i)) in keys
            order = sorted(
                (r.elapsed_s, t, r.status, origin_of(r.parent, r.gen), entry_cost(r.timings, r.gen), _new(r.novelty))
                for t, r in store.entries(include_finding_only=True)
            )
            state = store.scheduler_state() or {}
            ran = tests_by_origin(store.counters().tests_run, state.get("children"), state.get("hedged"))
            counts: dict[str, list[float]] = {o: [n, 0, 0.0, 0] for o, n in ran.items()}

            def entries() -> Iterable[Entry]:
                for elapsed, test, status, origin, ms, new in order:
                    hits = store.hits(test)
                    if hits is not None:
                        c = counts.setdefault(origin, [0, 0, 0.0, 0])
                        c[1], c[2], c[3] = c[1] + 1, c[2] + ms, c[3] + new
                        yield elapsed, test, status, origin, hits.index.astype(np.int64)

            return attribute(entries(), wanted), counts
    except (CorpusError, ValueError) as e:
        raise BenchError(f"{folder}: {e}") from None


def _new(novelty: object) -> int:
    """The new branches a stored test added (0 without a coverage result)."""
    return int(getattr(novelty, "new_branches", 0) or 0)


def seed_finds(seed: int, runs: Mapping[str, Run], folders: Mapping[str, Path]) -> list[Finds]:
    """Per mode of one seed, where its unique branches came from."""
    out = []
    for mode, keys in unique_sets(runs).items():
        finds, counts = first_finds(folders[mode], keys)
        top = sum(f.branches for f in finds[:TOP])
        out.append(Finds(seed, mode, len(keys), len(finds), finds[0] if finds else None, top, by_origin(finds, counts)))
    return out


def trimmed(finds: Sequence[Finds], first: str) -> list[Trimmed]:
    """Per seed, `first`'s unique ratio to each other mode without each side's TOP largest finds."""
    by = {(f.seed, f.mode): f for f in finds}
    out = []
    for f in finds:
        if f.mode == first or (f.seed, first) not in by:
            continue
        a = by[(f.seed, first)]
        rest_a, rest_b = a.unique - a.top, f.unique - f.top
        out.append(Trimmed(f.seed, first, f.mode, _over(rest_a, rest_b), rest_a, rest_b))
    return out


def geomean(values: Sequence[float | None]) -> float | None:
    """Geometric mean of the defined, positive, finite values (None if there are none)."""
    vals = [v for v in values if v is not None and 0 < v < math.inf]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def _fmt(v: float | None, suffix: str = "x") -> str:
    if v is None:
        return "n/a"
    return "inf" if v == math.inf else f"{v:.2f}{suffix}"


def _markdown(header: Sequence[str], body: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in body]


def table(rows: Sequence[Ratio]) -> str:
    """The per-seed ratios and their geometric mean per pair, as a Markdown table."""
    header = ["seed", "pair", "total", "unique", "reach (share of run)", "branches", "unique branches", "tests"]
    body = [
        [
            r.seed,
            f"{r.first} / {r.other}",
            _fmt(r.total),
            _fmt(r.unique),
            "never" if r.reach is None else _fmt(r.reach, ""),
            f"{r.first_total} / {r.other_total}",
            f"{r.first_unique} / {r.other_unique}",
            f"{r.first_tests} / {r.other_tests}",
            ", ".join(k for k, ok in r.met().items() if ok) or "none",
        ]
        for r in rows
    ]
    for pair in dict.fromkeys((r.first, r.other) for r in rows):
        mine = [r for r in rows if (r.first, r.other) == pair]
        means = [geomean([r.total for r in mine]), geomean([r.unique for r in mine])]
        reach = geomean([r.reach for r in mine])
        body.append(["geomean", f"{pair[0]} / {pair[1]}", *map(_fmt, means), _fmt(reach, ""), "", "", "", ""])
    return "\n".join(_markdown([*header, "goals met"], body))


def across_table(rows: Sequence[AcrossSeeds]) -> str:
    """A12 and the Mann-Whitney p of each pair over the seeds, as a Markdown table."""
    header = ["pair", "seeds", "A12 of total branches", "Mann-Whitney p (two-sided)", "smallest p possible"]
    body = [[f"{r.first} / {r.other}", r.seeds, f"{r.a12:.2f}", f"{r.p:.2f}", f"{r.min_p:.2f}"] for r in rows]
    return "\n".join(_markdown(header, body)) if rows else ""


def headroom_table(rows: Sequence[Headroom]) -> str:
    """The pool, each pair's shares of it and the total-ratio ceiling, as a Markdown table."""
    if not rows:
        return ""
    header = ["seed", "pair", "shares of the pool", "total ratio if the first reached the whole pool", "goal"]
    body = [
        [
            r.seed,
            f"{r.first} / {r.other}",
            f"{r.first_share:.3f} / {r.other_share:.3f}",
            _fmt(r.ceiling),
            f"{GOALS['total']:.2f}x",
        ]
        for r in rows
    ]
    pool = f"Pool: {rows[0].pool} branches reached by any campaign (every seed and mode)."
    return "\n".join([pool, "", *_markdown(header, body)])


def spread_table(rows: Sequence[SeedSpread]) -> str:
    """Each mode's seeds against each other: the ratios chance alone gives, as a Markdown table."""
    body = [
        [r.mode, f"{r.seed_a} / {r.seed_b}", _fmt(r.total), _fmt(r.unique), f"{r.a_unique} / {r.b_unique}"]
        for r in rows
    ]
    return "\n".join(_markdown(["mode", "seeds", "total", "unique", "unique branches"], body)) if rows else ""


def finds_table(finds: Sequence[Finds], trims: Sequence[Trimmed]) -> str:
    """Where each mode's unique branches came from, and the unique ratios without the largest finds."""
    if not finds:
        return ""
    body = []
    for f in finds:
        big = f.largest
        largest = "" if big is None else f"{big.branches} (test {big.test} at {big.elapsed_s:.0f} s, {big.status})"
        body.append([f.seed, f.mode, f.unique, f.tests, largest, f.top])
    header = ["seed", "mode", "unique branches", "entries first reaching them", "largest find", f"largest {TOP}"]
    lines = _markdown(header, body)
    if trims:
        rows = [[t.seed, f"{t.first} / {t.other}", _fmt(t.unique), f"{t.first_rest} / {t.other_rest}"] for t in trims]
        lines += ["", *_markdown(["seed", "pair", f"unique without each side's {TOP} largest finds", "branches"], rows)]
    return "\n".join(lines)


def _share(part: int, whole: int) -> str:
    return f"{part} ({part / whole:.0%})" if whole else str(part)


def origins_table(finds: Sequence[Finds]) -> str:
    """Per mode, how its corpus entries were made, which of them first reached its unique branches,
    and what an entry of each origin cost and added (ms per entry; new branches per second of them)."""
    body = []
    for f in finds:
        tests, entries = (int(sum(c[i] for c in f.origins.values())) for i in (0, 1))
        for origin, (ran, kept, unique, ms, new) in f.origins.items():
            cost = f"{ms / kept:.0f}" if kept else "-"
            rate = f"{new / ms * 1000:.1f}" if ms else "-"
            row = [_share(int(ran), tests), _share(int(kept), entries), _share(int(unique), f.unique), cost, rate]
            body.append([f.seed, f.mode, origin, *row])
    header = ["seed", "mode", "origin", "tests", "corpus entries", "unique branches it reached first"]
    header += ["ms per entry", "new branches per s"]
    return "\n".join(_markdown(header, body)) if body else ""


@dataclass(frozen=True)
class Yardsticks:
    """What the ratios are measured against: the headroom, the seed spread, the unique branches' finds."""

    room: Sequence[Headroom] = ()
    spread: Sequence[SeedSpread] = ()
    finds: Sequence[Finds] = ()
    trims: Sequence[Trimmed] = ()
    across: Sequence[AcrossSeeds] = ()


def summary_md(rows: Sequence[Ratio], sticks: Yardsticks = Yardsticks()) -> str:
    parts = [table(rows)]
    if sticks.across:
        parts += ["## Over the seeds", across_table(sticks.across)]
    if sticks.room:
        parts += ["## Headroom", headroom_table(sticks.room)]
    if sticks.spread:
        parts += ["## Seeds of one mode against each other", spread_table(sticks.spread)]
    if sticks.finds:
        parts += ["## Where the unique branches came from", finds_table(sticks.finds, sticks.trims)]
        if any(f.origins for f in sticks.finds):
            parts += ["## The origins of the tests that reached them", origins_table(sticks.finds)]
    return "\n\n".join(parts)


def write_tables(out: Path, rows: Sequence[Ratio], sticks: Yardsticks = Yardsticks()) -> None:
    """summary.csv (the ratios), summary.json and summary.md (everything) in `out`."""
    fields = list(Ratio.__dataclass_fields__)
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("inf" if v == math.inf else v) for k, v in asdict(r).items()})
    body = {
        "goals": GOALS,
        "ratios": [asdict(r) | {"met": r.met()} for r in rows],
        "across_seeds": [asdict(r) for r in sticks.across],
        "headroom": [asdict(r) for r in sticks.room],
        "seed_spread": [asdict(r) for r in sticks.spread],
        "finds": [asdict(r) for r in sticks.finds],
        "origin_fields": list(ORIGIN_FIELDS),  # what each of a find's origins lists
        "trimmed_unique": [asdict(r) for r in sticks.trims],
    }
    # JSON has no infinity: a unique ratio over zero is written as null with its counts beside it
    text = json.dumps(body, indent=1, default=str).replace("Infinity", "null")
    (out / "summary.json").write_text(text + "\n")
    (out / "summary.md").write_text(summary_md(rows, sticks) + "\n")


def fuzz_argv(folder: Path, mode: str, seed: int, args: argparse.Namespace) -> list[str]:
    argv = [sys.executable, "-m", "nnsmith_cov.cli", "fuzz", "-o", str(folder), "--backends", args.backends]
    argv += ["--collector", args.collector, *MODES[mode], "--seed", str(seed)]
    argv += ["--tests", str(args.tests)] if args.tests else ["--time", args.time]
    if args.jobs > 1:  # one core per campaign: no generator process beside its worker
        argv += ["--gen-process", "off"]
    return argv + shlex.split(args.fuzz_args)


def run_all(jobs: Sequence[tuple[Path, list[str]]], parallel: int) -> None:
    """Run each (folder, argv), at most `parallel` at once; a log beside each folder."""
    waiting, running = list(jobs), []
    failed: list[str] = []
    while waiting or running:
        while waiting and len(running) < parallel:
            folder, argv = waiting.pop(0)
            folder.parent.mkdir(parents=True, exist_ok=True)
            log = open(folder.with_suffix(".log"), "w")
            running.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
        time.sleep(0.2)
        for proc, log in [x for x in running if x[0].poll() is not None]:
            running.remove((proc, log))
            log.close()
            if proc.returncode != 0:
                failed.append(f"{log.name} (exit {proc.returncode})")
    if failed:
        raise BenchError(f"{len(failed)} campaign(s) failed; see {', '.join(failed)}")


def load_runs(folders: Mapping[str, Path]) -> tuple[dict[str, Run], dict[str, object]]:
    """Each mode's Run and its report Campaign (for the timeline and the figures)."""
    from nnsmith_cov.report.command import ReportOptions, load_campaigns
    from nnsmith_cov.report.model import ReportError

    specs = [f"{folder}=feedback {mode}" for mode, folder in folders.items()]
    try:
        campaigns = dict(zip(folders, load_campaigns(specs, ReportOptions())))
    except ReportError as e:
        raise BenchError(str(e)) from None
    runs = {}
    for mode, c in campaigns.items():
        t = c.by_time
        runs[mode] = Run(c.covered, t.x if t else (), t.branches if t else (), c.tests or 0)
    return runs, campaigns


def print_seed(seed: int, campaigns: Mapping[str, object], runs: Mapping[str, Run], rows: Sequence[Ratio]) -> None:
    print(f"\n== seed {seed}")
    for mode, c in campaigns.items():
        t = c.by_time
        if t is None or not t.x:
            continue
        print(f"feedback {mode}: elapsed_s branches pass_only (after each new-coverage step)")
        step = max(1, len(t.x) // 10)
        for i in dict.fromkeys([*range(0, len(t.x), step), len(t.x) - 1]):
            print(f"  {t.x[i]:9.0f} {t.branches[i]:8d} {t.pass_branches[i]:9d}")
    print("                   total   pass-only   tests")
    for mode, c in campaigns.items():
        print(f"feedback {mode:<8} {len(c.covered):7d}   {len(c.pass_covered):9d}   {c.tests or 0:5d}")
    for r in rows:
        print(
            f"ratios ({r.first} / {r.other}): total {_fmt(r.total)}, unique {_fmt(r.unique)} "
            f"({r.first_unique} vs {r.other_unique}); {r.first} reached {r.other}'s final coverage at "
            f"{'never' if r.reach is None else f'{r.reach:.2f} of the run'}"
        )


def plot(out: Path, per_seed: Mapping[int, Mapping[str, Run]]) -> Path | None:
    """coverage-time.png: branches over time, one panel per seed, one line per mode."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench_feedback: matplotlib missing, no combined figure", file=sys.stderr)
        return None
    fig, axes = plt.subplots(1, len(per_seed), figsize=(5 * len(per_seed), 3.6), squeeze=False)
    for ax, (seed, runs) in zip(axes[0], per_seed.items()):
        for mode, r in runs.items():
            ax.step([0.0, *r.times], [0, *r.branches], where="post", label=mode)
        ax.set_title(f"seed {seed}")
        ax.set_xlabel("seconds")
        ax.set_ylabel("branches")
        ax.legend()
    fig.tight_layout()
    path = out / "coverage-time.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--time", default="30m", help="wall time of each campaign (default 30m)")
    ap.add_argument("--tests", type=int, default=0, help="stop each campaign after this many tests instead")
    ap.add_argument("--seeds", default="1", help="run seeds, e.g. 1,2 or 1-3 (default 1)")
    ap.add_argument("--seed", type=int, help="one run seed (the same as --seeds N)")
    ap.add_argument("--jobs", type=int, default=0, help="campaigns at once (default: one per core, at most all)")
    ap.add_argument("--backends", default="tvm")
    ap.add_argument("--collector", default="python")
    ap.add_argument("--fuzz-args", default="", help="more `fuzz` flags for every campaign, e.g. '--nodes 6'")
    ap.add_argument("--out", type=Path, default=Path("out/bench-feedback"))
    ap.add_argument(
        "--modes",
        default="on,off-var,on-nomut",
        help=f"two or more of {', '.join(MODES)}; the first is compared with the rest",
    )
    ap.add_argument("--reuse", action="store_true", help="only report on campaigns already in --out")
    ap.add_argument("--fill", action="store_true", help="run only the campaigns --out lacks, then report on all")
    ap.add_argument("--no-report", action="store_true", help="skip the per-seed `nnsmith-cov report` folders")
    args = ap.parse_args(argv)
    args.modes = parse_modes(args.modes)
    args.seeds = [args.seed] if args.seed is not None else parse_seeds(args.seeds)
    if args.seed is not None and args.seed < 0:
        raise BenchError("--seed must be non-negative")
    if args.jobs < 0 or args.tests < 0:
        raise BenchError("--jobs and --tests must be non-negative")
    try:
        shlex.split(args.fuzz_args)
    except ValueError as e:
        raise BenchError(f"--fuzz-args: {e}") from None
    if not args.jobs:
        args.jobs = max(1, min(os.cpu_count() or 1, len(args.modes) * len(args.seeds)))
    return args


def report(folders: Mapping[str, Path], out: Path) -> None:
    """`nnsmith-cov report`'s table and figures for one seed's campaigns."""
    from nnsmith_cov.report.command import ReportOptions, make_report
    from nnsmith_cov.report.model import ReportError

    try:
        make_report([f"{f}=feedback {m}" for m, f in folders.items()], out, ReportOptions(quiet=True))
    except ReportError as e:
        raise BenchError(str(e)) from None


def folder_of(out: Path, seed: int, mode: str) -> Path:
    """Where a campaign goes; an older single-seed run (OUT/feedback-MODE) is still found."""
    folder = out / f"seed-{seed}" / f"feedback-{mode}"
    older = out / f"feedback-{mode}"
    return older if not folder.exists() and older.exists() else folder


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        args.out.mkdir(parents=True, exist_ok=True)
        if not args.reuse:
            jobs = [(s, m, folder_of(args.out, s, m)) for s in args.seeds for m in args.modes]
            taken = [str(f) for _, _, f in jobs if f.exists()]
            if taken and not args.fill:
                raise BenchError(f"{taken[0]} exists: pick another --out, or --reuse to report on it")
            jobs = [j for j in jobs if str(j[2]) not in taken]
            run_all([(f, fuzz_argv(f, m, s, args)) for s, m, f in jobs], args.jobs)
        rows: list[Ratio] = []
        per_seed: dict[int, dict[str, Run]] = {}
        finds: list[Finds] = []
        for seed in args.seeds:
            folders = {m: folder_of(args.out, seed, m) for m in args.modes}
            missing = [str(f) for f in folders.values() if not f.exists()]
            if missing:
                raise BenchError(f"no campaign in {missing[0]}")
            runs, campaigns = load_runs(folders)
            mine = ratios(seed, runs, args.modes[0])
            print_seed(seed, campaigns, runs, mine)
            rows += mine
            per_seed[seed] = runs
            finds += seed_finds(seed, runs, folders)
            if not args.no_report:
                report(folders, args.out / f"seed-{seed}" / "report")
        first = args.modes[0]
        room = headroom(per_seed, first)
        sticks = Yardsticks(room, seed_spread(per_seed), finds, trimmed(finds, first), across_seeds(rows))
        write_tables(args.out, rows, sticks)
        print("\n" + summary_md(rows, sticks))
        figure = plot(args.out, per_seed)
        print(f"\ntables: {args.out}/summary.{{md,csv,json}}" + (f"; figure: {figure}" if figure else ""))
        return 0
    except BenchError as e:
        print(f"bench_feedback: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
