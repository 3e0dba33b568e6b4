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

    Each check is bounded by Z3's resource limit (`rlimit`, counted in Z3's own
    work units, so the same check gives up at the same point on every machine
    and the graph stays a function of the seed); the wall-clock budget is only
    a safety net. Z3's seed is fixed by the caller (drawn from the graph's
    choice source). The model of the last successful check is kept: it
    satisfies everything committed, so no final re-solve is needed.
    """

    def __init__(self, budget_ms: int, seed: int, rlimit: int) -> None:
        self._solver = z3.Solver(ctx=context())
        self._solver.set("random_seed", seed)
        self._solver.set("rlimit", rlimit)
        self._deadline = time.monotonic() + budget_ms / 1000
        self._model: z3.ModelRef | None = None
        self.checks = 0
        self.solve_s = 0.0

    def remaining_ms(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)

    def _check(self, extra: Sequence[z3.BoolRef]) -> z3.CheckSatResult:
        left = self.remaining_ms()
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
            self._model = self._solver.model()
            self._solver.add(*cons)
            return True
        return False

    def model(self) -> z3.ModelRef:
        if self._model is None:
            raise SolverTimeout("no satisfiable check yet")
        return self._model
