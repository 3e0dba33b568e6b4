"""The precision-aware oracle: rounding, discontinuities and plain bugs, told apart by a float64 re-run."""

from __future__ import annotations

import numpy as np
import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.campaign.protocol import encode_arrays
from nnsmith_cov.campaign.testcase import CaseSettings, Prepared, judge
from nnsmith_cov.campaign.worker_handle import Reply
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.oracle.compare import compare_outputs, tolerance_for
from nnsmith_cov.oracle.exact import exact_reference
from nnsmith_cov.oracle.precision import judge_precision

F16, F32, I64 = DType.float16, DType.float32, DType.int64
HALF = {"float16": (5e-2, 1e-2)}


def _net(leaves, body, weights=()) -> GraphIR:
    """A graph from leaf types and (op, attrs, inputs, output type) rows; the last value is the output."""
    types = [TensorType(s, d) for s, d in leaves] + [TensorType(s, d) for *_, (s, d) in body]
    n = len(leaves)
    insts = [Inst(op, attrs, ins, (n + k,)) for k, (op, attrs, ins, _) in enumerate(body)]
    g = GraphIR(types, [v for v in range(n) if v not in weights], list(weights), insts, [len(types) - 1])
    g.check()
    return g


def _torch_outputs(graph: GraphIR, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What PyTorch computes at the graph's own dtypes (the oracle a campaign would record)."""
    from nnsmith_cov.materialize.torch_module import GraphModule, input_tensors
    from nnsmith_cov.ops import op_by_name

    leaves = {int(k[1:]): v for k, v in values.items()}
    module = GraphModule(graph, op_by_name, leaves)
    outs = module(*input_tensors(graph, leaves))
    return {f"o{v}": t.detach().numpy() for v, t in zip(graph.outputs, outs)}


def _verdict(graph, values, actual, seed=0):
    oracle = _torch_outputs(graph, values)
    mismatches = compare_outputs(oracle, actual, 1e-2, 1e-3, HALF)
    assert mismatches, "the fixture must mismatch"
    tol = lambda dt: tolerance_for(dt, 1e-2, 1e-3, HALF)
    return judge_precision(graph, values, oracle, actual, mismatches, tol, seed)


def _fp16_sum():
    """2048 + 1 + ... + 1 (eight ones) - 2048 in float16, added up one term at a time: PyTorch
    rounds after each step (2049 is 2048 in float16), so it ends at 0; the exact value is 8."""
    shape = (4,)
    leaves = [(shape, F16)] * 10
    body = [("Add", {}, (0, 1), (shape, F16))]
    body += [("Add", {}, (9 + k, 1 + k), (shape, F16)) for k in range(1, 8)]
    body += [("Sub", {}, (17, 9), (shape, F16))]
    g = _net(leaves, body, weights=tuple(range(1, 10)))
    values = {"i0": np.full(shape, 2048.0, np.float16)}
    values |= {f"w{v}": np.ones(shape, np.float16) for v in range(1, 9)}
    values["w9"] = np.full(shape, 2048.0, np.float16)
    return g, values


def test_fp16_sum_accumulated_closer_to_exact_is_precision():
    g, values = _fp16_sum()
    assert _torch_outputs(g, values)["o18"].tolist() == [0.0] * 4  # the fixture's premise
    # A backend that accumulates in float32 and rounds once, as ORT's fp16-in-fp32 casts do.
    exact = np.full((4,), 8.0, np.float16)
    v = _verdict(g, values, {"o18": exact})
    assert v is not None and v.category == "precision", v
    assert "4 of 4" in v.rule and "torch by 8" in v.rule


def test_fp16_backend_farther_from_exact_than_torch_stays_bug():
    g, values = _fp16_sum()
    v = _verdict(g, values, {"o18": np.full((4,), 30.0, np.float16)})
    assert v is not None and v.category == "bug"
    assert v.rule.startswith("exact:") and "float64 8" in v.rule and "backend 30" in v.rule


def test_plainly_wrong_float32_backend_stays_bug():
    # MatMul then Relu, float32: PyTorch is within rounding of float64, the backend is off by 1.
    rng = np.random.default_rng(3)
    g = _net([((3, 4), F32), ((4, 2), F32)], [("MatMul", {}, (0, 1), ((3, 2), F32)), ("Relu", {}, (2,), ((3, 2), F32))])
    values = {"i0": rng.normal(size=(3, 4)).astype(np.float32), "i1": rng.normal(size=(4, 2)).astype(np.float32)}
    wrong = _torch_outputs(g, values)["o3"].copy()
    wrong[1, 0] += 1.0
    v = _verdict(g, values, {"o3": wrong})
    assert v is not None and v.category == "bug"
    assert "on 1 of 1 bad elements" in v.rule and "o3[1, 0]" in v.rule


def _round_graph():
    shape = (4,)
    return _net([(shape, F32), (shape, F32)], [("Round", {}, (0,), (shape, F32)), ("Mul", {}, (2, 1), (shape, F32))])


def test_round_at_half_is_discontinuity():
    # Round(x) * 10 with x at 0.5 and 2.5: PyTorch rounds half to even (0, 2), the backend away
    # from zero (1, 3); both sit exactly on Round's jump.
    g = _round_graph()
    values = {"i0": np.array([0.5, 1.5, 2.5, 3.2], np.float32), "i1": np.full((4,), 10.0, np.float32)}
    v = _verdict(g, values, {"o3": np.array([10.0, 20.0, 30.0, 30.0], np.float32)})
    assert v is not None and v.category == "discontinuity", v
    assert "all 2 bad elements move when Round#0 jumps (at as few as 1 of its elements)" in v.rule


def test_wrong_element_away_from_the_jump_is_still_a_bug():
    # The same flips at 0.5 and 2.5, but 3.2 is far from any jump: 70 is no rounding of it.
    g = _round_graph()
    values = {"i0": np.array([0.5, 1.5, 2.5, 3.2], np.float32), "i1": np.full((4,), 10.0, np.float32)}
    v = _verdict(g, values, {"o3": np.array([10.0, 20.0, 30.0, 70.0], np.float32)})
    assert v is not None and v.category == "bug"
    assert "o3[3]" in v.rule


def test_flip_must_reach_the_backends_value():
    # 2.5 may round to 2 or 3 (20 or 30), not to 90: the jump does not excuse any value.
    g = _round_graph()
    values = {"i0": np.array([0.2, 1.2, 2.5, 3.2], np.float32), "i1": np.full((4,), 10.0, np.float32)}
    v = _verdict(g, values, {"o3": np.array([0.0, 10.0, 90.0, 30.0], np.float32)})
    assert v is not None and v.category == "bug"


def test_argmax_tie_is_discontinuity():
    # Two equal maxima: PyTorch returns the first, another compiler may return the second.
    g = _net([((2, 3), F32)], [("ArgMax", {"axis": 1, "keepdim": False}, (0,), ((2,), I64))])
    values = {"i0": np.array([[1.0, 4.0, 4.0], [0.0, 5.0, 1.0]], np.float32)}
    oracle = _torch_outputs(g, values)
    assert oracle["o1"].tolist() == [1, 1]
    v = _verdict(g, values, {"o1": np.array([2, 1], np.int64)})
    assert v is not None and v.category == "discontinuity", v
    # Not a tie: the second row's maximum is clear, so index 2 there is wrong.
    v = _verdict(g, values, {"o1": np.array([1, 2], np.int64)})
    assert v is not None and v.category == "bug"


def test_shape_mismatch_has_no_numeric_verdict():
    g, values = _fp16_sum()
    oracle = _torch_outputs(g, values)
    actual = {"o18": np.zeros((5,), np.float16)}
    mismatches = compare_outputs(oracle, actual)
    assert [m.reason for m in mismatches] == ["shape"]
    assert judge_precision(g, values, oracle, actual, mismatches, lambda dt: (1e-2, 1e-3)) is None


def test_missing_values_give_no_exact_reference():
    g = _round_graph()
    values = {"i0": np.array([0.5, 1.5, 2.5, 3.2], np.float32), "i1": np.full((4,), 10.0, np.float32)}
    oracle = _torch_outputs(g, values)
    actual = {"o3": oracle["o3"] + 5}
    mismatches = compare_outputs(oracle, actual)
    v = judge_precision(g, {"i0": values["i0"]}, oracle, actual, mismatches, lambda dt: (1e-2, 1e-3))
    assert v is not None and v.category == "bug" and v.rule.startswith("no exact reference: no values for i1")


def test_exact_reference_is_float64_and_deterministic():
    g, values = _fp16_sum()
    a, b = exact_reference(g, values, seed=5), exact_reference(g, values, seed=5)
    assert a.outputs["o18"].dtype == np.float64 and a.outputs["o18"].tolist() == [8.0] * 4
    assert a.jumping == [] and a.flips == []
    g = _round_graph()
    values = {"i0": np.array([0.5, 1.5, 2.5, 3.2], np.float32), "i1": np.full((4,), 10.0, np.float32)}
    a, b = exact_reference(g, values, seed=5), exact_reference(g, values, seed=5)
    assert a.jumping == ["Round#0"] and [f.op for f in a.flips] == [f.op for f in b.flips]
    assert all(np.array_equal(f.outputs["o3"], h.outputs["o3"]) for f, h in zip(a.flips, b.flips))


def test_judge_records_the_class_and_rule():
    # Through the campaign's oracle: the finding carries the class and the rule into meta.json.
    g, values = _fp16_sum()
    oracle = _torch_outputs(g, values)
    prepared = Prepared(g, 7, values, oracle, b"", None)
    settings = CaseSettings(backends=["ort"])
    reply = Reply({"kind": "outputs", "outputs": encode_arrays({"o18": np.full((4,), 8.0, np.float16)})}, "execute")
    finding = judge(prepared, "ort", "opt", reply, settings)
    assert finding is not None and finding.symptom == "inconsistency"
    assert finding.category == "precision" and finding.header()["rule"].startswith("precision:")
    reply = Reply({"kind": "outputs", "outputs": encode_arrays({"o18": np.full((4,), 64.0, np.float16)})}, "execute")
    finding = judge(prepared, "tvm", "opt", reply, settings)
    assert finding is not None and finding.category == "bug" and finding.rule.startswith("exact:")


def test_fp16_product_rounded_across_floor_is_discontinuity():
    # Floor(x * w) in float16: 3.03 * 2.97 is 8.99914 exactly but 9.0 in float16, so PyTorch
    # says 9; a backend computing the product in float32 says 8, the float64 value's floor.
    shape = (2,)
    g = _net([(shape, F16), (shape, F16)], [("Mul", {}, (0, 1), (shape, F16)), ("Floor", {}, (2,), (shape, F16))])
    values = {"i0": np.array([3.03, 1.0], np.float16), "i1": np.array([2.97, 1.25], np.float16)}
    assert _torch_outputs(g, values)["o3"].tolist() == [9.0, 1.0]
    v = _verdict(g, values, {"o3": np.array([8.0, 1.0], np.float16)})
    assert v is not None and v.category == "discontinuity" and "Floor#1" in v.rule, v


def test_op_without_float64_kernel_runs_at_its_own_dtype(monkeypatch):
    # An op whose forward refuses float64 runs at the graph's dtype on the rounded float64 inputs;
    # the verdict still comes, and the rule names the op.
    from nnsmith_cov.ops import op_by_name

    round_op = op_by_name("Round")
    plain = round_op.forward

    def picky(cls, a, *xs):
        if any(x.dtype == torch.float64 for x in xs):
            raise RuntimeError("\"round\" not implemented for 'Double'")
        return plain(a, *xs)

    monkeypatch.setattr(round_op, "forward", classmethod(picky))
    g = _round_graph()
    values = {"i0": np.array([0.5, 1.5, 2.5, 3.2], np.float32), "i1": np.full((4,), 10.0, np.float32)}
    assert exact_reference(g, values).own_dtype == ["Round#0"]
    v = _verdict(g, values, {"o3": np.array([10.0, 20.0, 30.0, 30.0], np.float32)})
    assert v is not None and v.category == "discontinuity" and "at their own dtype: Round#0" in v.rule


def test_a_fault_of_the_reference_keeps_the_finding_a_bug(monkeypatch):
    import nnsmith_cov.oracle.precision as precision

    def broken(*args, **kwargs):
        raise KeyError("o9")

    monkeypatch.setattr(precision, "exact_reference", broken)
    g, values = _fp16_sum()
    v = _verdict(g, values, {"o18": np.full((4,), 8.0, np.float16)})
    assert v is not None and v.category == "bug" and v.rule == "no exact reference: KeyError: 'o9'"
