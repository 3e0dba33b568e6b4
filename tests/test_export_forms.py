"""Each ONNX form a spec draws (the forms real PyTorch exports write) builds a valid model
that ONNXRuntime loads and runs to PyTorch's outputs, for several seeds per form."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.materialize.torch_module import input_name, output_name
from nnsmith_cov.materialize.validate import check_agreement
from nnsmith_cov.ops import op_by_name
from nnsmith_cov.search.sampling import sample_values

SEEDS_PER_FORM = 3


def _graphs_with_form(name: str, form: str, want: int = SEEDS_PER_FORM) -> list[GraphIR]:
    """Single-op float32 graphs of `name` whose instance drew `form`."""
    spec = op_by_name(name)
    f32 = type(name, (spec,), {"sigs": [s for s in spec.sigs if s[0][0] is DType.float32]})
    found: list[GraphIR] = []
    for seed in range(200):
        try:
            graph = generate(GenConfig(nodes=1, ops=[f32]), seed).graph
        except GenerationError:
            continue
        if any(i.op == name and i.attrs.get("form") == form for i in graph.insts):
            found.append(graph)
            if len(found) == want:
                break
    return found


def _node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    return node


def _given(node: onnx.NodeProto, i: int) -> bool:
    """Whether optional input i of `node` is given (present and not the empty name)."""
    return len(node.input) > i and node.input[i] != ""


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


# (op, form, what its single-op model must look like)
FORMS = [
    ("Interpolate", "sizes", lambda m: _given(_node(m, "Resize"), 3) and not _given(_node(m, "Resize"), 2)),
    ("Interpolate", "scales", lambda m: _given(_node(m, "Resize"), 2) and not _given(_node(m, "Resize"), 3)),
    ("Clip", "both", lambda m: _given(_node(m, "Clip"), 1) and _given(_node(m, "Clip"), 2)),
    ("Clip", "min", lambda m: _given(_node(m, "Clip"), 1) and not _given(_node(m, "Clip"), 2)),
    ("Clip", "max", lambda m: not _given(_node(m, "Clip"), 1) and _given(_node(m, "Clip"), 2)),
    ("Conv2d", "bias", lambda m: _given(_node(m, "Conv"), 2) and "Add" not in _ops(m)),
    ("Conv2d", "add", lambda m: not _given(_node(m, "Conv"), 2) and "Add" in _ops(m)),
    ("ConvTranspose1d", "bias", lambda m: _given(_node(m, "ConvTranspose"), 2)),
    ("ConvTranspose1d", "add", lambda m: not _given(_node(m, "ConvTranspose"), 2) and "Add" in _ops(m)),
    ("Linear", "matmul_add", lambda m: {"MatMul", "Add"} <= _ops(m) and "Gemm" not in _ops(m)),
]


@pytest.mark.parametrize("name, form, shape_ok", FORMS, ids=[f"{f[0]}-{f[1]}" for f in FORMS])
def test_each_form_exports_the_onnx_form_and_ort_agrees_with_torch(name, form, shape_ok):
    graphs = _graphs_with_form(name, form)
    assert len(graphs) == SEEDS_PER_FORM, f"{name} drew the {form} form too rarely"
    for seed, graph in enumerate(graphs):
        values = sample_values(graph, seed)
        agreement = check_agreement(graph, values)
        assert agreement.ok, f"{agreement}\n{graph.text()}"
        exported = materialize_and_export(graph, values)
        model = onnx.load_from_string(exported.onnx)
        assert shape_ok(model), f"{name} {form}: {[(n.op_type, list(n.input)) for n in model.graph.node]}"
        session = ort.InferenceSession(exported.onnx, providers=["CPUExecutionProvider"])
        feed = {input_name(v): values[v] for v in graph.inputs}
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        with torch.no_grad():
            want = exported.module(*exported.inputs)
        for v, t in zip(exported.module.returned, want):
            np.testing.assert_allclose(got[output_name(v)], t.numpy(), rtol=1e-3, atol=1e-4, err_msg=graph.text())


def test_the_form_is_a_recorded_draw_that_a_seed_replays():
    spec = op_by_name("Interpolate")
    cfg = GenConfig(nodes=1, ops=[spec])
    forms = set()
    for seed in range(12):
        try:
            first = generate(cfg, seed)
        except GenerationError:
            continue
        assert generate(cfg, seed).graph.content_hash() == first.graph.content_hash()
        drawn = [v for label, v in first.record.draws if label == "interp.form"]
        (inst,) = [i for i in first.graph.insts if i.op == "Interpolate"]
        forms.add(inst.attrs["form"])
        assert drawn and spec.FORMS[int(drawn[-1])] == inst.attrs["form"]
    assert forms == set(spec.FORMS)


def test_a_linear_layer_draws_its_form_only_where_the_forms_differ():
    """Only a 2-d input makes F.linear a Gemm; at other ranks there is nothing to draw."""
    graphs = _graphs_with_form("Linear", "linear", want=12)
    two_d = [g for g in graphs if len(g.types[g.insts[0].inputs[0]].shape) == 2]
    assert two_d and len(two_d) < len(graphs)
    for g in two_d:
        assert "Gemm" in _ops(onnx.load_from_string(materialize_and_export(g, sample_values(g, 0)).onnx))
    for seed in range(12):
        try:
            gen = generate(GenConfig(nodes=1, ops=[op_by_name("Linear")]), seed)
        except GenerationError:
            continue
        (inst,) = gen.graph.insts
        drew = any(label == "linear.form" for label, _ in gen.record.draws)
        assert drew == (len(gen.graph.types[inst.inputs[0]].shape) == 2)
