"""The collector interface, the built-in collectors by name, and their pass-only filters.

A collector lives in the worker process, next to the systems under test (`factory.make_collector`
builds one by name):

    collector = make_collector("python", ["tvm", "torch.onnx"])
    universe = collector.universe()     # once, after the systems under test are imported
    collector.start()                   # zero the counts
    ...compile and run a model...
    hits = collector.stop()             # what ran since start(), as branch indices of `universe`

Only `Hits` cross the process boundary per test; the universe crosses once.
"""

from __future__ import annotations

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
        "src/tirx/transform/",
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
