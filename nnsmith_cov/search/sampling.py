"""Seeded random values for a graph's inputs and weights."""

from __future__ import annotations

import numpy as np

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR


def sample_tensor(
    rng: np.random.Generator, t: TensorType, lo: float = -1.0, hi: float = 1.0, narrow: bool = False
) -> np.ndarray:
    """Floats uniform in [lo, hi); integers in a small range; bools fair coins.

    `narrow` draws integers from {0, 1} and bools mostly True: values that an
    integer or boolean path into Log, Acos or Reciprocal (through a Cast) can
    survive, which the wide draw almost never gives for a whole tensor.
    """
    if t.dtype is DType.bool:
        values = rng.random(size=t.shape) < (0.95 if narrow else 0.5)
    elif t.dtype.is_float:
        values = rng.uniform(lo, hi, size=t.shape)
    elif narrow:
        values = rng.integers(0, 2, size=t.shape)
    else:
        ilo = 0 if t.dtype is DType.uint8 else int(np.floor(min(lo, -4)))
        values = rng.integers(ilo, int(max(hi, 5)), size=t.shape)
    return np.asarray(values).astype(t.dtype.numpy)


def sample_values(graph: GraphIR, seed: int, lo: float = -1.0, hi: float = 1.0) -> dict[int, np.ndarray]:
    """One array per placeholder (inputs and weights), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    return {v: sample_tensor(rng, graph.types[v], lo, hi) for v in (*graph.inputs, *graph.weights)}
