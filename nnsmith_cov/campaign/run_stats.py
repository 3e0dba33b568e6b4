"""A campaign's counters: what stats.json shows and what a resumed campaign starts from."""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nnsmith_cov.corpus.records import is_int


@dataclass
class RunStats:
    """Counters of a run; `to_json` is what stats.json holds (and the corpus, after each
    commit: `restore` reads it back on resume). Coverage counts are set by the ledger."""

    started: float = field(default_factory=time.monotonic)
    tests: int = 0  # test cases started (graphs asked for)
    executed: int = 0  # reached at least one backend
    passed: int = 0
    no_values: int = 0  # value search found no NaN/Inf-free values: not tested
    slow: int = 0  # backend runs that timed out under the collector but finished natively
    # per backend, the limit of a run under the collector (`campaign.run_limit`), this process
    run_limits: dict[str, float] = field(default_factory=dict)
    calibration_share: float | None = None  # the workers' budget for calibration reruns (None: no collector)
    gen_failed: int = 0
    infeasible: int = 0  # graphs the generator dropped as proven to have no NaN/Inf-free values
    internal_errors: int = 0  # tests ended by an exception of nnsmith-cov's own code
    internal: collections.Counter[str] = field(default_factory=collections.Counter)  # ... by signature
    findings: collections.Counter[str] = field(default_factory=collections.Counter)  # symptom/stage/backend
    signatures: collections.Counter[str] = field(default_factory=collections.Counter)
    # backend runs that ended in the backend's "not implemented" (no findings), by signature
    unsupported: collections.Counter[str] = field(default_factory=collections.Counter)
    learned: list[str] = field(default_factory=list)  # (backend, op, sig, opset) refusals this process learned
    restarts: int = 0
    recycles: int = 0  # workers replaced on schedule (--recycle-after, --worker-max-rss-mb), this process
    # resources, sampled with the timeline (Ledger): the run folder on disk, resident memory of
    # this process and of each worker (KiB), the corpus's live records, and tests whose blobs
    # the disk budget dropped
    disk_kb: int = 0
    rss_kb: int = 0
    worker_rss_kb: list[int] = field(default_factory=list)
    corpus_kb: int = 0
    blobs_dropped: int = 0
    branches: int | None = None  # covered so far, with a collector (None without)
    pass_branches: int | None = None  # of those, in optimization passes
    universe: int | None = None
    # a composite collector's parts: name -> [lo, hi) of the map, and (covered, pass-only, universe) each
    part_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    parts: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    cov_tests: int = 0  # tests that set a new map bit
    last_new_s: float | None = None  # elapsed time of the last such test
    last_unique_s: float | None = None  # elapsed time of the last finding with a new signature
    # campaign times the latest tests started at: the status screen's recent rate
    starts: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=4096))
    stage_ms: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    resumed_s: float = 0.0  # campaign time before this process took over (resume)
    corpus: int = 0  # tests kept in the corpus for new coverage
    op_tests: collections.Counter[str] = field(default_factory=collections.Counter)  # generated tests holding each op
    # generated tests by export plan: "opset 13", ..., "static", "dynamic", "roundtrip", and by ONNX form
    # of an op ("conv.form=1": the spec's FORMS[1])
    export_tests: collections.Counter[str] = field(default_factory=collections.Counter)

    def elapsed(self) -> float:
        """Campaign time: this process's run plus what a resumed campaign had before."""
        return self.resumed_s + time.monotonic() - self.started

    def count_finding(self, header: Mapping[str, Any]) -> bool:
        """Count a finding by its header (`Finding.header()`); True when its signature is new."""
        self.findings[f"{header['symptom']}/{header['stage']}/{header['backend']}"] += 1
        new = header["signature"] not in self.signatures
        self.signatures[header["signature"]] += 1
        return new

    def count_unsupported(self, signature: str) -> None:
        """Count a backend run refused as not implemented (kept out of findings)."""
        self.unsupported[signature] += 1

    def count_internal(self, signature: str) -> bool:
        """Count an internal error; True when its signature is new."""
        self.internal_errors += 1
        new = signature not in self.internal
        self.internal[signature] += 1
        return new

    def restore(self, before: Mapping[str, Any]) -> None:
        """Take the counters a stopped campaign left (its `to_json`, from the corpus or, for
        corpora written before the corpus kept them, stats.json); findings and coverage are
        recounted from the corpus by the caller. Unknown or malformed fields are skipped."""

        def num(key: str, default: int = 0) -> int:
            v = before.get(key, default)
            return v if is_int(v) and v >= 0 else default

        self.executed, self.passed, self.no_values = num("executed"), num("passed"), num("no_values")
        self.slow = num("slow_under_coverage")
        self.gen_failed, self.infeasible = num("generation_failed"), num("infeasible_dropped")
        self.internal_errors = num("internal_errors", num("faults"))  # "faults": stats.json before 0.2
        self.restarts = self.recycles = 0  # this process's workers
        self.blobs_dropped = num("blobs_dropped")
        table = before.get("unsupported_signatures")
        if isinstance(table, dict):
            self.unsupported.update({k: v for k, v in table.items() if isinstance(v, int) and v > 0})
        cov = before.get("coverage") if isinstance(before.get("coverage"), dict) else {}
        self.cov_tests = cov.get("interesting_tests", 0) if isinstance(cov.get("interesting_tests"), int) else 0
        self.last_new_s = _opt_float(cov.get("last_new_s"))
        self.last_unique_s = _opt_float(before.get("last_unique_s"))
        for key, counter in (("op_tests", self.op_tests), ("export_tests", self.export_tests)):
            table = before.get(key)
            if isinstance(table, dict):
                counter.update({k: v for k, v in table.items() if isinstance(v, int) and v > 0})

    def to_json(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed(), 3),
            "tests": self.tests,
            "executed": self.executed,
            "passed": self.passed,
            "no_values": self.no_values,
            "slow_under_coverage": self.slow,
            "coverage_run_limit_s": {k: round(v, 1) for k, v in sorted(self.run_limits.items())},
            "calibration_share": "inf" if self.calibration_share == math.inf else self.calibration_share,
            "generation_failed": self.gen_failed,
            "infeasible_dropped": self.infeasible,
            "internal_errors": self.internal_errors,
            "internal_signatures": len(self.internal),
            "findings": dict(self.findings),
            "unique_signatures": len(self.signatures),
            "unsupported": sum(self.unsupported.values()),
            "unsupported_signatures": dict(sorted(self.unsupported.items())),
            "unsupported_learned": list(self.learned),
            "last_unique_s": None if self.last_unique_s is None else round(self.last_unique_s, 3),
            "worker_restarts": self.restarts,
            "worker_recycles": self.recycles,
            "blobs_dropped": self.blobs_dropped,
            "resources": {
                "disk_mb": round(self.disk_kb / 1024, 1),
                "corpus_mb": round(self.corpus_kb / 1024, 1),
                "rss_mb": round(self.rss_kb / 1024, 1),
                "worker_rss_mb": [round(k / 1024, 1) for k in self.worker_rss_kb],
            },
            "corpus": self.corpus,
            "op_tests": dict(sorted(self.op_tests.items())),
            "export_tests": dict(sorted(self.export_tests.items())),
            "coverage": None
            if self.branches is None
            else {
                "branches": self.branches,
                "pass_branches": self.pass_branches,
                "universe": self.universe,
                "interesting_tests": self.cov_tests,
                "last_new_s": None if self.last_new_s is None else round(self.last_new_s, 3),
            }
            | (
                {"parts": {k: dict(zip(("branches", "pass_branches", "universe"), v)) for k, v in self.parts.items()}}
                if self.parts
                else {}
            ),
        }


def _opt_float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
