"""The `tzer` entry of the generator table (`fuzz --generator tzer`, TVM only).

Tzer's tests are TIR functions, not graphs: its campaign lives in `nnsmith_cov/tzer/` (above
`campaign/`, which it drives) and its TIR tools in `nnsmith_cov/tir/`. This entry only names it
and declines graph requests, so the generator table stays free of campaign imports.
"""

from __future__ import annotations

from collections.abc import Sequence

from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError

NAME = "tzer"


def generate(cfg: GenConfig, seed: int, prefix: Sequence[tuple[str, int | float]] = ()) -> Generated:
    """Tzer's tests are TIR functions, not graphs: asked for a graph, it declines."""
    raise GenerationError("the tzer generator makes TIR functions, not graphs (see nnsmith_cov/tzer/loop.py)")
