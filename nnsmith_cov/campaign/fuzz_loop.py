"""The unguided loop (NNSmith's): generate -> search -> export -> every backend -> oracle, until time is up."""

from __future__ import annotations

import collections
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnsmith_cov import __version__
from nnsmith_cov.campaign.run_dir import RUN_SCHEMA, RunDir
from nnsmith_cov.campaign.testcase import CaseResult, CaseSettings, run_test
from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle
from nnsmith_cov.coverage.collector import PASS_FILTERS
from nnsmith_cov.coverage.covmap import VirginMap
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError, generate
from nnsmith_cov.oracle.bundle import write_bundle
from nnsmith_cov.oracle.finding import Finding


@dataclass
class FuzzConfig:
    gen: GenConfig
    settings: CaseSettings
    seed: int = 0
    time_s: float | None = None  # stop after this long ...
    max_tests: int | None = None  # ... or after this many test cases, whichever comes first

    def to_json(self) -> dict[str, Any]:
        gen = self.gen
        return {
            "seed": self.seed,
            "time_s": self.time_s,
            "max_tests": self.max_tests,
            "generator": {
                "nodes": gen.nodes,
                "binning": gen.binning,
                "max_elems": gen.max_elems,
                "timeout_ms": gen.timeout_ms,
                "ops": sorted(o.name() for o in gen.ops),
            },
        } | self.settings.to_json()


@dataclass
class RunStats:
    """Counters of a run; `to_json` is what stats.json holds."""

    started: float = field(default_factory=time.monotonic)
    tests: int = 0  # test cases started (graphs asked for)
    executed: int = 0  # reached the backends
    passed: int = 0
    no_values: int = 0  # value search found no NaN/Inf-free values: not tested
    gen_failed: int = 0
    faults: int = 0  # errors in nnsmith-cov itself (see the worker log)
    findings: collections.Counter[str] = field(default_factory=collections.Counter)  # symptom/stage/backend
    signatures: collections.Counter[str] = field(default_factory=collections.Counter)
    restarts: int = 0
    branches: int | None = None  # covered so far, with a collector (None without)
    pass_branches: int | None = None  # of those, in optimization passes
    universe: int | None = None
    cov_tests: int = 0  # tests that set a new map bit
    last_new_s: float | None = None  # elapsed time of the last such test
    stage_ms: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def to_json(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed(), 3),
            "tests": self.tests,
            "executed": self.executed,
            "passed": self.passed,
            "no_values": self.no_values,
            "generation_failed": self.gen_failed,
            "faults": self.faults,
            "findings": dict(self.findings),
            "unique_signatures": len(self.signatures),
            "worker_restarts": self.restarts,
            "coverage": None
            if self.branches is None
            else {
                "branches": self.branches,
                "pass_branches": self.pass_branches,
                "universe": self.universe,
                "interesting_tests": self.cov_tests,
                "last_new_s": None if self.last_new_s is None else round(self.last_new_s, 3),
            },
        }


def test_seed(run_seed: int, k: int) -> int:
    """The seed of test k: a hash, so neighbouring runs share no test cases."""
    digest = hashlib.sha256(f"nnsmith-cov:{run_seed}:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# What the loop tells its caller: ("new" | "dup", finding, bundle path or None), ("fault", message).
Event = tuple[str, Any, Any]


class Fuzzer:
    """Runs test cases on one worker and files findings into the run folder."""

    def __init__(self, cfg: FuzzConfig, run: RunDir, worker: WorkerHandle, on_event: Callable[[Event], None]) -> None:
        self.cfg, self.run, self.worker, self.on_event = cfg, run, worker, on_event
        self.stats = RunStats()
        self.versions: dict[str, str] = {"nnsmith-cov": __version__}
        self.covmap: VirginMap | None = None
        self.pass_mask: np.ndarray | None = None
        self.universe: Universe | None = None

    def start(self) -> None:
        hello = self.worker.start()
        self.versions |= hello["versions"]
        coverage = None
        if hello.get("collector"):
            self.universe = self.worker.universe()
            self.covmap = VirginMap(len(self.universe))
            self.pass_mask = self.universe.file_mask(PASS_FILTERS.get(self.universe.collector, ()))
            self.stats.branches, self.stats.pass_branches, self.stats.universe = 0, 0, len(self.universe)
            coverage = hello["collector"]
        self.run.create(self.cfg.to_json() | {"versions": self.versions, "coverage": coverage})

    def done(self) -> bool:
        cfg, st = self.cfg, self.stats
        return (cfg.max_tests is not None and st.tests >= cfg.max_tests) or (
            cfg.time_s is not None and st.elapsed() >= cfg.time_s
        )

    def step(self) -> CaseResult | None:
        """One test case; None when no graph could be generated."""
        k = self.stats.tests
        seed = test_seed(self.cfg.seed, k)
        self.stats.tests += 1
        try:
            gen = generate(self.cfg.gen, seed)
        except GenerationError:
            self.stats.gen_failed += 1
            return None
        self.stats.stage_ms["generate"].append(gen.record.gen_ms)
        try:
            result = run_test(self.worker, gen.graph, seed, self.cfg.settings)
        except WorkerFault as e:
            self.stats.faults += 1
            self.on_event(("fault", str(e).splitlines()[0], None))
            return None
        finally:
            self.stats.restarts = self.worker.deaths
        for stage, ms in result.ms.items():
            self.stats.stage_ms[stage].append(ms)
        self.account_coverage(result)
        if result.status == "no-values":
            self.stats.no_values += 1
        elif result.status == "pass":
            self.stats.executed += 1
            self.stats.passed += 1
        else:
            self.stats.executed += result.prepared is not None and result.prepared.onnx is not None
            for finding in result.findings:
                self.file(finding, k, gen, result)
        return result

    def account_coverage(self, result: CaseResult) -> None:
        """Fold a finished test's hits into the map (a worker that died mid-request sent none)."""
        if self.covmap is None or result.hits is None:
            return
        novelty = self.covmap.update(result.hits)
        if novelty.interesting:
            st = self.stats
            st.cov_tests += 1
            st.last_new_s = st.elapsed()
            st.branches = self.covmap.count()
            st.pass_branches = self.covmap.count(self.pass_mask)

    def file(self, finding: Finding, k: int, gen: Generated, result: CaseResult) -> None:
        self.stats.findings[f"{finding.symptom}/{finding.stage}/{finding.backend}"] += 1
        new = finding.signature not in self.stats.signatures
        self.stats.signatures[finding.signature] += 1
        bundle = None
        if new:  # one bundle per signature; duplicates are counted in findings.jsonl
            p = result.prepared
            assert p is not None
            meta = {
                "seed": gen.record.seed,
                "test": k,
                "settings": self.cfg.settings.to_json(),
                "generator": self.cfg.to_json()["generator"],
                "versions": self.versions,
                "search": p.search,
                "draws": gen.record.draws,
            }
            bundle = write_bundle(self.run.bundle_path(finding), finding, gen.graph, p.values, p.oracle, p.onnx, meta)
        self.run.log_finding(
            {"test": k, "seed": gen.record.seed}
            | finding.header()
            | {"new": new, "bundle": str(self.run.bundle_path(finding).relative_to(self.run.root))}
        )
        self.on_event(("new" if new else "dup", finding, bundle))

    def write_stats(self) -> None:
        self.run.write_json("stats.json", {"schema": RUN_SCHEMA} | self.stats.to_json())
