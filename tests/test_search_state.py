"""The value search's state (`search.state`) apart from the decisions taken on it."""

from __future__ import annotations

import math

import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.search import gradient
from nnsmith_cov.search.relaxed import Runner
from nnsmith_cov.search.sampling import DRAWS
from nnsmith_cov.search.state import SearchState

F32, I8 = DType.float32, DType.int8
INIT = (1.0, 9.0)


def _graph() -> GraphIR:
    """Reciprocal(-Cast(n)) and Log2(-Cast(n)) beside Sqrt(x), for int8 n and float32 x."""
    types = [TensorType((8,), d) for d in (I8, F32, F32, F32, F32, F32, F32)]
    insts = [
        Inst("CastF32", {}, (0,), (2,)),
        Inst("Neg", {}, (2,), (3,)),
        Inst("Reciprocal", {}, (3,), (4,)),
        Inst("Log2", {}, (3,), (5,)),
        Inst("Sqrt", {}, (1,), (6,)),
    ]
    g = GraphIR(types, [0, 1], [], insts, [4, 5, 6])
    g.check()
    return g


def _state(boxes=None, narrow=None, proxy: bool = True) -> SearchState:
    return SearchState(_graph(), 0, INIT, proxy, boxes=boxes or {}, narrow=narrow or {})


def test_the_narrow_table_decides_which_vulnerable_op_runs_first():
    log_first = _state(narrow={"Log2": 0, "Reciprocal": 1})
    assert log_first.order.index(3) < log_first.order.index(2)
    assert log_first.rank[3] < log_first.rank[2]
    reciprocal_first = _state(narrow={"Reciprocal": 0, "Log2": 1})
    assert reciprocal_first.order.index(2) < reciprocal_first.order.index(3)
    # Unranked ops keep their topological order; what they read always runs before them.
    for s in (log_first, reciprocal_first, _state()):
        assert sorted(s.order) == [0, 1, 2, 3, 4] and s.order.index(1) < min(s.order.index(2), s.order.index(3))


def test_boxes_are_where_clamping_keeps_float_masters():
    s = _state(boxes={1: (-1.0, 1.0)})
    assert float(s.masters[1].detach().min()) >= 1.0  # drawn from [1, 9]: outside the box
    s.clamp_masters()
    assert float(s.masters[1].detach().abs().max()) <= 1.0
    free = _state()
    before = free.masters[1].detach().clone()
    free.clamp_masters()
    assert torch.equal(free.masters[1], before)


def test_redraw_writes_only_the_leaves_named_and_counts_no_restart():
    s = _state()
    before = {v: m.detach().clone() for v, m in s.masters.items()}
    s.redraw("wide", {1})
    assert torch.equal(s.masters[0], before[0]) and not torch.equal(s.masters[1], before[1])
    s.redraw("fill")
    assert len(torch.unique(s.masters[0])) == 1  # one repeated integer
    assert s.restarts == 0


def test_redraw_non_finite_replaces_just_the_nan_and_inf_float_elements():
    s = _state()
    with torch.no_grad():
        s.masters[1][2] = math.nan
        s.masters[1][5] = -math.inf
    kept, ints = s.masters[1].detach().clone(), s.masters[0].detach().clone()
    s.redraw_non_finite()
    x = s.masters[1].detach()
    assert torch.isfinite(x).all()
    others = [k for k in range(8) if k not in (2, 5)]
    assert torch.equal(x[others], kept[others]) and torch.equal(s.masters[0], ints)
    assert s.restarts == 0


def test_the_search_counts_restarts_and_draws_integers_in_turn(monkeypatch):
    s = gradient._Search(_graph(), 0, INIT, proxy=True)
    seen = []
    draw = SearchState._draw
    monkeypatch.setattr(SearchState, "_draw", lambda self, v, how: seen.append((v, how)) or draw(self, v, how))
    for k in range(1, len(DRAWS) + 2):
        s.restart()
        assert s.restarts == k
    assert [how for v, how in seen if v == 0] == [*DRAWS, DRAWS[0]]
    seen.clear()
    s.restart({0})
    assert [v for v, _ in seen] == [0] and s.restarts == len(DRAWS) + 2


def test_first_invalid_stops_at_the_first_op_in_repair_order_and_reuses_runs(monkeypatch):
    s = _state(narrow={"Log2": 0, "Reciprocal": 1})
    with torch.no_grad():
        s.masters[0].fill_(3.0)  # n = 3: Log2(-3) is NaN, Reciprocal(-3) is finite
    bad, env, _ = s.first_invalid()
    assert bad == 3 and 5 in env and 4 not in env  # the Reciprocal, after it in repair order, did not run
    with torch.no_grad():
        s.masters[0].fill_(-4.0)
    assert s.first_invalid()[0] is None
    runs = []
    run_inst = Runner.run_inst
    monkeypatch.setattr(Runner, "run_inst", lambda self, k, *a: runs.append(k) or run_inst(self, k, *a))
    with torch.no_grad():
        s.masters[1].fill_(-1.0)  # Sqrt(-1): only the Sqrt reads x, so only it runs again
    assert s.first_invalid()[0] == 4 and runs == [4]
