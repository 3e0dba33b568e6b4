"""The backend interface: compile ONNX bytes at an optimization level, run on named inputs."""

from __future__ import annotations

import contextlib
import enum
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class Opt(enum.Enum):
    """Optimization setting; O0 localizes a mismatch (optimizer bug vs conversion bug)."""

    OPT = "opt"
    O0 = "O0"


class Stage(enum.Enum):
    """Where a test case failed. EXPORT and REFERENCE are PyTorch's; the rest the backend's."""

    REFERENCE = "reference"  # PyTorch running the model during the value search
    EXPORT = "export"  # torch.onnx
    IMPORT = "import"  # ONNX -> backend IR
    ROUNDTRIP = "roundtrip"  # the backend IR printed as text and parsed back (backends that have one)
    COMPILE = "compile"
    EXECUTE = "execute"


class BackendError(Exception):
    """A backend failed at `stage`; `cause` is what it raised."""

    def __init__(self, stage: Stage, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause


class Backend(Protocol):
    """A compiler under test, in three steps so that errors (and deaths) carry their stage.

    Implementations import their library lazily, inside the worker process.
    """

    name: str

    def unavailable(self) -> str | None:
        """Why this backend cannot run here (one line), or None. Never raises."""
        ...

    def version(self) -> str: ...

    def load(self, onnx_bytes: bytes) -> Any:
        """The model in the backend's own form; raises BackendError(IMPORT)."""
        ...

    def compile(self, model: Any, opt: Opt) -> Any:
        """An executable; raises BackendError(COMPILE)."""
        ...

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs keyed by the ONNX output names; raises BackendError(EXECUTE)."""
        ...

    # Optional: `native_module`, a class attribute: the file-name glob of the shared object that
    # holds the backend's compiled code, which the binary collector follows when not told otherwise.
    # Optional: `roundtrip(model) -> model`, the imported model printed in the backend's text
    # form and parsed back; raises BackendError(ROUNDTRIP). Tests whose graph asks for it
    # (GraphIR.roundtrip) compile what the parser made (see `has_roundtrip`).
    # Optional: `load_libraries()`, a static method: load the shared objects of the backend's
    # compiled code as its package would, without importing the package; raises ImportError,
    # OSError or RuntimeError where they cannot be found or loaded alone. A binary collector's
    # worker runs it on the followed import thread and imports the package natively afterwards
    # (see `campaign.worker`; a failure there imports the whole package on that thread).


def has_roundtrip(backend: Any) -> bool:
    """Whether `backend` can print its IR as text and parse it back."""
    return callable(getattr(backend, "roundtrip", None))


@dataclass(frozen=True)
class IOSpec:
    """Graph input and output names of an ONNX model, in order."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def io_spec(onnx_bytes: bytes) -> IOSpec:
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    init = {t.name for t in model.graph.initializer}
    return IOSpec(
        tuple(i.name for i in model.graph.input if i.name not in init),
        tuple(o.name for o in model.graph.output),
    )


def import_problem(*modules: str) -> str | None:
    """Why one of `modules` cannot be imported (one line), or None. Native libraries fail to
    load with OSError as often as a missing package fails with ImportError."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:
            return f"{name} is not importable ({type(e).__name__}: {e})".splitlines()[0]
    return None


def module_version(name: str) -> str:
    return importlib.import_module(name).__version__


@contextlib.contextmanager
def staged(stage: Stage) -> Iterator[None]:
    """Turn whatever the wrapped code raises into a BackendError of `stage`."""
    try:
        yield
    except BackendError:
        raise
    except Exception as e:  # a compiler raises anything; all of it is a finding
        raise BackendError(stage, e) from e
