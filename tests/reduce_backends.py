"""Fake backends (ONNXRuntime underneath) whose faults need a known part of a graph, for the reducer.

The worker loads them as `reduce_backends:<Class>` (its PYTHONPATH is the parent's sys.path,
which under pytest holds this folder).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from nnsmith_cov.backends.base import BackendError, Opt, Stage
from nnsmith_cov.backends.ort import OrtBackend


def _nodes(model: bytes) -> list[onnx.NodeProto]:
    return list(onnx.load_from_string(model).graph.node)


class CrashesOnCosOfRelu(OrtBackend):
    """Fails to compile any model where a Cos reads a Relu's output (and only then)."""

    name = "crashes-on-cos-of-relu"

    def compile(self, model: Any, opt: Opt) -> Any:
        nodes = _nodes(model)
        relu_outs = {o for n in nodes if n.op_type == "Relu" for o in n.output}
        if any(n.op_type == "Cos" and relu_outs.intersection(n.input) for n in nodes):
            raise BackendError(Stage.COMPILE, RuntimeError("Check failed: Cos(Relu(x)) fusion at node /Cos_7"))
        return super().compile(model, opt)


class WrongWithSinAndMul(OrtBackend):
    """Adds 1 to every float output at OPT when the model has both a Sin and a Mul node."""

    name = "wrong-with-sin-and-mul"

    def compile(self, model: Any, opt: Opt) -> Any:
        kinds = {n.op_type for n in _nodes(model)}
        return super().compile(model, opt), opt is Opt.OPT and {"Sin", "Mul"} <= kinds

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session, wrong = exe
        outs = super().run(session, inputs)
        if wrong:
            outs = {k: v + np.ones((), v.dtype) if v.dtype.kind == "f" else v for k, v in outs.items()}
        return outs
