"""Checks that a GraphIR, its torch module and its ONNX export agree on every value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.checker
import onnx.shape_inference
import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.onnx_export import export_onnx
from nnsmith_cov.materialize.torch_module import GraphModule, check_types, input_tensors, output_name
from nnsmith_cov.ops import op_by_name


@dataclass
class Agreement:
    """What disagreed; all lists empty means the three views agree."""

    torch_errors: list[tuple[int, str]] = field(default_factory=list)  # (value id, what)
    onnx_errors: list[tuple[int | None, str]] = field(default_factory=list)
    checker_error: str | None = None

    def culprits(self, graph: GraphIR) -> list[str]:
        """The op that defines each disagreeing value ("<model>" when no value is named)."""
        producer = {v: inst.op for inst in graph.insts for v in inst.outputs}
        named = [v for v, _ in self.torch_errors + self.onnx_errors]
        return [producer.get(v, "<model>") if v is not None else "<model>" for v in named] or (
            ["<checker>"] if self.checker_error else []
        )

    @property
    def ok(self) -> bool:
        return not self.torch_errors and not self.onnx_errors and self.checker_error is None


def onnx_inferred_types(model_bytes: bytes) -> dict[str, TensorType | None]:
    """Types ONNX shape inference derives for the graph outputs, ignoring declared ones."""
    model = onnx.load_from_string(model_bytes)
    for out in model.graph.output:
        out.type.Clear()
    del model.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    types: dict[str, TensorType | None] = {}
    for out in inferred.graph.output:
        tt = out.type.tensor_type
        if not tt.HasField("shape") or not tt.elem_type or any(not d.HasField("dim_value") for d in tt.shape.dim):
            types[out.name] = None
        else:
            types[out.name] = TensorType(tuple(d.dim_value for d in tt.shape.dim), DType.from_onnx(tt.elem_type))
    return types


def check_agreement(graph: GraphIR, values: Mapping[int, np.ndarray]) -> Agreement:
    """Run torch, export with every value exposed, infer ONNX types, compare all three."""
    res = Agreement()
    module = GraphModule(graph, op_by_name, values, expose_all=True)
    inputs = input_tensors(graph, values)
    with torch.no_grad():
        env = module.run(*inputs)
    res.torch_errors = check_types(graph, {v: env[v] for v in module.returned})
    model_bytes = export_onnx(module, inputs, graph.opset)  # static: shapes are compared
    try:
        onnx.checker.check_model(onnx.load_from_string(model_bytes), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        res.checker_error = str(e).splitlines()[0]
    try:
        inferred = onnx_inferred_types(model_bytes)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        res.onnx_errors.append((None, f"shape inference failed: {str(e).splitlines()[0]}"))
        return res
    for v in module.returned:
        got = inferred.get(output_name(v), "missing")
        if got != graph.types[v]:
            res.onnx_errors.append((v, f"GraphIR {graph.types[v]}, ONNX {got}"))
    return res
