"""An incremental Z3 solver with a per-graph budget of Z3 work shared by every check."""

from __future__ import annotations

import time
from collections.abc import Sequence

import z3

from nnsmith_cov.abstract.symbols import context


class SolverTimeout(Exception):
    """The per-graph solving budget is spent."""


def _rlimit_count(stats: z3.Statistics, default: int) -> int:
    """Z3's "rlimit count" in one pass over the counters (`keys()` then `get_key_value`
    walk them twice, a measurable share of a small check)."""
    ctx, ref = stats.ctx.ref(), stats.stats
    for i in reversed(range(len(stats))):  # Z3 lists it among its last counters
        if z3.Z3_stats_get_key(ctx, ref, i) == "rlimit count":
            return int(z3.Z3_stats_get_uint_value(ctx, ref, i))
    return default


class BudgetSolver:
    """Constraints are only ever added after a check says they keep the set sat.

    Work is counted in Z3's own resource units (`rlimit`), never in seconds: each
    check may use at most `rlimit` of them and the whole graph at most `work`,
    so a check gives up at the same point on every machine, however loaded,
    and the graph stays a function of the seed. The wall-clock budget is only
    a safety net that a normal graph never reaches. Z3's seed is fixed by the
    caller (drawn from the graph's choice source). The model of the last
    successful check is kept: it satisfies everything committed, so no final
    re-solve is needed.
    """

    def __init__(self, budget_ms: int, seed: int, rlimit: int, work: int) -> None:
        ctx = context()
        self._solver = z3.Solver(ctx=ctx)
        self._solver.set("random_seed", seed)
        # Raw handles for the per-check calls: the z3 wrappers re-cast every term and build a
        # parameter set per option, about a fifth of a small check's time.
        self._ctx, self._ptr = ctx.ref(), self._solver.solver
        self._rlimit, self._work = rlimit, work
        self._deadline = time.monotonic() + budget_ms / 1000
        self._model: z3.ModelRef | None = None
        self.checks = 0
        self.solve_s = 0.0
        self.used = 0  # Z3 work units spent by all checks so far
        # After a `try_add` that Z3 answered unsat: the indices of `cons` in its unsat core
        # (a subset that conflicts with what is committed); None after sat or unknown.
        self.last_core: list[int] | None = None

    def remaining_ms(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)

    def spent(self) -> bool:
        """No check may run any more (the work budget, or the safety net, is used up)."""
        return self.used >= self._work or self.remaining_ms() <= 0

    def _check(self, extra: Sequence[z3.BoolRef], rlimit: int | None = None) -> z3.CheckSatResult:
        if self.used >= self._work:
            raise SolverTimeout(f"work budget of {self._work} Z3 units spent")
        left = self.remaining_ms()
        if left <= 0:
            raise SolverTimeout("wall-clock safety net reached")
        # rlimit bounds one check (counted from where the running total stands).
        # A new parameter set each time: updating one kept set changes Z3's later choices.
        params = z3.ParamsRef(self._solver.ctx)
        params.set("rlimit", min(rlimit or self._rlimit, self._rlimit, self._work - self.used))
        params.set("timeout", left)
        z3.Z3_solver_set_params(self._ctx, self._ptr, params.params)
        terms = (z3.Ast * len(extra))(*(c.as_ast() for c in extra))
        t0 = time.perf_counter()
        result = z3.CheckSatResult(z3.Z3_solver_check_assumptions(self._ctx, self._ptr, len(extra), terms))
        self.solve_s += time.perf_counter() - t0
        self.checks += 1
        self.used = _rlimit_count(self._solver.statistics(), self.used)
        return result

    def try_add(self, cons: Sequence[z3.BoolRef], rlimit: int | None = None) -> bool:
        """Add `cons` if the whole set stays satisfiable; unknown counts as no.

        `rlimit` caps this one check below the solver's own per-check limit."""
        self.last_core = None
        for i, c in enumerate(cons):
            if isinstance(c, bool) and not c:
                self.last_core = [i]
                return False
        terms = [(i, c) for i, c in enumerate(cons) if not isinstance(c, bool)]
        result = self._check([c for _, c in terms], rlimit)
        if result == z3.sat:
            self._model = self._solver.model()
            for _, c in terms:
                z3.Z3_solver_assert(self._ctx, self._ptr, c.as_ast())
            return True
        if result == z3.unsat:
            core = {c.get_id() for c in self._solver.unsat_core()}
            self.last_core = [i for i, c in terms if c.get_id() in core]
        return False

    def model(self) -> z3.ModelRef:
        if self._model is None:
            raise SolverTimeout("no satisfiable check yet")
        return self._model
