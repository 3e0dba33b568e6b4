"""An incremental Z3 solver with a wall-clock budget shared by every check."""

from __future__ import annotations

import time
from collections.abc import Sequence

import z3

from nnsmith_cov.abstract.symbols import context


class SolverTimeout(Exception):
    """The per-graph solving budget is spent."""


class BudgetSolver:
    """Constraints are only ever added after a check says they keep the set sat.

    Z3's own seed is fixed by the caller (drawn from the graph's choice source)
    so the same constraints give the same model on every machine.
    """

    def __init__(self, budget_ms: int, seed: int) -> None:
        self._solver = z3.Solver(ctx=context())
        self._solver.set("random_seed", seed)
        self._deadline = time.monotonic() + budget_ms / 1000
        self.checks = 0
        self.solve_s = 0.0

    def remaining_ms(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)

    def _check(self, extra: Sequence[z3.BoolRef], grace_ms: int = 0) -> z3.CheckSatResult:
        left = self.remaining_ms() + grace_ms
        if left <= 0:
            raise SolverTimeout("solver budget spent")
        self._solver.set("timeout", left)
        t0 = time.perf_counter()
        result = self._solver.check(*extra)
        self.solve_s += time.perf_counter() - t0
        self.checks += 1
        return result

    def try_add(self, cons: Sequence[z3.BoolRef]) -> bool:
        """Add `cons` if the whole set stays satisfiable; unknown counts as no."""
        cons = [c for c in cons if not (isinstance(c, bool) and c)]
        if any(isinstance(c, bool) and not c for c in cons):
            return False
        if self._check(cons) == z3.sat:
            self._solver.add(*cons)
            return True
        return False

    def model(self) -> z3.ModelRef:
        # The committed set was sat at its last check; re-solving it is quick,
        # so it gets a grace period even when insertion spent the budget.
        if self._check([], grace_ms=2000) != z3.sat:
            raise SolverTimeout("no model for the committed constraints within budget")
        return self._solver.model()
