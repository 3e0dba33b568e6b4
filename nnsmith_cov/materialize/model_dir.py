"""A generated model on disk.

model.onnx    the exported model (weights as initializers)
graph.json    GraphIR
graph.txt     its readable form
record.json   the generator's record, every draw, the search summary, versions; schema
              RECORD_SCHEMA, e.g. {"schema": 1, "seed": 5, "ops": ["Add", ...], "directions":
              ["forward", ...], "bins": [{"owner": "Conv2d#3", "attr": "stride0", "kind":
              "size", "bin": 2, "kept": true}, ...], "search": {"ok": true, ...}, "opset": 20}
inputs.npz    model inputs (i<v>) and weights (w<v>), when values were searched
oracle.npz    PyTorch's outputs (o<v>), when the search succeeded
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from nnsmith_cov.gen.generator import Generated
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.onnx_export import ExportError, export_onnx
from nnsmith_cov.materialize.search_result import SearchResult
from nnsmith_cov.materialize.torch_module import GraphModule, input_name, input_tensors, output_name, weight_name
from nnsmith_cov.ops import op_by_name

RECORD_SCHEMA = 1


@dataclass
class Exported:
    module: GraphModule
    inputs: tuple[torch.Tensor, ...]
    onnx: bytes
    opset: int


def materialize_and_export(graph: GraphIR, values: dict[int, np.ndarray]) -> Exported:
    """Build the torch module with `values` as weights and export it as the graph says (its
    opset and dynamic dims); raises ExportError, also when the exporter wrote a model the
    ONNX checker refuses (at some opsets, or with symbolic dims, it types nodes outside
    their schema): a backend must never be blamed for the exporter's model."""
    module = GraphModule(graph, op_by_name, values)
    inputs = input_tensors(graph, values)
    data = export_onnx(module, inputs, graph.opset, graph.dynamic)
    try:
        onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ExportError(f"invalid model: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    return Exported(module, inputs, data, graph.opset)


def npz_bytes(arrays: dict[str, np.ndarray], compress: bool = False) -> bytes:
    """The arrays as .npz bytes; `compress` (zip deflate) for files kept at rest, where searched
    values shrink about by half."""
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **arrays)
    return buf.getvalue()


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Arrays of an .npz file; object arrays (pickles) are refused."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def leaf_names(graph: GraphIR) -> dict[int, str]:
    """The name each input and weight has in inputs.npz and on the wire."""
    return {v: input_name(v) for v in graph.inputs} | {v: weight_name(v) for v in graph.weights}


def value_arrays(graph: GraphIR, values: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: values[v] for v, name in leaf_names(graph).items()}


def leaf_values(graph: GraphIR, named: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """The inverse of `value_arrays` (KeyError for a missing name)."""
    return {v: named[name] for v, name in leaf_names(graph).items()}


def write_model_dir(
    out: Path, gen: Generated, exported: Exported | None, search: SearchResult | None = None
) -> list[Path]:
    """Write the model folder; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "graph.json": json.dumps(gen.graph.to_json(), indent=1, sort_keys=True) + "\n",
        "graph.txt": gen.graph.text(),
        "record.json": json.dumps(
            {"schema": RECORD_SCHEMA}
            | gen.record.to_json()
            | {
                "search": search.summary() if search else None,
                "opset": exported.opset if exported else None,
                "torch": torch.__version__,
                "draws": gen.record.draws,
            },
            indent=1,
        )
        + "\n",
    }
    written = []
    for name, text in files.items():
        (out / name).write_text(text)
        written.append(out / name)
    blobs: dict[str, bytes] = {}
    if exported is not None:
        blobs["model.onnx"] = exported.onnx
    if search is not None:
        blobs["inputs.npz"] = npz_bytes(value_arrays(gen.graph, search.values))
        if search.ok:
            blobs["oracle.npz"] = npz_bytes({output_name(v): a for v, a in search.oracle.items()})
    for name in ("inputs.npz", "oracle.npz"):
        if name not in blobs:
            (out / name).unlink(missing_ok=True)  # never leave a stale oracle beside a new graph
    for name, data in blobs.items():
        (out / name).write_bytes(data)
        written.append(out / name)
    return written
