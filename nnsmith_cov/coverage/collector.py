"""The collector interface, the built-in collectors by name, and their pass-only filters.

A collector lives in the worker process, next to the systems under test:

    collector = make_collector("python", ["tvm", "torch.onnx"])
    universe = collector.universe()     # once, after the systems under test are imported
    collector.start()                   # zero the counts
    ...compile and run a model...
    hits = collector.stop()             # what ran since start(), as branch indices of `universe`

Only `Hits` cross the process boundary per test; the universe crosses once.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Protocol

from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.universe import Universe


class CollectorError(Exception):
    """The collector cannot run here (missing tool, library not instrumented): one line."""


class Collector(Protocol):
    name: str

    def universe(self) -> Universe:
        """Every branch this collector can report, numbered."""
        ...

    def start(self) -> None:
        """Forget what was counted so far and count from now on."""
        ...

    def stop(self) -> Hits:
        """Stop counting; the branches reached since `start`."""
        ...


# Branches of optimization passes, per collector: where a "pass-only" count looks.
PASS_FILTERS: dict[str, tuple[str, ...]] = {
    "python": ("tvm/relax/transform/", "tvm/s_tir/transform/", "tvm/tirx/transform/", "tvm/ir/transform.py"),
    "llvm": (
        "onnxruntime/core/optimizer/",
        "src/relax/transform/",
        "src/tir/transforms/",
        "src/s_tir/transform/",
        "src/ir/transform.cc",
        "onnxoptimizer/passes/",
    ),
    # approximate: functions labelled through the source paths they reference in .rodata, their
    # neighbours in the same object file, or their exported names' namespaces (binary_symbols)
    "binary": (
        "onnxruntime/core/optimizer/",
        "src/relax/transform/",
        "src/tirx/transform/",
        "src/s_tir/transform/",
        "src/ir/transform.cc",
    ),
}


def pass_filters(collector: str, given: Sequence[str] | None = None) -> list[str]:
    """The pass-only filters in force: `given` when set, else the collector's defaults (a
    composite's: each part's; their paths do not overlap)."""
    if given is not None:
        return list(given)
    return list(dict.fromkeys(f for part in collector.split("+") for f in PASS_FILTERS.get(part, ())))


BUILTIN = {
    "python": "nnsmith_cov.coverage.python_collector:PythonCollector",
    "llvm": "nnsmith_cov.coverage.llvm_collector:LlvmCollector",
    "binary": "nnsmith_cov.coverage.binary_collector:BinaryCollector",
}


def make_collector(name: str, targets: Sequence[str] = (), backends: Sequence[str] = ()) -> Collector:
    """The collector `name` (built in, `module:Class`, or several joined by `+`), measuring
    `targets` (its own default when empty: Python packages for `python`, shared-library globs
    for `llvm`, the modules `backends` declare for `binary`); `NAME=TARGET` addresses one part of
    a composite (see `composite.part_targets`). In a composite, a part that takes backends gets
    those the other parts do not claim (TVM's Python for `python`)."""
    from nnsmith_cov.coverage import composite

    names = name.split("+")
    if len(set(names)) != len(names):
        raise CollectorError(f"collector {name!r} names a part twice")
    made: list[Collector | None] = [None] * len(names)
    takes = [getattr(_factory(n), "takes_backends", False) for n in names]
    for late in (False, True):  # parts that take backends last, to see what the others claim
        for i, n in enumerate(names):
            if takes[i] is late:
                own = composite.part_targets(n, targets, i == 0, names)
                claimed = [b for b in backends if any(getattr(c, "claims", lambda _: False)(b) for c in made if c)]
                rest = [b for b in backends if b not in claimed]
                made[i] = _make_one(n, own, rest if late else None)
    parts = [c for c in made if c is not None]
    if len(parts) == 1:
        return parts[0]
    if any(hasattr(c, "call") for c in parts):
        return composite.FollowedComposite(parts)
    return composite.CompositeCollector(parts)


def _factory(name: str) -> type:
    if name not in BUILTIN and not (name.count(":") == 1 and all(name.split(":"))):
        raise CollectorError(f"unknown collector {name!r} (built in: {', '.join(BUILTIN)}; or module:Class)")
    module, _, cls = BUILTIN.get(name, name).partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise CollectorError(f"cannot load collector {name}: {e}") from None


def _make_one(name: str, targets: Sequence[str], backends: Sequence[str] | None = None) -> Collector:
    factory = _factory(name)
    if backends is not None:
        return factory(list(targets), backends=list(backends))
    return factory(list(targets))
