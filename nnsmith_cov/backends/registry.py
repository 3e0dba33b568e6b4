"""Backends by name: the built-in ones, or any `module:Class` a user plugs in."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from nnsmith_cov.backends.base import Backend, has_roundtrip
from nnsmith_cov.coverage.declared import DeclaredBackend

BUILTIN = {
    "ort": "nnsmith_cov.backends.ort:OrtBackend",
    "tvm": "nnsmith_cov.backends.tvm:TvmBackend",
    "trt": "nnsmith_cov.backends.tensorrt:TensorrtBackend",
    "onnxoptimizer": "nnsmith_cov.backends.onnxoptimizer:OnnxoptimizerBackend",
}

# The Python package each built-in backend drives (what a python collector would measure of it).
PACKAGES = {"ort": "onnxruntime", "tvm": "tvm", "trt": "tensorrt", "onnxoptimizer": "onnxoptimizer"}


def check_spec(spec: str) -> str:
    """`spec` if it names a built-in backend or looks like `module:Class`; else ValueError."""
    if spec in BUILTIN or (spec.count(":") == 1 and all(spec.split(":"))):
        return spec
    raise ValueError(f"unknown backend {spec!r} (built in: {', '.join(BUILTIN)}; or module:Class)")


def backend_class(spec: str) -> type:
    """The class `spec` names (importing its module, not the system it drives); ImportError or
    AttributeError if it cannot be found."""
    module, _, cls = BUILTIN.get(spec, spec).partition(":")
    return getattr(importlib.import_module(module), cls)


def load_backend(spec: str) -> Backend:
    """An instance of the backend `spec` names; ImportError/AttributeError if it cannot be found."""
    return backend_class(spec)()


def native_module(spec: str) -> str | None:
    """The file-name glob of the shared object holding the backend's compiled code (its class's
    `native_module`), or None when it does not say or cannot be found."""
    try:
        return getattr(backend_class(spec), "native_module", None)
    except (ImportError, AttributeError):
        return None


def library_loader(spec: str) -> Callable[[], None] | None:
    """The backend class's `load_libraries` (its compiled code's shared objects without its
    package), or None when it has none or cannot be found."""
    try:
        return getattr(backend_class(spec), "load_libraries", None)
    except (ImportError, AttributeError):
        return None


def declare(spec: str) -> DeclaredBackend:
    """What backend `spec` tells the collectors about its code: the Python package it drives (built-in
    backends) and its `native_module`. Imports the backend's class, not the system it drives."""
    return DeclaredBackend(spec, PACKAGES.get(spec), native_module(spec))


def roundtrips(spec: str) -> bool:
    """Whether the backend `spec` names can print its IR as text and parse it back (False when
    it cannot be found)."""
    try:
        return has_roundtrip(backend_class(spec))
    except (ImportError, AttributeError):
        return False
