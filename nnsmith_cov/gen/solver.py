"""An incremental Z3 solver with a per-graph budget of Z3 work shared by every check."""

from __future__ import annotations

import time
from collections.abc import Sequence

import z3

from nnsmith_cov.abstract.symbols import context

# Z3's Groebner-basis and Horner lemmas for nonlinear arithmetic, off: the slowest tenth of
# graphs (products of symbolic dims under element caps, convolutions) is where they cost; over
# 1,000 seeds at 10 nodes, p90 generation time 54 -> 31 ms with as many bins kept (53-55%) and
# every op as often; other nonlinear options (tangents, order lemmas, nlsat) gave nothing or worse.
_NONLINEAR_PARAMS = {"smt.arith.nl.grobner": False, "smt.arith.nl.horner": False}
# Within this much of the wall-clock safety net each check also gets a timeout.
_TIMER_BELOW_MS = 10_000


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
    caller (drawn from the graph's choice source).

    A solver made with `lazy=True` fetches no model until asked for one or told to
    keep them (`keep_models`): fetching one after every successful insertion
    check was a tenth of a graph's generation, and only the last is ever read.
    Asked after a check that failed (that model is gone), the committed set,
    known to be satisfiable, is checked once more with a limit of its own,
    outside the graph's budget (binning may have spent it).
    """

    def __init__(self, budget_ms: int, seed: int, rlimit: int, work: int, lazy: bool = False) -> None:
        ctx = context()
        self._solver = z3.Solver(ctx=ctx)
        self._solver.set("random_seed", seed)
        for name, value in _NONLINEAR_PARAMS.items():
            self._solver.set(name, value)
        # Raw handles for the per-check calls: the z3 wrappers re-cast every term and build a
        # parameter set per option, about a fifth of a small check's time.
        self._ctx, self._ptr = ctx.ref(), self._solver.solver
        self._rlimit, self._work = rlimit, work
        self._deadline = time.monotonic() + budget_ms / 1000
        self._keep = not lazy  # fetch the model of every sat check
        self._model: z3.ModelRef | None = None  # the last sat check's model, once fetched
        self._sat = False  # the last check was sat: Z3 still holds its model
        self._committed = False  # some constraints were committed (a sat check)
        # Committed by the last sat check, asserted before the next: asserting drops Z3's model.
        self._pending: list[z3.BoolRef] = []
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

    def _check(
        self, extra: Sequence[z3.BoolRef], rlimit: int | None = None, budgeted: bool = True
    ) -> z3.CheckSatResult:
        if budgeted and self.used >= self._work:
            raise SolverTimeout(f"work budget of {self._work} Z3 units spent")
        left = self.remaining_ms()
        if left <= 0:
            raise SolverTimeout("wall-clock safety net reached")
        for c in self._pending:
            z3.Z3_solver_assert(self._ctx, self._ptr, c.as_ast())
        self._pending.clear()
        # rlimit bounds one check (counted from where the running total stands).
        # A new parameter set each time: updating one kept set changes Z3's later choices.
        params = z3.ParamsRef(self._solver.ctx)
        limit = min(rlimit or self._rlimit, self._rlimit)
        params.set("rlimit", min(limit, self._work - self.used) if budgeted else limit)
        if left < _TIMER_BELOW_MS:
            # Z3 starts a timer for every check that has a timeout (about 0.07 ms each here, as
            # long as a small check itself); far from the safety net the rlimit alone bounds a check.
            params.set("timeout", left)
        z3.Z3_solver_set_params(self._ctx, self._ptr, params.params)
        terms = (z3.Ast * len(extra))(*(c.as_ast() for c in extra))
        t0 = time.perf_counter()
        result = z3.CheckSatResult(z3.Z3_solver_check_assumptions(self._ctx, self._ptr, len(extra), terms))
        self.solve_s += time.perf_counter() - t0
        self.checks += 1
        self.used = _rlimit_count(self._solver.statistics(), self.used)
        self._sat = result == z3.sat
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
            self._committed = True
            self._model = self._solver.model() if self._keep else None
            self._pending = [c for _, c in terms]
            return True
        if result == z3.unsat:
            core = {c.get_id() for c in self._solver.unsat_core()}
            self.last_core = [i for i, c in terms if c.get_id() in core]
        return False

    def keep_models(self) -> None:
        """From now on fetch the model of each sat check (the current one too, while Z3
        holds it), so that a model is at hand whatever the checks after it answer."""
        self._keep = True
        if self._sat and self._model is None:
            self._model = self._solver.model()

    def model(self) -> z3.ModelRef:
        """A model of everything committed."""
        if self._model is None:
            if not self._committed:
                raise SolverTimeout("no satisfiable check yet")
            if not self._sat and self._check([], budgeted=False) != z3.sat:
                raise SolverTimeout("the committed constraints were not solved again within the check limit")
            self._model = self._solver.model()
        return self._model
