"""Seeded random values for a graph's inputs and weights."""

from __future__ import annotations

import numpy as np

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR

DRAWS = ("wide", "narrow", "fill")  # how integers and bools are drawn (`sample_tensor`)


def sample_tensor(
    rng: np.random.Generator, t: TensorType, lo: float = -1.0, hi: float = 1.0, draw: str = "wide"
) -> np.ndarray:
    """Floats uniform in [lo, hi); integers and bools as `draw` says (one of DRAWS).

    `wide`: integers from a small range around [lo, hi), bools fair coins.
    `narrow`: integers from {0, 1} and bools mostly True: values that an integer or
    boolean path into Log, Acos or Reciprocal (through a Cast) can survive, which
    the wide draw almost never gives for a whole tensor.
    `fill`: one wide value (or coin) repeated over the whole tensor: a condition on
    every element of a mix of integer tensors (`x & m != 0`, `~(a | b) == -1`) then
    holds for all of them as soon as it holds for one element of each.
    """
    if draw not in DRAWS:
        raise ValueError(f"unknown draw {draw!r} (choose from {', '.join(DRAWS)})")
    size = () if draw == "fill" and not t.dtype.is_float else t.shape
    if t.dtype is DType.bool:
        values = rng.random(size=size) < (0.95 if draw == "narrow" else 0.5)
    elif t.dtype.is_float:
        values = rng.uniform(lo, hi, size=size)
    elif draw == "narrow":
        values = rng.integers(0, 2, size=size)
    else:
        ilo = 0 if t.dtype is DType.uint8 else int(np.floor(min(lo, -4)))
        values = rng.integers(ilo, int(max(hi, 5)), size=size)
    return np.broadcast_to(np.asarray(values), t.shape).astype(t.dtype.numpy)


def sample_values(graph: GraphIR, seed: int, lo: float = -1.0, hi: float = 1.0) -> dict[int, np.ndarray]:
    """One array per placeholder (inputs and weights), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    return {v: sample_tensor(rng, graph.types[v], lo, hi) for v in (*graph.inputs, *graph.weights)}
