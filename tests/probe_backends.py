"""Fake backends (ONNXRuntime underneath) for the support probe's refusal/crash classes.

The worker loads them as `probe_backends:<Class>` (the worker's PYTHONPATH is the parent's
sys.path, which under pytest holds this folder).
"""

from __future__ import annotations

from typing import Any

import onnx

from nnsmith_cov.backends.base import BackendError, Opt, Stage
from nnsmith_cov.backends.ort import OrtBackend


def _input_types(model: bytes) -> set[int]:
    graph = onnx.load_from_string(model).graph
    return {i.type.tensor_type.elem_type for i in graph.input}


class RefusesF64CrashesF16(OrtBackend):
    """Says it has no double kernels (a refusal) and fails an internal check on halves (a bug)."""

    name = "refuses-f64-crashes-f16"

    def load(self, onnx_bytes: bytes) -> Any:
        if onnx.TensorProto.DOUBLE in _input_types(onnx_bytes):
            raise BackendError(Stage.IMPORT, NotImplementedError("OpNotImplemented: no double kernel"))
        return super().load(onnx_bytes)

    def compile(self, model: Any, opt: Opt) -> Any:
        if onnx.TensorProto.FLOAT16 in _input_types(model):
            raise BackendError(Stage.COMPILE, RuntimeError("InternalError: Check failed: dtype is not float16"))
        return super().compile(model, opt)
