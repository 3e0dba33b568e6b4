"""A generated model on disk: model.onnx, graph.json, graph.txt, record.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nnsmith_cov.gen.generator import Generated
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.onnx_export import DEFAULT_OPSET, export_onnx
from nnsmith_cov.materialize.torch_module import GraphModule
from nnsmith_cov.ops import op_by_name


@dataclass
class Exported:
    module: GraphModule
    inputs: tuple[torch.Tensor, ...]
    onnx: bytes
    opset: int


def materialize_and_export(graph: GraphIR, values: dict[int, np.ndarray], opset: int = DEFAULT_OPSET) -> Exported:
    """Build the torch module with `values` as weights and export it; raises ExportError."""
    module = GraphModule(graph, op_by_name, values)
    inputs = tuple(torch.from_numpy(np.array(values[v])) for v in graph.inputs)
    return Exported(module, inputs, export_onnx(module, inputs, opset), opset)


def write_model_dir(out: Path, gen: Generated, exported: Exported | None) -> list[Path]:
    """Write the model folder; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "graph.json": json.dumps(gen.graph.to_json(), indent=1, sort_keys=True) + "\n",
        "graph.txt": gen.graph.text(),
        "record.json": json.dumps(
            gen.record.to_json()
            | {"opset": exported.opset if exported else None, "torch": torch.__version__, "draws": gen.record.draws},
            indent=1,
        )
        + "\n",
    }
    written = []
    for name, text in files.items():
        (out / name).write_text(text)
        written.append(out / name)
    if exported is not None:
        (out / "model.onnx").write_bytes(exported.onnx)
        written.append(out / "model.onnx")
    return written
