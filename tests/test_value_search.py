"""Value search: losses, proxy derivatives, Algorithm 3 on handcrafted and generated graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import Attrs, OpSpec
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.generator import GenConfig, generate
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.ops import ALL_OPS, op_by_name
from nnsmith_cov.search.gradient import search_values

floats = arrays(np.float64, st.integers(1, 6), elements=st.floats(-1e6, 1e6, allow_nan=False))


@given(f=floats)
def test_le0_loss_positive_iff_predicate_violated(f):
    assert (float(num.le0(torch.from_numpy(f))) > 0) == bool((f > 0).any())


@given(f=floats.filter(lambda a: not ((a > -1e-9) & (a < 0)).any()))
def test_lt0_loss_positive_iff_predicate_violated(f):
    # Values within epsilon below 0 are where the strict form's epsilon acts.
    assert (float(num.lt0(torch.from_numpy(f))) > 0) == bool((f >= 0).any())


VULNERABLE = [op for op in ALL_OPS if op.vulnerable]
FLOAT_DOMAIN = [op for op in VULNERABLE if op.name() in {"Sqrt", "Log", "Log2", "Asin", "Acos", "Exp", "Reciprocal"}]


def test_every_vulnerable_op_states_a_domain():
    # A vulnerable op without losses would leave the search nothing to follow.
    missing = [op.name() for op in VULNERABLE if not any("domain" in vars(c) for c in op.__mro__ if c is not OpSpec)]
    assert missing == []
    x = torch.tensor([-2.0, 0.0, 1e30], dtype=torch.float32)
    assert float(op_by_name("CastI32").domain(Attrs(), x)[0]) > 0


@pytest.mark.parametrize("op", FLOAT_DOMAIN, ids=lambda o: o.name())
@settings(max_examples=60, deadline=None)
@given(x=arrays(np.float32, 5, elements=st.floats(-1e4, 1e4, width=32)))
def test_zero_loss_means_finite_output(op, x):
    t = torch.from_numpy(x)
    losses = op.domain(Attrs(), t)
    out = op.forward(Attrs(), t)
    if all(float(v) <= 0 for v in losses):
        assert torch.isfinite(out).all()
    if not torch.isfinite(out).all():
        assert any(float(v) > 0 for v in losses)


@settings(max_examples=80, deadline=None)
@given(
    x=arrays(np.float32, 4, elements=st.floats(-50, 50, width=32)),
    y=arrays(np.float32, 4, elements=st.floats(-50, 50, width=32)),
)
def test_binary_domains_are_sound(x, y):
    for name in ("Div", "Pow"):
        op = op_by_name(name)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        if all(float(v) <= 0 for v in op.domain(Attrs(), tx, ty)):
            assert torch.isfinite(op.forward(Attrs(), tx, ty)).all(), name


@pytest.mark.parametrize(
    "name, x, attrs",
    [
        ("Relu", [-2.0, -0.5], {}),
        ("Floor", [0.3, 1.7], {}),
        ("Ceil", [0.3, 1.7], {}),
        ("Round", [0.3, 1.7], {}),
        ("Sign", [-0.3, 1.7], {}),
        ("HardSigmoid", [-5.0, 5.0], {}),
        ("HardSwish", [-5.0, -4.0], {}),
        ("Clip", [-3.0, 3.0], {"lo": -1.0, "hi": 1.0}),
    ],
)
def test_proxy_derivative_nonzero_where_true_gradient_is_zero(name, x, attrs):
    op = op_by_name(name)
    true_x = torch.tensor(x, requires_grad=True)
    op.forward(Attrs(attrs), true_x).sum().backward()
    assert not true_x.grad.any()
    proxy_x = torch.tensor(x, requires_grad=True)
    out = op.forward_proxy(Attrs(attrs), proxy_x)
    assert torch.equal(out, op.forward(Attrs(attrs), torch.tensor(x)))  # same values
    out.sum().backward()
    assert (proxy_x.grad > 0).all()  # the functions' trends are increasing


def _graph(insts: list[tuple[str, tuple[int, ...]]], n_leaves: int, shape=(8,), weights=()) -> GraphIR:
    t = TensorType(shape, DType.float32)
    n = n_leaves + len(insts)
    body = [Inst(op, {}, ins, (n_leaves + k,)) for k, (op, ins) in enumerate(insts)]
    inputs = [v for v in range(n_leaves) if v not in weights]
    g = GraphIR([t] * n, inputs, list(weights), body, [n - 1])
    g.check()
    return g


def test_search_repairs_sqrt_of_difference():
    # Sqrt(Sub(x, w)) with x < w everywhere at the start.
    g = _graph([("Sub", (0, 1)), ("Sqrt", (2,))], 2, weights=(1,))
    r = search_values(g, 0, "gradient", budget_ms=2000, init=(-1.0, 0.0), max_iters=500)
    assert r.ok
    x, w = r.values[0], r.values[1]
    assert (x - w >= 0).all()
    assert np.allclose(r.oracle[3], np.sqrt(x - w))


def test_none_method_reports_invalid_values():
    g = _graph([("Sub", (0, 1)), ("Sqrt", (2,))], 2, weights=(1,))
    r = search_values(g, 0, "none", init=(-1.0, 0.0))
    assert not r.ok and r.failed_op is not None and r.oracle == {}


def test_nan_inside_the_graph_is_caught_even_when_outputs_are_finite():
    # Log(x) is -inf at 0, but Exp(-inf) = 0 and Sigmoid keeps it finite.
    g = _graph([("Relu", (0,)), ("Neg", (1,)), ("Log", (2,)), ("Exp", (3,))], 1)
    r = search_values(g, 0, "none", init=(0.5, 1.0))
    assert not r.ok and r.failed_op == "Log"


def test_search_is_reproducible_with_an_iteration_bound():
    g = generate(GenConfig(nodes=10, ops=ALL_OPS), 4).graph
    a = search_values(g, 4, max_iters=64, budget_ms=60_000)
    b = search_values(g, 4, max_iters=64, budget_ms=60_000)
    assert a.ok == b.ok and all(np.array_equal(a.values[v], b.values[v]) for v in a.values)


def test_generated_graphs_get_valid_values_and_an_oracle():
    found = 0
    for seed in range(12):
        g = generate(GenConfig(nodes=8, ops=ALL_OPS), seed).graph
        r = search_values(g, seed, max_iters=200, budget_ms=60_000)
        if r.ok:
            found += 1
            assert set(r.oracle) == set(g.outputs)
            for v, a in r.oracle.items():
                assert a.shape == g.types[v].shape
                if a.dtype.kind == "f":
                    assert np.isfinite(a).all()
    assert found >= 8


def test_unknown_method_rejected():
    g = _graph([("Relu", (0,))], 1)
    with pytest.raises(ValueError, match="unknown search method"):
        search_values(g, 0, "annealing")
