"""Run one candidate in the crash-isolated worker and tell whether it keeps the finding.

"Keeps" means the same symptom on the same backend, stage and opt level, of the same class;
a crash or hang also keeps its signature (its normalized error text, or for a backend's own
check the same `signature.defect`), an inconsistency its
reason (a wrong value stays a wrong value, not a wrong shape). An inconsistency's signature
names the ops next to the first bad output, which reduction changes on purpose, so it is not
compared.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from nnsmith_cov.campaign.testcase import (
    CaseSettings,
    Prepared,
    export_stored,
    failure,
    judge,
    prepare,
    run_backend,
)
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.signature import defect, is_generic
from nnsmith_cov.reduce.candidates import Candidate


@dataclass
class Outcome:
    finding: Finding | None  # what the candidate showed (None: it passed)
    prepared: Prepared | None  # its model: values, expected outputs, ONNX bytes


def reason(finding: Finding) -> str:
    """An inconsistency's kind ("value", "shape", "nan", ...): the second field of its detail."""
    parts = finding.detail.split(": ", 2)
    return parts[1] if len(parts) > 1 else ""


def keeps(target: Finding, got: Finding | None) -> bool:
    """Whether `got` is the same finding as `target`, as the reducer must keep it."""
    if got is None:
        return False
    where = ("symptom", "backend", "stage", "opt", "category")
    if any(getattr(got, k) != getattr(target, k) for k in where):
        return False
    if target.symptom == "inconsistency":
        return reason(got) == reason(target)
    if got.signature == target.signature:
        return True
    # A backend check's message is one defect whatever operands it prints ("R.subtract(..., lv3)"
    # in the big graph, "(..., i0)" once the producer became an input); Python's own errors
    # name no place, so for them only the exact text holds.
    return not is_generic(target.signature) and defect(got.signature) == defect(target.signature)


class Checker:
    """Runs candidates of one bundle: `stage` and `backend`/`opt` say which part of a test."""

    def __init__(
        self, worker: WorkerHandle, settings: CaseSettings, backend: str, stage: str, opt: str, seed: int
    ) -> None:
        self.worker = worker
        self.settings = settings
        self.backend, self.stage, self.opt, self.seed = backend, stage, opt, seed
        self.runs = 0  # candidates actually run (cache hits excluded)
        self._seen: dict[str, Outcome] = {}

    def run(self, cand: Candidate, timeout_s: float | None = None) -> Outcome:
        """What `cand` shows; a candidate seen before is not run again."""
        key = _key(cand)
        if key not in self._seen:
            self.runs += 1
            self._seen[key] = self._run(cand, timeout_s or self.settings.timeout_s)
        return self._seen[key]

    def _run(self, cand: Candidate, timeout_s: float) -> Outcome:
        s = self.settings
        settings = CaseSettings(s.backends, s.rtol, s.atol, s.half_rtol, s.half_atol, timeout_s, s.search, False)
        if self.stage == "reference":  # nothing was recorded: the search finds the values again
            prepared, finding = prepare(self.worker, cand.graph, self.seed, settings)
            return Outcome(finding, prepared)
        prepared, finding = export_stored(self.worker, cand.graph, self.seed, cand.values, cand.oracle, settings)
        if finding is not None or self.stage == "export":
            return Outcome(finding, prepared)
        return Outcome(self.on_backend(prepared, self.opt, timeout_s), prepared)

    def on_backend(
        self, prepared: Prepared, opt: str, timeout_s: float | None = None, crash_only: bool = False
    ) -> Finding | None:
        """The backend's verdict on a prepared model at `opt` (`crash_only`: only whether it
        crashed or hung, for a model whose expected outputs are not known)."""
        reply = run_backend(self.worker, prepared, self.backend, opt, timeout_s or self.settings.timeout_s)
        if crash_only or prepared.oracle is None:  # a crash needs no expected outputs
            return failure(self.backend, opt, reply)
        return judge(prepared, self.backend, opt, reply, self.settings)


def _key(cand: Candidate) -> str:
    """Identity of a candidate: its graph and the bytes of its leaf values."""
    h = hashlib.sha256(cand.graph.dumps().encode())
    for name in sorted(cand.values):
        a = np.ascontiguousarray(cand.values[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()
