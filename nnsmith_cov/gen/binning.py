"""Attribute binning (Algorithm 2): ranges that pull Z3 away from boundary values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nnsmith_cov.abstract.bins import n_bins
from nnsmith_cov.abstract.op import AttrKind


@dataclass
class BinChoice:
    """One binning decision, reported back so a scheduler can reward it."""

    owner: str  # "Conv2d#3" or "input#0"
    attr: str
    kind: str
    bin: int  # 0 = the zero bin; negative = mirrored bins of SIGNED attributes
    kept: bool = True


def weights_for(bin_weights: Mapping[str, Sequence[float]] | None, kind: AttrKind, k: int) -> Sequence[float] | None:
    if not bin_weights or kind.value not in bin_weights:
        return None
    w = list(bin_weights[kind.value])
    if len(w) != n_bins(kind, k):
        raise ValueError(f"bin weights for {kind.value!r} need {n_bins(kind, k)} entries, got {len(w)}")
    return w
