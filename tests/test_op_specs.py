"""Every operator spec agrees with PyTorch and with ONNX on every value it makes.

Each op is generated alone into small graphs (so it is inserted forward and
backward, with binned attributes), materialized, run, exported with every
value exposed, and ONNX shape inference (with declared output types removed)
must derive exactly the GraphIR's shape and dtype for each value. The specs
added to reach particular backend converters export the ONNX op they target,
and the indexing specs take any index value.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.campaign.op_support import probe_graph, sig_key
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.materialize.validate import check_agreement
from nnsmith_cov.ops import ALL_OPS, op_by_name, pool
from nnsmith_cov.search.sampling import sample_values

SEEDS = range(10)


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda o: o.name())
def test_spec_agrees_with_torch_and_onnx(op):
    directions: dict[str, int] = {"forward": 0, "backward": 0}
    for seed in SEEDS:
        try:
            gen = generate(GenConfig(nodes=3, ops=[op]), seed)
        except GenerationError:
            continue
        for name, d in zip(gen.record.ops, gen.record.directions):
            directions[d] += name == op.name()
        agreement = check_agreement(gen.graph, sample_values(gen.graph, seed))
        assert agreement.ok, f"seed {seed}: {agreement}\n{gen.graph.text()}"
    assert directions["forward"] > 0, f"{op.name()} was never inserted forward"
    if op.n_outputs() == 1:
        assert directions["backward"] > 0, f"{op.name()} was never inserted backward"


# Each spec added to reach a backend converter, and the ONNX op type its single-op export
# must contain: an exporter change that decomposes one of them (or stops emitting it) fails here.
TARGETS: dict[str, tuple[str, ...]] = {
    "Softplus": ("Softplus",),
    "Mish": ("Mish",),
    "Asinh": ("Asinh",),
    "Celu": ("Celu",),
    "ThresholdedRelu": ("ThresholdedRelu",),
    "Shrink": ("Shrink",),
    "IsNaN": ("IsNaN",),
    "IsInf": ("IsInf",),
    "BitwiseNot": ("BitwiseNot",),
    "TypeAs": ("CastLike",),
    "GreaterEqual": ("GreaterOrEqual",),
    "LessEqual": ("LessOrEqual",),
    "BitwiseAnd": ("BitwiseAnd",),
    "BitwiseOr": ("BitwiseOr",),
    "BitwiseXor": ("BitwiseXor",),
    "BitShift": ("BitShift",),
    "LpPool2d": ("LpPool",),
    "GlobalMaxPool": ("GlobalMaxPool",),
    "GlobalLpPool": ("GlobalLpPool",),
    "LocalResponseNorm": ("LRN",),
    "Einsum": ("Einsum",),
    "SpaceToDepth": ("SpaceToDepth",),
    "GridSample": ("GridSample",),
    "AffineGrid": ("AffineGrid",),
    "ReduceLogSumExp": ("ReduceLogSumExp",),
    "ReduceL1": ("ReduceL1",),
    "ReduceL2": ("ReduceL2",),
    "ReduceSumSquare": ("ReduceSumSquare",),
    "GatherND": ("GatherND",),
    "ScatterValue": ("ScatterElements",),
    "ScatterAdd": ("ScatterElements",),
    "ScatterReduce": ("ScatterElements",),
    "IndexPut": ("ScatterND",),
    "OneHot": ("OneHot",),
    "FakeQuantize": ("QuantizeLinear", "DequantizeLinear"),
    "FakeQuantizePerChannel": ("QuantizeLinear", "DequantizeLinear"),
}


@pytest.mark.parametrize("name", TARGETS)
def test_spec_exports_the_onnx_op_it_targets(name):
    op = op_by_name(name)
    assert not op.vulnerable, "the value search's vulnerable set stays as it is"
    for sig in op.sigs:
        graph = probe_graph(op, sig)
        assert graph is not None, f"no single-op graph for {sig_key(sig)}"
        model = onnx.load_from_string(materialize_and_export(graph, sample_values(graph, 0)).onnx)
        found = {node.op_type for node in model.graph.node}
        assert set(TARGETS[name]) <= found, f"{name} {sig_key(sig)} exported as {sorted(found)}"


def test_an_op_exports_at_an_opset_with_the_first_input_dtypes_its_floors_allow():
    reduce_max = op_by_name("ReduceMax")  # int8 and uint8 from opset 12, bool from 20
    assert reduce_max.exports_at(DType.float32, 11) and not reduce_max.exports_at(DType.int8, 11)
    assert reduce_max.exports_at(DType.int8, 12) and not reduce_max.exports_at(DType.bool, 19)
    assert {DType.int8, DType.uint8, DType.bool}.isdisjoint(reduce_max.export_dtypes(11))
    assert reduce_max.export_dtypes(20) == {sig[0][0] for sig in reduce_max.sigs}
    assert reduce_max.export_dtypes(12) == reduce_max.export_dtypes(20) - {DType.bool}


def test_scatters_reach_each_reduction():
    reductions = {"ScatterAdd": set(), "ScatterReduce": set()}
    for name, seen in reductions.items():
        for seed in range(10):
            try:
                graph = generate(GenConfig(nodes=2, ops=[op_by_name(name)]), seed).graph
            except GenerationError:
                continue
            model = onnx.load_from_string(materialize_and_export(graph, sample_values(graph, seed)).onnx)
            seen |= {a.s.decode() for n in model.graph.node for a in n.attribute if a.name == "reduction"}
    assert reductions == {"ScatterAdd": {"add"}, "ScatterReduce": {"max", "min"}}


# Specs whose index input the op wraps into range itself.
INDEX_SPECS = (
    "GatherElements",
    "IndexSelect",
    "GatherND",
    "ScatterValue",
    "ScatterAdd",
    "ScatterReduce",
    "IndexPut",
    "OneHot",
)


@pytest.mark.parametrize("name", INDEX_SPECS)
@pytest.mark.parametrize("fill", [-(2**62) - 3, -1, 2**62 + 5])
def test_any_index_value_is_a_valid_position_in_torch_and_onnx(name, fill):
    """Whatever int64 values the value search gives an index, the op runs, and its ONNX
    model runs in ORT (which checks positions) and computes what torch does."""
    op = op_by_name(name)
    sigs = [s for s in op.sigs if s[0][0] is DType.float32] or op.sigs[:1]
    tried = 0
    for seed in range(6):
        try:
            graph = generate(GenConfig(nodes=1, ops=[type(name, (op,), {"sigs": sigs})]), seed).graph
        except GenerationError:
            continue
        values = sample_values(graph, seed)
        (inst,) = graph.insts
        for i, v in enumerate(inst.inputs):
            if graph.types[v].dtype is DType.int64 and (i > 0 or name == "OneHot"):
                values[v] = np.full(graph.types[v].shape, fill, dtype=np.int64)
                values[v].flat[::2] = fill // 3  # not all equal
        exported = materialize_and_export(graph, values)
        with torch.no_grad():
            expected = exported.module(*exported.inputs)
        session = ort.InferenceSession(exported.onnx, providers=["CPUExecutionProvider"])
        got = session.run(None, {f"i{v}": values[v] for v in graph.inputs})
        for want, have in zip(expected, got):
            np.testing.assert_allclose(have, want.numpy(), rtol=1e-3, atol=1e-3)
        tried += 1
    assert tried >= 3


@settings(max_examples=200, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    window=st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(1, 5), st.integers(1, 5)),
    dtype=st.sampled_from([torch.float16, torch.float32, torch.float64]),
    prefix=st.booleans(),
)
def test_lp_pool_window_sums_are_the_window_sums_rounded_once(shape, window, dtype, prefix):
    # Prefix sums (forced with `prefix`, else where windows overlap much) give each window's
    # sum to within one rounding to the input's dtype (float64: of its running totals).
    kh, kw, sh, sw = window
    assume(kh <= shape[0] and kw <= shape[1])
    pad = (kh // 2, kw // 3)
    rng = torch.Generator().manual_seed(sum(shape))
    x = (torch.rand(2, 3, *shape, generator=rng, dtype=torch.float64) * 9).to(dtype)
    exact = F.avg_pool2d(x.double(), (kh, kw), (sh, sw), pad, divisor_override=1)
    got = pool.window_sums(x, (kh, kw), (sh, sw), pad, prefix=prefix or None)
    assert got.dtype == dtype and got.shape == exact.shape
    if dtype == torch.float64:  # up to float64's rounding of the running totals
        assert torch.allclose(got, exact, rtol=0, atol=1e-14 * float(x.abs().sum()))
    elif prefix:  # within one rounding of the exact sum
        assert torch.allclose(got.double(), exact, rtol=torch.finfo(dtype).eps, atol=0)
    else:  # PyTorch's own pool adds in the input's precision (float32 here)
        assert torch.allclose(got.double(), exact, rtol=1e-4 if dtype == torch.float32 else 1e-2)


def test_lp_pool_takes_prefix_sums_only_where_windows_overlap_much(monkeypatch):
    assert pool.prefix_sums_pay((30, 94), (22, 84), (1, 2), (11, 42))  # 26,784 windows of 1,848
    assert not pool.prefix_sums_pay((8, 8), (2, 2), (2, 2), (0, 0))  # 16 windows of 4, no overlap
    calls = []
    monkeypatch.setattr(pool.F, "avg_pool2d", lambda *a, **k: calls.append(a[1]) or torch.zeros(1, 1, 1, 1))
    pool.window_sums(torch.rand(1, 1, 30, 94), (22, 84), (1, 2), (11, 42))
    assert calls == []
    pool.window_sums(torch.rand(1, 1, 8, 8), (2, 2), (2, 2), (0, 0))
    assert calls == [(2, 2)]
