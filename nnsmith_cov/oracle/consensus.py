"""Consensus: when every backend disagrees with PyTorch the same way, PyTorch (or its
exporter, or our spec of the op) is the suspect, not the compilers. Such findings are filed
as class "reference", apart from compiler bugs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from nnsmith_cov.oracle.compare import compare_outputs
from nnsmith_cov.oracle.finding import Finding

# Compares outputs -> names of those that mismatch (the oracle's own tolerances).
Mismatching = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], list[str]]


def mismatching(rtol: float, atol: float, per_dtype: Mapping[str, tuple[float, float]] | None = None) -> Mismatching:
    """A `Mismatching` with the oracle's tolerances."""

    def names(expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray]) -> list[str]:
        return [m.name for m in compare_outputs(dict(expected), dict(actual), rtol, atol, dict(per_dtype or {}))]

    return names


def apply_consensus(
    findings: Sequence[Finding], backends: Sequence[str], oracle: Mapping[str, np.ndarray], differ: Mismatching
) -> bool:
    """Mark the backends' inconsistencies "reference" when all of `backends` (two or more)
    mismatch PyTorch on one output and agree with one another there; True when it did.

    Only findings still classed "bug" are re-classed: a rule that looked closer (precision,
    discontinuity) keeps its verdict."""
    if len(backends) < 2:
        return False
    by_backend = {f.backend: f for f in findings if f.symptom == "inconsistency" and f.opt == "opt"}
    if set(by_backend) != set(backends):
        return False
    outputs = [by_backend[b].actual for b in backends]
    shared = set.intersection(*(set(differ(oracle, out)) for out in outputs))
    for name in sorted(shared, key=_output_order):
        if all(name in out for out in outputs) and _agree([{name: out[name]} for out in outputs], differ):
            names = " and ".join(backends)
            for b in backends:
                f = by_backend[b]
                if f.category == "bug":
                    f.category, f.rule = "reference", f"consensus: {names} agree on {name} against torch"
            return True
    return False


def _agree(outputs: list[dict[str, np.ndarray]], differ: Mismatching) -> bool:
    """Every backend's output within tolerance of the first's (agreement is symmetric
    enough at the oracle's tolerances to compare against one)."""
    return all(not differ(outputs[0], other) for other in outputs[1:])


def _output_order(name: str) -> tuple[int, str]:
    # Outputs are named o<value>: the first one the graph computes first.
    return (int(name[1:]), name) if name[1:].isdigit() else (1 << 62, name)
