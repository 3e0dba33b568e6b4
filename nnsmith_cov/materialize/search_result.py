"""What a value search hands on: the leaves' values and, when it succeeded, PyTorch's outputs.

It lives here, below the search (which runs `torch_module`) and beside `model_dir` (which
writes it out), so neither package imports the other both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SearchResult:
    """Values found (or the last tried) and, when `ok`, the oracle outputs."""

    ok: bool
    values: dict[int, np.ndarray]
    oracle: dict[int, np.ndarray] = field(default_factory=dict)
    iterations: int = 0
    restarts: int = 0
    elapsed_ms: float = 0.0
    failed_op: str | None = None  # op still making NaN/Inf when the budget ran out

    def summary(self) -> dict:
        return {
            "ok": self.ok,
            "iterations": self.iterations,
            "restarts": self.restarts,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "failed_op": self.failed_op,
        }
