"""onnxoptimizer (the instrumented build of `make instrumented`), then ONNX Runtime with its optimizations off.

The optimized setting runs onnxoptimizer's default pass list (fuse and eliminate
passes) over the model; O0 runs none. Either way ONNX Runtime executes the result
at ORT_DISABLE_ALL, so a difference from PyTorch at the optimized setting that O0
does not show is onnxoptimizer's. The optimizer is the instrumented build in the
cache, imported only after the llvm collector's counter runtime is loaded: its
extension module needs the runtime's symbols to load at all.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov.backends.base import Opt, Stage, import_problem, staged
from nnsmith_cov.backends.ort import run_session, session
from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.llvm_builds import build_dir, find_build
from nnsmith_cov.coverage.llvm_runtime import load_runtime


def import_instrumented() -> Any:
    """The instrumented `onnxoptimizer` module; ImportError (one line) when it cannot be had."""
    build = find_build()
    if build is None:
        raise ImportError(f"no instrumented onnxoptimizer in {build_dir()} (run make instrumented)")
    try:
        load_runtime()
    except CollectorError as e:
        raise ImportError(str(e)) from None
    site = str(build.site)
    if site not in sys.path:
        sys.path.insert(0, site)
    module = importlib.import_module("onnxoptimizer")
    # A plain onnxoptimizer imported earlier from elsewhere would measure nothing.
    if not Path(module.__file__ or "").resolve().is_relative_to(build.site.resolve()):
        raise ImportError(f"onnxoptimizer was imported from {module.__file__}, not the instrumented build in {site}")
    return module


class OnnxoptimizerBackend:
    name = "onnxoptimizer"
    native_module = "onnx_opt_cpp2py_export*"

    def __init__(self) -> None:
        self._module: Any = None

    def _optimizer(self) -> Any:
        if self._module is None:
            self._module = import_instrumented()
        return self._module

    def unavailable(self) -> str | None:
        try:
            self._optimizer()
        except Exception as e:  # a broken build fails to load with OSError as well as ImportError
            return f"onnxoptimizer: {e}".splitlines()[0]
        return import_problem("onnxruntime")

    def version(self) -> str:
        # "+sancov": the instrumented build, not the PyPI wheel of the same number.
        return f"{self._optimizer().__version__}+sancov"

    def load(self, onnx_bytes: bytes) -> Any:
        import onnx

        with staged(Stage.IMPORT):
            return onnx.load_from_string(onnx_bytes)

    def compile(self, model: Any, opt: Opt) -> Any:
        optimizer = self._optimizer()
        with staged(Stage.COMPILE):
            if opt is Opt.OPT:
                model = optimizer.optimize(model, optimizer.get_fuse_and_elimination_passes())
            # ORT's own rewrites off: what runs is what onnxoptimizer produced.
            return session(model.SerializeToString(), optimize=False)

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_session(exe, inputs)
