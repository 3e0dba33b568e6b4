"""Seeded random values for a graph's inputs and weights."""

from __future__ import annotations

import numpy as np

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR


def sample_tensor(rng: np.random.Generator, t: TensorType, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    """Floats uniform in [lo, hi); integers in a small range; bools fair coins."""
    if t.dtype is DType.bool:
        return rng.integers(0, 2, size=t.shape).astype(np.bool_)
    if t.dtype.is_float:
        return rng.uniform(lo, hi, size=t.shape).astype(t.dtype.numpy)
    ilo = 0 if t.dtype is DType.uint8 else int(np.floor(min(lo, -4)))
    return rng.integers(ilo, int(max(hi, 5)), size=t.shape).astype(t.dtype.numpy)


def sample_values(graph: GraphIR, seed: int, lo: float = -1.0, hi: float = 1.0) -> dict[int, np.ndarray]:
    """One array per placeholder (inputs and weights), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    return {v: sample_tensor(rng, graph.types[v], lo, hi) for v in (*graph.inputs, *graph.weights)}
