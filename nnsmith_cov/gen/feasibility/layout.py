"""Ops that move elements without computing: which keep every element, which keep some, and
what pads, triangles and pooling windows leave."""

from __future__ import annotations

import torch

from nnsmith_cov.abstract.op_facts import Elements
from nnsmith_cov.ops import ALL_OPS, op_by_name

# Names of the ops by where their elements come from (the specs' `elements`).
KEEP_ALL = frozenset(op.name() for op in ALL_OPS if op.elements is Elements.ALL)
SUBSET = frozenset(op.name() for op in ALL_OPS if op.elements is Elements.SOME)
# Each output element is one of the (first) input's elements.
PICKS = frozenset(op.name() for op in ALL_OPS if op.elements is not Elements.COMPUTED)


def pad_widths(a) -> list[int]:
    return [a[f"{side}{i}"] for i in range(a.k) for side in "lr"]


def triangle_zeros(name: str, a, shape: tuple[int, ...]) -> bool:
    """Whether Tril/Triu leaves at least one element zeroed."""
    rows, cols = shape[-2], shape[-1]
    if name == "Tril":  # zero where col - row > diagonal
        return cols - 1 > a.diagonal
    return -(rows - 1) < a.diagonal  # Triu: zero where col - row < diagonal


def triangle(name: str, diagonal: int, x: torch.Tensor) -> torch.Tensor:
    """Tril/Triu of x by a mask of its last two dims: what torch.tril/triu compute, without
    their kernels, which take ~20 ms for any size on a busy machine (the analysis runs them
    on per-element bounds)."""
    rows = torch.arange(x.shape[-2]).unsqueeze(-1)
    off = torch.arange(x.shape[-1]) - rows  # col - row
    keep = off <= diagonal if name == "Tril" else off >= diagonal
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype))


def triangle_keeps(name: str, a, shape: tuple[int, ...]) -> bool:
    """Whether Tril/Triu keeps at least one element (col - row ranges over [1 - rows, cols - 1])."""
    rows, cols = shape[-2], shape[-1]
    return 1 - rows <= a.diagonal if name == "Tril" else cols - 1 >= a.diagonal


def all_padding_window(name: str, a) -> bool:
    """Pooling whose output is non-finite even on an all-ones input: some window lies
    wholly in the padding, whatever the values."""
    t = a["in_types"][0]
    ones = torch.ones(t.shape, dtype=t.dtype.torch)
    with torch.no_grad():
        out = op_by_name(name).forward(a, ones)
    return not bool(torch.isfinite(out).all())
