"""Attribute binning (Algorithm 2): ranges that pull Z3 away from boundary values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import z3

from nnsmith_cov.abstract.bins import n_bins
from nnsmith_cov.abstract.op import AttrKind
from nnsmith_cov.gen.solver import BudgetSolver


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


class BinFitter:
    """Keeps what fits of a graph's bins: each check capped at `cap` Z3 units, all of them
    together at `budget` (bins not reached when it is spent stay unkept)."""

    def __init__(self, solver: BudgetSolver, cap: int, budget: int) -> None:
        self.solver, self.cap = solver, cap
        self.end = solver.used + budget  # the Z3 work total at which binning stops

    def _cap(self) -> int:
        return min(self.cap, self.end - self.solver.used)

    def fit(self, items: list[tuple[BinChoice, z3.BoolRef]]) -> None:
        """Keep what fits of `items`, dropping the last bin of each unsat core, one check per
        dropped bin (halving spent about two checks per level on each conflicting bin);
        a check that reaches the cap has no core: its group is halved (`halve`)."""
        while items and self._cap() > 0:
            if self.solver.try_add([c for _, c in items], self._cap()):
                for b, _ in items:
                    b.kept = True
                return
            core = self.solver.last_core
            if not core:
                if len(items) > 1:
                    half = len(items) // 2
                    whole = self.halve(items[:half])
                    self.halve(items[half:], known_unsat=whole)
                return
            del items[max(core)]

    def halve(self, items: list[tuple[BinChoice, z3.BoolRef]], known_unsat: bool = False) -> bool:
        """Keep what fits of `items`, halving on conflict; True when all were kept.

        `known_unsat`: the group these were split from failed and its other half was
        kept whole, so checking these now would ask the same question again (and get
        the same no, unsat or over the cap): they are split without a check.
        """
        if self._cap() <= 0:
            return False
        if not known_unsat and self.solver.try_add([c for _, c in items], self._cap()):
            for b, _ in items:
                b.kept = True
            return True
        if len(items) > 1:
            half = len(items) // 2
            whole = self.halve(items[:half])
            self.halve(items[half:], known_unsat=whole)
        return False
