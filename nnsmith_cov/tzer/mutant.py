"""Making one mutant of a pool entry, and rebuilding a stored mutant from its record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnsmith_cov.tir import mutate, passes, seeds
from nnsmith_cov.tzer.pool import Entry

MAX_TRIES = 8  # IR mutations tried (each a fresh draw) before the test falls back to its parent's IR


@dataclass
class Mutant:
    func: Any
    chain: list[tuple[str, int]]  # the parent's chain plus this test's IR mutation (if any)
    passes: list[str]
    step: str  # what this test did: an IR mutation's name, "pass.<kind>", or "seed"
    rejected: int  # IR mutations that were cleanly rejected on the way


def make(entry: Entry, seed: int, mode: str) -> Mutant:
    """A mutant of `entry` drawn from `seed`: its IR mutated (mode "ir") or its passes ("pass")."""
    rng = np.random.default_rng(seed)
    if mode == "pass":
        seq, step = passes.mutate(entry.passes, rng)
        return Mutant(entry.func, list(entry.chain), seq, step, 0)
    rejected = 0
    for _ in range(MAX_TRIES):
        name = mutate.NAMES[int(rng.integers(len(mutate.NAMES)))]
        draw = int(rng.integers(1 << 31))
        try:
            func = mutate.mutate(entry.func, name, draw)
        except mutate.Rejected:
            rejected += 1
            continue
        return Mutant(func, [*entry.chain, (name, draw)], list(entry.passes), name, rejected)
    return Mutant(entry.func, list(entry.chain), list(entry.passes), "none", rejected)


def replay(origin: str, chain: list[tuple[str, int]]) -> Any:
    """The PrimFunc a record's seed name and IR mutation chain stand for."""
    func = seeds.seed(origin)
    for name, draw in chain:
        func = mutate.mutate(func, name, draw)
    return func


def record(test_seed: int, origin: str, m: Mutant, mode: str, parent: int | None) -> dict[str, Any]:
    """What the corpus keeps of a Tzer test (its `gen`): enough to replay it, the TIR as text."""
    return {
        "generator": "tzer",
        "seed": test_seed,
        "origin": origin,
        "chain": [[n, d] for n, d in m.chain],
        "passes": list(m.passes),
        "mode": mode,
        "steps": [m.step],
        "rejected_mutations": m.rejected,
        "parent_entry": parent,
        "tir": m.func.script(),
        "ops": [],
    }
