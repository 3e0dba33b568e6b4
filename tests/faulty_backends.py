"""Deliberately faulty backends (ONNXRuntime underneath) for testing the harness.

The worker loads them as `faulty_backends:<Class>`; the worker's PYTHONPATH is
the parent's sys.path, which under pytest holds this folder.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import numpy as np

from nnsmith_cov.backends.base import Opt
from nnsmith_cov.backends.ort import OrtBackend


class Perturb(OrtBackend):
    """Right at O0, wrong at OPT: adds 1 to the first element of the first output."""

    name = "perturb"

    def compile(self, model: Any, opt: Opt) -> Any:
        return super().compile(model, opt), opt

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session, opt = exe
        outs = super().run(session, inputs)
        if opt is Opt.OPT:
            name = next(iter(outs))
            a = outs[name].copy()
            flat = a.reshape(-1)
            if flat.size:
                flat[0] = (not flat[0]) if a.dtype == np.bool_ else flat[0] + 1
            outs[name] = a
        return outs


class Segfault(OrtBackend):
    name = "segfault"

    def compile(self, model: Any, opt: Opt) -> Any:
        ctypes.string_at(0)  # reads address 0: SIGSEGV


class Abort(OrtBackend):
    name = "abort"

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        os.abort()


class Hang(OrtBackend):
    name = "hang"

    def compile(self, model: Any, opt: Opt) -> Any:
        time.sleep(3600)


class RaisesAtImport(OrtBackend):
    """Refuses every model at import, as a frontend converter that raises does."""

    name = "raises-at-import"

    def load(self, onnx_bytes: bytes) -> Any:
        raise ValueError("Cannot parse attribute")


class Raises(OrtBackend):
    """Fails at compile with a message holding a number that changes from model to model."""

    name = "raises"

    def compile(self, model: Any, opt: Opt) -> Any:
        raise RuntimeError(f"Check failed: buffer of {len(model)} bytes at 0x{id(model):x} is not aligned")


class RefusesImport(OrtBackend):
    """Refuses every model at import, as a compiler refuses an operator it does not know."""

    name = "refuses-import"

    def load(self, onnx_bytes: bytes) -> Any:
        from nnsmith_cov.backends.base import BackendError, Stage

        raise BackendError(Stage.IMPORT, ValueError("operator set not supported"))


class RefusesUnitShapes(OrtBackend):
    """Refuses any model whose inputs are all of size 1 (as TVM's trilinear Resize divides by
    zero on them): an op it takes at other shapes is still supported."""

    name = "refuses-unit-shapes"

    def compile(self, model: Any, opt: Opt) -> Any:
        import onnx

        graph = onnx.load_from_string(model).graph
        dims = [d.dim_value for i in graph.input for d in i.type.tensor_type.shape.dim]
        if all(d == 1 for d in dims):
            raise RuntimeError("unit shapes refused")
        return super().compile(model, opt)


class BadText(OrtBackend):
    """Has a text form of its IR whose parser refuses every printed model."""

    name = "bad-text"

    def roundtrip(self, model: Any) -> Any:
        from nnsmith_cov.backends.base import BackendError, Stage

        raise BackendError(Stage.ROUNDTRIP, SyntaxError("printed module does not parse"))
