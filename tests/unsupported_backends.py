"""Fake backends (ONNXRuntime underneath) for the finding classes: a backend that lacks an
operator at old opsets only, and one that gets every output wrong the same way.

The worker loads them as `unsupported_backends:<Class>` (the worker's PYTHONPATH is the
parent's sys.path, which under pytest holds this folder).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from nnsmith_cov.backends.base import BackendError, Opt, Stage
from nnsmith_cov.backends.ort import OrtBackend


class NoOldSigmoid(OrtBackend):
    """Sigmoid is implemented from opset 13 only, with ORT's own words for the refusal (the
    op-support probe exports at 20, so it never sees this)."""

    name = "no-old-sigmoid"

    def compile(self, model: Any, opt: Opt) -> Any:
        proto = onnx.load_from_string(model)
        opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        if opset < 13 and any(n.op_type == "Sigmoid" for n in proto.graph.node):
            message = (
                "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
                "Sigmoid(6) node with name '/Sigmoid'"
            )
            raise BackendError(Stage.COMPILE, RuntimeError(message))
        return super().compile(model, opt)


class OffByOne(OrtBackend):
    """Adds 1 to every float output: two of these agree with each other, not with PyTorch."""

    name = "off-by-one"

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = super().run(exe, inputs)
        return {k: v + np.asarray(1, v.dtype) if v.dtype.kind == "f" else v for k, v in outs.items()}


class OffByOneToo(OffByOne):
    name = "off-by-one-too"
