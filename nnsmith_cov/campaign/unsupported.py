"""Support learned while a campaign runs: a backend's "not implemented" for a test is no
finding; the (op, dtype signature, opset) it names joins the campaign's support tables, and
the generator's ops are narrowed so that it is not drawn again.

Why learn rather than probe every opset up front: the probe runs each (op, sig) once, at the
newest opset; probing all ten export opsets would multiply that start-up cost tenfold, for
the few dozen triples that differ between opsets. A refusal met in a campaign costs one test
(plus, when the message does not say which operator, a few single-operator probes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.campaign.op_support import (
    Sig,
    SupportError,
    SupportTable,
    probe,
    remember_refusals,
    restrict_ops,
    sig_key,
)
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.refusal import refused_onnx_ops

# Single-operator probes one refusal may cost when its message names no operator of the graph.
MAX_PROBES = 8


@dataclass(frozen=True)
class Refusal:
    """One (backend, op, sig, opset) a backend refused, as the campaign learned it."""

    backend: str
    op: str
    sig: str  # sig_key
    opset: int

    def text(self) -> str:
        return f"{self.backend}: {self.op} {self.sig} at opset {self.opset}"


def graph_pairs(graph: GraphIR, ops: Sequence[type[OpSpec]]) -> list[tuple[type[OpSpec], Sig]]:
    """The distinct (spec, signature) pairs of `graph`'s instructions, among `ops`."""
    by_name = {o.name(): o for o in ops}
    pairs: dict[tuple[str, str], tuple[type[OpSpec], Sig]] = {}
    for inst in graph.insts:
        spec = by_name.get(inst.op)
        if spec is None:
            continue
        sig = (
            tuple(graph.types[v].dtype for v in inst.inputs),
            tuple(graph.types[v].dtype for v in inst.outputs),
        )
        if sig in spec.sigs:
            pairs.setdefault((inst.op, sig_key(sig)), (spec, sig))
    return list(pairs.values())


def _same_op(spec: str, onnx_type: str) -> bool:
    # Spec names follow ONNX's where the op is one node ("PReLU" for PRelu): case aside.
    return spec.lower() == onnx_type.lower()


class SupportLearner:
    """The campaign's run-time support tables, one per backend, over the ops it started with."""

    def __init__(self, ops: Sequence[type[OpSpec]], backends: Sequence[str], timeout_s: float = 60.0) -> None:
        self.base = list(ops)
        self.timeout_s = timeout_s
        self.tables = {b: SupportTable(b, "", "") for b in backends}
        self.cache: tuple[Path, dict[str, str]] | None = None  # where `learn` writes news back
        self.cache_error: str | None = None  # why writing back stopped, when it did

    def remember_in(self, cache_dir: Path, versions: Mapping[str, str]) -> None:
        """Write what is learned from now on to the op-support cache in `cache_dir` (the
        worker's `versions` name the files), so that the next campaign starts knowing it."""
        self.cache = (cache_dir, dict(versions))

    def attribute(self, worker: WorkerHandle, graph: GraphIR, finding: Finding) -> list[tuple[type[OpSpec], Sig]]:
        """The (spec, sig) pairs of `graph` the refusal `finding` is about: the one spec its
        message names when that is unambiguous, else those single-operator probes at the
        graph's opset show the backend refusing (none: nothing learned)."""
        pairs = graph_pairs(graph, self.base)
        named = refused_onnx_ops(f"{finding.detail}\n{finding.log}")
        matched = [p for p in pairs if any(_same_op(p[0].name(), t) for t in named)]
        if len(matched) == 1:
            return matched
        refused = []
        for spec, sig in (matched or pairs)[:MAX_PROBES]:
            outcome = probe(worker, spec, sig, [finding.backend], self.timeout_s, opset=graph.opset)
            if outcome[finding.backend].cls == "refused":
                refused.append((spec, sig))
        return refused

    def learn(self, backend: str, pairs: Sequence[tuple[type[OpSpec], Sig]], opset: int) -> list[Refusal]:
        """Record refusals of `pairs` by `backend` at `opset`; returns those that were news."""
        table = self.tables[backend]
        news = [
            Refusal(backend, spec.name(), sig_key(sig), opset)
            for spec, sig in pairs
            if table.refuse(spec.name(), sig_key(sig), opset)
        ]
        if news and self.cache is not None and backend in self.cache[1]:
            try:
                remember_refusals(self.cache[0], self.cache[1], backend, [(r.op, r.sig, r.opset) for r in news])
            except SupportError as e:  # the campaign goes on; it only forgets at its end
                self.cache, self.cache_error = None, str(e)
        return news

    def ops(self) -> list[type[OpSpec]] | None:
        """The starting ops narrowed by what was learned; None when nothing would be left."""
        try:
            return restrict_ops(self.base, self.tables.values())
        except SupportError:
            return None
