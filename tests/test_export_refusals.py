"""Export refusals of the fuzzer's own making: graphs the generator could draw that PyTorch's
exporter refuses, or exports into a model ONNX refuses. Each small graph below is the shape of
a finding a 2-hour ORT+TVM soak filed as 'ours'; the tests show the export failing where the
spec or the plan would have allowed it, and passing where they now lead."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.export_plan import static_input_dims
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.materialize.onnx_export import ExportError
from nnsmith_cov.materialize.torch_module import input_name, output_name
from nnsmith_cov.ops import op_by_name
from nnsmith_cov.oracle.refusal import error_class
from nnsmith_cov.search.gradient import search_values

F32, U8, I8, I64 = DType.float32, DType.uint8, DType.int8, DType.int64


def _graph(types: list[tuple[tuple[int, ...], DType]], inputs: list[int], insts: list[Inst]) -> GraphIR:
    """A graph over values 0..n-1; leaves not in `inputs` are weights; the last value is the output."""
    leaves = set(range(len(types))) - {v for i in insts for v in i.outputs}
    tt = [TensorType(s, d) for s, d in types]
    g = GraphIR(tt, inputs, sorted(leaves - set(inputs)), insts, [len(types) - 1])
    g.check(lambda name: op_by_name(name) is not None)
    return g


def _export(graph: GraphIR, opset: int, dynamic: list[tuple[int, int]]) -> onnx.ModelProto:
    """Exported and checked (materialize_and_export runs the full ONNX checker)."""
    search = search_values(graph, 0)
    assert search.ok
    plan = dataclasses.replace(graph, opset=opset, dynamic=dynamic)
    return onnx.load_from_string(materialize_and_export(plan, search.values).onnx)


def _all_dims(graph: GraphIR) -> list[tuple[int, int]]:
    return [(v, d) for v in graph.inputs for d in range(len(graph.types[v].shape))]


# -- a convolution's kernel and an adaptive pool's window must be numbers to the exporter ------
def _conv_of_computed_weight() -> GraphIR:
    # x [1, 4, 9], weight Relu(w) [2, 4, 3] from a model input, bias [2]
    types = [((1, 4, 9), F32), ((2, 4, 3), F32), ((2,), F32), ((2, 4, 3), F32), ((1, 2, 7), F32)]
    attrs = {"dilation0": 1, "form": "bias", "groups": 1, "padding0": 0, "stride0": 1}
    return _graph(types, [0, 1], [Inst("Relu", {}, (1,), (3,)), Inst("Conv1d", attrs, (0, 3, 2), (4,))])


def _adaptive_pool(op: str) -> GraphIR:
    return _graph([((1, 2, 4, 6), F32), ((1, 2, 2, 3), F32)], [0], [Inst(op, {"out_h": 2, "out_w": 3}, (0,), (1,))])


def test_a_computed_kernel_keeps_its_inputs_static_and_the_data_input_stays_free():
    g = _conv_of_computed_weight()
    fixed = static_input_dims(g, op_by_name)
    assert fixed == {(1, 0), (1, 1), (1, 2)}
    with pytest.raises(ExportError, match="kernel of unknown shape"):
        _export(g, 17, [(1, 2)])
    model = _export(g, 17, [p for p in _all_dims(g) if p not in fixed])
    x = model.graph.input[0].type.tensor_type.shape.dim
    assert all(d.dim_param for d in x)  # the data input's dims are all symbolic


def test_a_kernel_that_is_a_model_input_keeps_only_its_kernel_dims_static():
    g = _conv_of_computed_weight()
    g = _graph(
        [((1, 4, 9), F32), ((2, 4, 3), F32), ((2,), F32), ((1, 2, 7), F32)],
        [0, 1],
        [dataclasses.replace(g.insts[1], inputs=(0, 1, 2), outputs=(3,))],
    )
    assert static_input_dims(g, op_by_name) == {(1, 2)}
    _export(g, 17, [(0, 0), (0, 2), (1, 0), (1, 1)])


@pytest.mark.parametrize("op", ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d"])
def test_an_adaptive_pool_keeps_its_spatial_input_dims_static(op):
    g = _adaptive_pool(op)
    assert static_input_dims(g, op_by_name) == {(0, 2), (0, 3)}
    with pytest.raises(ExportError, match="input size not accessible"):
        _export(g, 17, [(0, 2)])
    _export(g, 17, [(0, 0), (0, 1)])


def test_generated_plans_never_make_a_kernel_or_pool_window_symbolic():
    """With every graph exported dynamic, no plan names a dim the exporter must read, and every
    graph exports; some plans still have symbolic dims (the filter does not drop them all)."""
    names = ("Conv1d", "Conv2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Relu", "Sin", "Add")
    cfg = GenConfig(nodes=4, ops=[op_by_name(n) for n in names], dynamic_prob=1.0, opsets=(17,))
    dynamic = 0
    for seed in range(16):
        try:
            gen = generate(cfg, seed)
        except GenerationError:
            continue
        g = gen.graph
        assert not set(g.dynamic) & static_input_dims(g, op_by_name)
        dynamic += bool(g.dynamic)
        search = search_values(g, 0)
        if search.ok:
            materialize_and_export(g, search.values)
    assert dynamic >= 4


# -- LayerNorm's normalized shape is a constant, whatever dims are symbolic ----------------------
def test_layer_norm_of_a_weight_with_symbolic_dims_exports():
    # x [3, 4, 5]; weight and bias [4, 5], the weight a model input with symbolic dims
    g = _graph(
        [((3, 4, 5), F32), ((4, 5), F32), ((4, 5), F32), ((3, 4, 5), F32)],
        [0, 1],
        [Inst("LayerNorm", {}, (0, 1, 2), (3,))],
    )
    for opset in (11, 17):
        _export(g, opset, _all_dims(g))


# -- fake quantization to 0..127 below opset 13 ------------------------------------------------
@pytest.mark.parametrize("opset", [11, 12, 13, 20])
def test_fake_quantize_to_0_127_exports_at_every_opset_and_agrees_with_torch(opset):
    attrs = {"scale": 0.0625, "lo": 0, "hi": 127, "zero": 88}
    g = _graph([((64,), F32), ((64,), F32)], [0], [Inst("FakeQuantize", attrs, (0,), (1,))])
    x = np.linspace(-12.0, 12.0, 64, dtype=np.float32)  # past both ends of the grid
    exported = materialize_and_export(dataclasses.replace(g, opset=opset), {0: x})
    want = exported.module(*exported.inputs)[0].numpy()
    sess = ort.InferenceSession(exported.onnx, providers=["CPUExecutionProvider"])
    (got,) = sess.run([output_name(1)], {input_name(0): x})
    np.testing.assert_array_equal(got, want)
    assert want.max() == (127 - 88) * 0.0625 and want.min() == -88 * 0.0625  # both ends clipped


# -- integer arithmetic where ONNX's schema takes the dtype only from a later opset ---------------
def _concat_then_add() -> GraphIR:
    # below 14 the exporter casts uint8 around Add, but not the Concat's output
    types = [((5,), U8), ((3,), U8), ((8,), U8), ((8,), U8), ((8,), U8)]
    return _graph(types, [0, 2], [Inst("Concat2", {"axis": 0}, (0, 1), (3,)), Inst("Add", {}, (2, 3), (4,))])


def _max_of_int8() -> GraphIR:
    # with symbolic dims the exporter loses the dtype and writes Max of int64 below opset 12
    return _graph([((2, 3), I8), ((2, 3), I8), ((2, 3), I8)], [0, 1], [Inst("Max", {}, (0, 1), (2,))])


@pytest.mark.parametrize(
    "make,op,dtype,dynamic",
    [(_concat_then_add, "Add", U8, False), (_max_of_int8, "Max", I8, True)],
    ids=["Add-u8", "Max-i8"],
)
def test_an_integer_op_is_floored_where_its_export_starts_to_work(make, op, dtype, dynamic):
    """Every opset the generator may pair the op with exports; every one below fails."""
    g = make()
    floor = op_by_name(op).opset_floor(dtype)
    dims = _all_dims(g) if dynamic else []
    for opset in range(MIN_OPSET, floor):
        with pytest.raises(ExportError, match="unsupported type"):
            _export(g, opset, dims)
    for opset in (floor, MAX_OPSET):
        _export(g, opset, dims)


def test_a_traced_size_where_the_exporter_needs_a_constant_is_ours():
    # the first line of the exporter's message, all a finding keeps of it
    message = (
        "Failed to export a node '%28 : Long(device=cpu) = onnx::Gather[axis=0](%25, %27), scope: "
        "nnsmith_cov.materialize.torch_module.GraphModule:: # nnsmith_cov/ops/norm.py:136:0"
    )
    verdict = error_class("torch", "export", "SymbolicValueError", message)
    assert verdict is not None and verdict.category == "ours" and verdict.rule.startswith("export-refusal")
