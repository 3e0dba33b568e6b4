"""What a backend declares to the collectors about the code it drives, as plain data.

Collectors never import backends (that would tie the two packages in a loop): whoever
builds a collector asks the backend registry for these records (`backends.registry.declare`)
and hands them over, e.g.

    DeclaredBackend("tvm", package="tvm", native_module="libtvm_compiler.so")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class DeclaredBackend:
    """A backend spec (`ort`, `module:Class`) with what it says about where its code lies."""

    spec: str
    package: str | None = None  # the Python package it drives: what a python collector would measure
    native_module: str | None = None  # file-name glob of the shared object holding its compiled code


def declared_modules(backends: Iterable[DeclaredBackend]) -> list[str]:
    """The shared objects the backends declare their compiled code is in, in order, once each."""
    return list(dict.fromkeys(b.native_module for b in backends if b.native_module))
