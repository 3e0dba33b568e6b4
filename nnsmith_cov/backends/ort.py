"""ONNXRuntime on the CPU: ORT_ENABLE_ALL vs ORT_DISABLE_ALL."""

from __future__ import annotations

from typing import Any

import numpy as np

from nnsmith_cov.backends.base import Opt, Stage, import_problem, module_version, staged


class OrtBackend:
    name = "ort"
    native_module = "onnxruntime_pybind11_state*"  # all of ORT is linked into it (the binary collector's default)

    def unavailable(self) -> str | None:
        return import_problem("onnxruntime")

    def version(self) -> str:
        return module_version("onnxruntime")

    def load(self, onnx_bytes: bytes) -> Any:
        return onnx_bytes  # ORT parses, checks and optimizes in one call: see compile

    def compile(self, model: Any, opt: Opt) -> Any:
        with staged(Stage.COMPILE):
            return session(model, optimize=opt is Opt.OPT)

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_session(exe, inputs)


def session(model: bytes, optimize: bool) -> Any:
    """A CPU inference session at ORT_ENABLE_ALL (optimize) or ORT_DISABLE_ALL."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    so.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    # One thread, sequential: deterministic, no pool threads for a collector to chase.
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def run_session(exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of session `exe` on `inputs`, by name; raises BackendError(EXECUTE)."""
    names = [o.name for o in exe.get_outputs()]
    feed = {i.name: inputs[i.name] for i in exe.get_inputs()}
    with staged(Stage.EXECUTE):
        outs = exe.run(names, feed)
    return {n: np.asarray(o) for n, o in zip(names, outs)}
