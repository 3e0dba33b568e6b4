"""Export a materialized GraphIR to ONNX through PyTorch's TorchScript exporter."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import onnx
import torch

from nnsmith_cov.gen.graph_ir import DEFAULT_OPSET
from nnsmith_cov.materialize.torch_module import GraphModule, input_name, output_name


class ExportError(Exception):
    """PyTorch's exporter failed: a finding about the exporter, not the generator."""


def export_onnx(
    module: GraphModule,
    inputs: tuple[torch.Tensor, ...],
    opset: int = DEFAULT_OPSET,
    dynamic: Sequence[tuple[int, int]] = (),
) -> bytes:
    """ONNX bytes at `opset`; inputs, outputs and weights keep GraphIR value ids in their names,
    and each (input value, dim) in `dynamic` is a named symbolic dim of the model's signature."""
    graph = module.graph
    axes: dict[str, dict[int, str]] = {}
    for v, d in dynamic:
        axes.setdefault(input_name(v), {})[d] = f"{input_name(v)}_d{d}"
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                inputs,
                buf,
                dynamo=False,
                opset_version=opset,
                input_names=[input_name(v) for v in graph.inputs],
                output_names=[output_name(v) for v in module.returned],
                # Folding would merge weight-only subgraphs into constants and
                # hide the very operators the graph was generated to test.
                do_constant_folding=False,
                export_params=True,
                dynamic_axes=axes or None,
            )
    except Exception as e:  # the exporter raises anything; all of it is a finding
        raise ExportError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    return buf.getvalue()


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
