"""Baseline generators in the same harness: GraphFuzzer-style, LEMON-style and Tzer-style (TIR).

`GENERATORS` maps the `fuzz --generator` names to functions with nnsmith's
`generate` signature (config, seed, replayed draws) -> Generated, so a corpus
entry's generator name, seed and draws rebuild its graph. `FEEDBACK_ARMS` says
which of the scheduler's proposals each generator follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nnsmith_cov.baselines import graphfuzzer, lemon, tzer
from nnsmith_cov.gen.generator import GenConfig, Generated, generate

Generate = Callable[[GenConfig, int, Sequence[tuple[str, int | float]]], Generated]

GENERATORS: dict[str, Generate] = {
    "nnsmith": generate,
    graphfuzzer.NAME: graphfuzzer.generate,
    lemon.NAME: lemon.generate,
    tzer.NAME: tzer.generate,  # declines: its campaign runs TIR tests (nnsmith_cov/tzer/loop.py)
}

# What feedback steers per generator (Scheduler.apply's knobs it reads). The scheduler
# has no arm for LEMON's mutation kind, so that is drawn uniformly; `nodes` bounds LEMON's
# chain of mutations and GraphFuzzer's operator count. "op" is the op shares and, for nnsmith and
# GraphFuzzer, the first op a graph tries (`GenConfig.first_op`; a LEMON seed model has its own).
FEEDBACK_ARMS: dict[str, tuple[str, ...]] = {
    "nnsmith": ("op", "direction", "bins", "nodes", "seeded", "opset", "dynamic", "roundtrip"),
    graphfuzzer.NAME: ("op", "nodes"),
    lemon.NAME: ("op", "nodes"),
    tzer.NAME: (),  # its feedback is its own seed pool, not the scheduler
}


def generate_with(name: str, cfg: GenConfig, seed: int, prefix: Sequence[tuple[str, int | float]] = ()) -> Generated:
    """One graph from the named generator; raises GenerationError like nnsmith's."""
    try:
        gen = GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown generator {name!r} (one of {', '.join(GENERATORS)})") from None
    return gen(cfg, seed, prefix)
