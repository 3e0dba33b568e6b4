"""Deliberately faulty backends (ONNXRuntime underneath) for testing the harness.

The worker loads them as `faulty_backends:<Class>`; the worker's PYTHONPATH is
the parent's sys.path, which under pytest holds this folder.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time
import zlib
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


class SlowUnderCoverage(OrtBackend):
    """Hangs at compile while a tracer runs on its thread (the python collector measuring it),
    compiles at once natively: a compiler that instrumentation makes too slow for the timeout."""

    name = "slow-under-coverage"

    def compile(self, model: Any, opt: Opt) -> Any:
        if sys.gettrace() is not None:
            time.sleep(3600)
        return super().compile(model, opt)


class SlowUnderCoverageWrongAtOpt(SlowUnderCoverage, Perturb):
    """`SlowUnderCoverage` whose native runs are `Perturb`'s: wrong at OPT, right at O0
    (`SlowUnderCoverage.compile`'s super() is `Perturb.compile` here)."""

    name = "slow-under-coverage-wrong-at-opt"


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


class Chaos(OrtBackend):
    """Each model gets one misbehaviour, chosen by a hash of its bytes (so a re-run of the same
    model misbehaves the same way): the fault-injection suite's system under test."""

    name = "chaos"
    KINDS = ("pass", "perturb", "segfault", "abort", "hang", "raise", "flood", "shape", "dtype", "count", "memory")

    def load(self, onnx_bytes: bytes) -> Any:
        self.kind = self.KINDS[zlib.crc32(onnx_bytes) % len(self.KINDS)]
        return super().load(onnx_bytes)

    def compile(self, model: Any, opt: Opt) -> Any:
        if self.kind == "segfault":
            ctypes.string_at(0)
        if self.kind == "hang":
            time.sleep(3600)
        if self.kind == "raise":
            raise RuntimeError("chaos: internal compiler error 0x2a")
        if self.kind == "memory":  # far past the worker's limit: the allocation fails
            if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
                raise MemoryError("chaos: no worker memory limit set, not allocating for real")
            np.ones(1 << 36, dtype=np.uint8)
        return super().compile(model, opt), opt

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session, opt = exe
        outs = super().run(session, inputs)
        if self.kind == "abort":
            os.abort()
        if self.kind == "flood":  # megabytes on stderr, then right outputs
            sys.stderr.write("chaos noise\n" * (300_000))
            sys.stderr.flush()
        name = next(iter(outs))
        if self.kind == "perturb" and opt is Opt.OPT and outs[name].size and outs[name].dtype != np.bool_:
            outs[name] = outs[name] + 1
        elif self.kind == "shape":
            outs[name] = outs[name].reshape(1, *outs[name].shape)
        elif self.kind == "dtype":
            outs[name] = outs[name].astype(np.float64 if outs[name].dtype != np.float64 else np.float32)
        elif self.kind == "count":
            outs["extra"] = np.zeros(1, np.float32)
        return outs


START_DEATHS_ENV = "NNSMITH_COV_TEST_START_DEATHS"  # "<folder>:<n>": the first n loads die


class DiesWhileStarting(OrtBackend):
    """Kills its worker (SIGSEGV) while the worker loads its backends, the first n times: a start
    that dies before the worker's hello, as Frida's translated code sometimes did."""

    name = "dies-while-starting"

    def unavailable(self) -> str | None:
        folder, n = os.environ[START_DEATHS_ENV].rsplit(":", 1)
        done = len(os.listdir(folder))
        if done < int(n):
            open(os.path.join(folder, f"death-{done}"), "w").close()
            ctypes.string_at(0)
        return super().unavailable()
