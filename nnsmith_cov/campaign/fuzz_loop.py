"""The fuzzing loop: generate -> search -> export -> every backend -> oracle -> coverage, until time is up."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov import __version__
from nnsmith_cov.abstract.choice import ReplayDivergence
from nnsmith_cov.baselines import FEEDBACK_ARMS, generate_with
from nnsmith_cov.campaign.run_dir import RUN_SCHEMA, RunDir
from nnsmith_cov.campaign.testcase import CaseResult, CaseSettings, Prepared, run_test
from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle, WorkerStartError
from nnsmith_cov.corpus.records import CorpusError, TestEntry, TestRecord, TimelineRow
from nnsmith_cov.corpus.seeds import Seed, SeedPool
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.coverage.collector import pass_filters
from nnsmith_cov.coverage.covmap import UNSEEN, Hits, Novelty, VirginMap
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.feedback.scheduler import Proposal, Scheduler
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError, GenRecord, generate
from nnsmith_cov.materialize.model_dir import npz_bytes
from nnsmith_cov.oracle.bundle import write_bundle
from nnsmith_cov.oracle.finding import Finding


@dataclass
class FuzzConfig:
    gen: GenConfig
    settings: CaseSettings
    seed: int = 0
    time_s: float | None = None  # stop after this long ...
    max_tests: int | None = None  # ... or after this many test cases, whichever comes first
    feedback: bool = False  # the scheduler biases choices toward new coverage (else plain NNSmith)
    collector: str = ""  # recorded so that a resumed campaign measures the same way
    cov_targets: list[str] = field(default_factory=list)
    pass_filters: list[str] | None = None  # None: the collector's defaults (coverage.collector.PASS_FILTERS)
    timeline_s: float = 5.0  # a coverage-over-time point at least this often
    generator: str = "nnsmith"  # or a baseline: graphfuzzer, lemon (nnsmith_cov.baselines)
    dynamic_arm: bool = False  # the scheduler chooses the share of dynamic-dim exports (gen.dynamic_prob unused)
    roundtrip_arm: bool = False  # ... and of graphs compiled from the IR's text (gen.roundtrip_prob unused)

    def to_json(self) -> dict[str, Any]:
        gen = self.gen
        return {
            "seed": self.seed,
            "time_s": self.time_s,
            "max_tests": self.max_tests,
            "feedback": self.feedback,
            "collector": self.collector,
            "cov_targets": self.cov_targets,
            "pass_filters": self.pass_filters,
            "generator": {
                "nodes": gen.nodes,
                "binning": gen.binning,
                "max_elems": gen.max_elems,
                "timeout_ms": gen.timeout_ms,
                "work_budget": gen.work_budget,
                "opsets": list(gen.opsets),
                "dynamic_prob": None if self.dynamic_arm else gen.dynamic_prob,  # None: the scheduler's
                "roundtrip_prob": None if self.roundtrip_arm else gen.roundtrip_prob,
                "ops": sorted(o.name() for o in gen.ops),
                "name": self.generator,
                # the scheduler's knobs this generator follows (none without feedback)
                "feedback_arms": list(FEEDBACK_ARMS[self.generator]) if self.feedback else [],
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
    infeasible: int = 0  # graphs the generator dropped as proven to have no NaN/Inf-free values
    faults: int = 0  # errors in nnsmith-cov itself (see the worker log)
    findings: collections.Counter[str] = field(default_factory=collections.Counter)  # symptom/stage/backend
    signatures: collections.Counter[str] = field(default_factory=collections.Counter)
    restarts: int = 0
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
    # generated tests by export plan: "opset 13", ..., "static", "dynamic", and "roundtrip"
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

    def track(self, universe: Universe, filters: Sequence[str] | None) -> tuple[VirginMap, np.ndarray]:
        """A fresh map of `universe` and its pass-only mask (`filters`, else the collector's);
        a composite's parts are counted separately from now on."""
        self.part_ranges = {p.collector: (p.start, p.stop) for p in universe.parts}
        return VirginMap(len(universe)), universe.file_mask(pass_filters(universe.collector, filters))

    def refresh_coverage(self, covmap: VirginMap, pass_mask: np.ndarray | None) -> None:
        self.branches, self.pass_branches = covmap.count(), covmap.count(pass_mask)
        self.universe = covmap.size
        reached = covmap.virgin != UNSEEN
        passes = reached & pass_mask if pass_mask is not None else np.zeros_like(reached)
        for name, (lo, hi) in self.part_ranges.items():
            self.parts[name] = (int(np.count_nonzero(reached[lo:hi])), int(np.count_nonzero(passes[lo:hi])), hi - lo)

    def fold_hits(self, covmap: VirginMap, pass_mask: np.ndarray | None, hits: Hits) -> Novelty:
        """Fold one test's hits into the map and these counters."""
        novelty = covmap.update(hits, [lo for lo, _ in list(self.part_ranges.values())[1:]])
        if novelty.interesting:
            self.cov_tests += 1
            self.last_new_s = self.elapsed()
            self.refresh_coverage(covmap, pass_mask)
        return novelty

    def to_json(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed(), 3),
            "tests": self.tests,
            "executed": self.executed,
            "passed": self.passed,
            "no_values": self.no_values,
            "generation_failed": self.gen_failed,
            "infeasible_dropped": self.infeasible,
            "faults": self.faults,
            "findings": dict(self.findings),
            "unique_signatures": len(self.signatures),
            "last_unique_s": None if self.last_unique_s is None else round(self.last_unique_s, 3),
            "worker_restarts": self.restarts,
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


GROW_LIMIT = 4  # a grown graph stays within this many times the configured size


def test_seed(run_seed: int, k: int) -> int:
    """The seed of test k: a hash, so neighbouring runs share no test cases."""
    digest = hashlib.sha256(f"nnsmith-cov:{run_seed}:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# What the loop tells its caller: ("new" | "dup", finding, bundle path or None), ("fault", message).
Event = tuple[str, Any, Any]


class Fuzzer:
    """Runs test cases on one worker, files findings into the run folder and, with a corpus,
    keeps every test that reached new coverage (or found something) in the campaign's LMDB
    store, one transaction per test. With a scheduler, its proposals shape each graph and
    each test's coverage is its reward.
    """

    def __init__(
        self,
        cfg: FuzzConfig,
        run: RunDir,
        worker: WorkerHandle,
        on_event: Callable[[Event], None],
        corpus: bool = False,
    ) -> None:
        self.cfg, self.run, self.worker, self.on_event = cfg, run, worker, on_event
        self.stats = RunStats()
        self.versions: dict[str, str] = {"nnsmith-cov": __version__}
        self.covmap: VirginMap | None = None
        self.pass_mask: np.ndarray | None = None
        self.universe: Universe | None = None
        self.use_corpus = corpus
        self.store: CorpusStore | None = None
        self.scheduler: Scheduler | None = None
        self._next_point = 0.0  # campaign time of the next timeline point
        self.workers = [worker]
        self.seeds: SeedPool | None = None  # corpus entries to grow (with a collector)
        # Held for everything shared (map, scheduler, store, stats, run folder) so that one
        # thread per worker can drive tests; generation and the workers' runs happen outside.
        self.lock = threading.RLock()

    @property
    def store_path(self) -> Path:
        return self.run.root / "lmdb"

    def start(self, resume: bool = False) -> None:
        """Start the worker and the run folder (a new one, or the one being resumed)."""
        hello = self.worker.start()
        self.versions |= hello["versions"]
        coverage = hello.get("collector")
        if coverage:
            self.universe = self.worker.universe()
            self.covmap, self.pass_mask = self.stats.track(self.universe, self.cfg.pass_filters)
        config = self.cfg.to_json() | {"versions": self.versions, "coverage": coverage}
        if self.covmap is not None and self.cfg.generator == "nnsmith":  # seeds regrow nnsmith's draws only
            self.seeds = SeedPool(self.covmap.size)
        if resume:
            self._resume()
        else:
            self.run.create(config)
            if self.use_corpus:
                self.store = CorpusStore.create(self.store_path, config, _str_values(self.versions), self.universe)
            self.scheduler = self._new_scheduler()
        self._refresh_coverage()

    def _new_scheduler(self) -> Scheduler:
        gen = self.cfg.gen
        names = [o.name() for o in gen.ops]
        return Scheduler(
            names,
            gen.nodes,
            gen.bins,
            self.cfg.seed,
            feedback=self.cfg.feedback,
            opsets=gen.opsets,
            dynamic=self.cfg.dynamic_arm,
            roundtrip=self.cfg.roundtrip_arm,
        )

    def _resume(self) -> None:
        """Pick up where the stored campaign stopped: map, scheduler, numbering, time, findings."""
        if not self.store_path.exists():
            raise CorpusError(f"{self.run.root} holds no campaign corpus to resume")
        ident = self.universe.ident if self.universe is not None else ""
        collector = self.universe.collector if self.universe is not None else "none"
        self.store = CorpusStore.open(self.store_path, expect_ident=ident, expect_collector=collector)
        counters = self.store.counters()
        st = self.stats
        st.tests, st.resumed_s, st.corpus = counters.next_test_id, counters.elapsed_s, counters.corpus
        if self.covmap is not None:
            virgin = self.store.virgin()
            assert virgin is not None
            self.covmap = virgin
        if self.seeds is not None:
            for i, record in self.store.entries():
                hits = self.store.hits(i)
                if hits is not None:
                    self.seeds.add(_seed_of(i, record.gen, record.draws), hits)
        state = self.store.scheduler_state()
        self.scheduler = Scheduler.from_state(state) if state is not None else self._new_scheduler()
        try:  # this process's predecessor's counters (rewritten every few seconds: may lag)
            before = json.loads((self.run.root / "stats.json").read_text())
            st.executed, st.passed, st.no_values = before["executed"], before["passed"], before["no_values"]
            st.gen_failed, st.faults = before["generation_failed"], before["faults"]
            st.infeasible = before.get("infeasible_dropped", 0)
            st.cov_tests = (before.get("coverage") or {}).get("interesting_tests", 0)
            st.last_new_s = (before.get("coverage") or {}).get("last_new_s")
            st.last_unique_s = before.get("last_unique_s")
            for key, counter in (("op_tests", st.op_tests), ("export_tests", st.export_tests)):
                counter.update({k: v for k, v in (before.get(key) or {}).items() if isinstance(v, int)})
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for _, header in self.store.findings():
            st.count_finding(header)
        self._next_point = st.elapsed()

    def _refresh_coverage(self) -> None:
        if self.covmap is not None:
            self.stats.refresh_coverage(self.covmap, self.pass_mask)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def done(self) -> bool:
        cfg, st = self.cfg, self.stats
        return (cfg.max_tests is not None and st.tests >= cfg.max_tests) or (
            cfg.time_s is not None and st.elapsed() >= cfg.time_s
        )

    def step(self, worker: WorkerHandle | None = None) -> CaseResult | None:
        """One test case on `worker` (default: the first); None when no graph could be generated
        or nnsmith-cov itself failed. Safe to call from one thread per worker: only generation
        and the worker's run happen outside the campaign lock."""
        worker = worker or self.worker
        assert self.scheduler is not None, "start() first"
        with self.lock:
            if self.done():  # another thread took the last test
                return None
            k = self.stats.tests
            self.stats.tests += 1
            self.stats.starts.append(self.stats.elapsed())
            proposal = self.scheduler.propose()
            parent = None
            if proposal.seeded and self.seeds:
                parent = self.seeds.pick(np.random.default_rng([self.cfg.seed, k]))
        seed = test_seed(self.cfg.seed, k)
        t0 = time.perf_counter()  # the test's cost, for the scheduler
        gen = None
        if parent is not None:
            gen = self._grow(parent, proposal, seed)
        if gen is None:
            parent, proposal = None, dataclasses.replace(proposal, seeded=False)
            try:
                gen = generate_with(self.cfg.generator, Scheduler.apply(proposal, self.cfg.gen), seed)
            except GenerationError:
                with self.lock:
                    self.stats.gen_failed += 1
                    self.scheduler.observe(proposal, GenRecord(seed), None)
                    self._commit(k, None)
                return None
        try:
            # Read without the lock: a signature filed meanwhile only costs one more O0 run.
            result = run_test(worker, gen.graph, seed, self.cfg.settings, self.stats.signatures.__contains__)
        except WorkerFault as e:
            with self.lock:
                self.stats.faults += 1
                self.on_event(("fault", str(e).splitlines()[0], None))
            return None
        with self.lock:
            self._finish(k, proposal, gen, result, parent, time.perf_counter() - t0)
        return result

    def _grow(self, parent: Seed, proposal: Proposal, seed: int) -> Generated | None:
        """The parent's graph rebuilt from its insertion draws, with more operators; None
        when it cannot be (the op set changed since, or the solver found no room)."""
        more = max(1, proposal.nodes // 2)
        if parent.n_ops + more > GROW_LIMIT * self.cfg.gen.nodes:
            return None
        cfg = dataclasses.replace(Scheduler.apply(proposal, self.cfg.gen), nodes=parent.n_ops + more)
        try:
            gen = generate(cfg, seed, prefix=parent.prefix)
        except (GenerationError, ReplayDivergence):
            return None
        return gen if len(gen.record.ops) > parent.n_ops else None

    def _finish(
        self, k: int, proposal: Proposal, gen: Generated, result: CaseResult, parent: Seed | None, seconds: float
    ) -> None:
        st = self.stats
        assert self.scheduler is not None
        st.restarts = sum(w.deaths for w in self.workers)
        st.stage_ms["generate"].append(gen.record.gen_ms)
        st.infeasible += len(gen.record.infeasible)
        st.op_tests.update(set(gen.record.ops))
        if gen.record.ops:
            st.export_tests.update([f"opset {gen.record.opset}", "dynamic" if gen.record.dynamic else "static"])
            if gen.record.roundtrip:
                st.export_tests["roundtrip"] += 1
        for stage, ms in result.ms.items():
            st.stage_ms[stage].append(ms)
        novelty = self.account_coverage(result)
        # A grown graph's reward goes to every op it holds, inherited or new: coverage comes
        # from what runs, and the lift estimate already discounts bystanders.
        self.scheduler.observe(proposal, gen.record, novelty, seconds)
        headers = []
        if result.status == "no-values":
            st.no_values += 1
        elif result.status == "pass":
            st.executed += 1
            st.passed += 1
        else:
            st.executed += result.prepared is not None and result.prepared.onnx is not None
            headers = [self.file(finding, k, gen, result) for finding in result.findings]
        keep = (novelty is not None and novelty.interesting) or headers
        entry = _entry(gen, result, novelty, headers, st.elapsed(), parent) if keep else None
        if entry is not None and entry.hits is not None and self.seeds is not None:
            self.seeds.add(_seed_of(k, gen.record.to_json(), gen.record.draws), entry.hits)
        self._commit(k, entry)

    def run_workers(self, more: list[WorkerHandle], on_step: Callable[[], None], stop: threading.Event) -> None:
        """Test in parallel on `self.worker` and `more` (started, same collector and universe),
        one thread each, until done() or `stop` is set; `on_step` runs after each test."""
        for w in more:
            hello = w.start()
            if hello.get("collector") and self.universe is not None and w.universe().ident != self.universe.ident:
                raise WorkerStartError("workers measure different branch universes")
        self.workers = [self.worker, *more]
        errors: list[BaseException] = []

        def loop(w: WorkerHandle) -> None:
            try:
                while not stop.is_set() and not self.done():
                    self.step(w)
                    on_step()
            except BaseException as e:  # surfaced in the main thread
                errors.append(e)
                stop.set()

        threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _commit(self, k: int, entry: TestEntry | None) -> None:
        """The test's bookkeeping in one transaction (with a corpus)."""
        if entry is not None and entry.hits is not None:
            self.stats.corpus += 1
        if self.store is None:
            return
        assert self.scheduler is not None
        st = self.stats
        point = None
        if st.elapsed() >= self._next_point or self.done():
            point = TimelineRow(
                st.elapsed(), st.tests, st.branches or 0, st.pass_branches or 0, st.corpus, st.findings.total()
            )
            self._next_point = st.elapsed() + self.cfg.timeline_s
        virgin = self.covmap if entry is not None and entry.hits is not None else None
        self.store.commit(
            k, entry, elapsed_s=st.elapsed(), virgin=virgin, scheduler=self.scheduler.state(), timeline=point
        )

    def account_coverage(self, result: CaseResult) -> Novelty | None:
        """Fold a finished test's hits into the map (a worker that died mid-request sent none)."""
        if self.covmap is None or result.hits is None:
            return None
        return self.stats.fold_hits(self.covmap, self.pass_mask, result.hits)

    def file(self, finding: Finding, k: int, gen: Generated, result: CaseResult) -> dict[str, Any]:
        """Count, bundle (first of its signature) and log a finding; returns its log line."""
        new = self.stats.count_finding(finding.header())
        bundle = None
        if new:  # one bundle per signature; duplicates are counted in findings.jsonl
            self.stats.last_unique_s = self.stats.elapsed()
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
        line = (
            {"test": k, "seed": gen.record.seed}
            | finding.header()
            | {"new": new, "bundle": str(self.run.bundle_path(finding).relative_to(self.run.root))}
        )
        self.run.log_finding(line)
        self.on_event(("new" if new else "dup", finding, bundle))
        return line

    def write_stats(self) -> None:
        with self.lock:
            stats = {"schema": RUN_SCHEMA} | self.stats.to_json()
            if self.scheduler is not None and self.cfg.feedback:
                stats["scheduler"] = self.scheduler.summary()
        self.run.write_json("stats.json", stats)


def _seed_of(test_id: int, gen: dict[str, Any], draws: list) -> Seed:
    cut = int(gen.get("insert_draws") or 0)
    return Seed(test_id, [(label, value) for label, value in draws[:cut]], len(gen.get("ops") or ()))


def _entry(
    gen: Generated,
    result: CaseResult,
    novelty: Novelty | None,
    findings: list[dict[str, Any]],
    elapsed_s: float,
    parent: Seed | None = None,
) -> TestEntry:
    """What the corpus keeps of a test: with its hits when it brought new coverage."""
    p = result.prepared
    record = TestRecord(
        seed=gen.record.seed,
        status=result.status,
        graph=gen.graph.to_json(),
        gen=gen.record.to_json(),
        draws=[(label, value) for label, value in gen.record.draws],
        timings={k: round(v, 3) for k, v in result.ms.items()},
        elapsed_s=elapsed_s,
        novelty=novelty,
        parent=parent.test_id if parent is not None else None,
    )
    blobs = prepared_blobs(p) if p is not None else {}
    hits = result.hits if novelty is not None and novelty.interesting else None
    return TestEntry(record, hits, blobs, findings)


def prepared_blobs(p: Prepared) -> dict[str, bytes]:
    """What the corpus stores of a prepared test: its model, inputs and oracle, those it has."""
    blobs: dict[str, bytes] = {}
    if p.onnx is not None:
        blobs["model.onnx"] = p.onnx
    if p.values:
        blobs["inputs.npz"] = npz_bytes(p.values)
    if p.oracle is not None:
        blobs["oracle.npz"] = npz_bytes(p.oracle)
    return blobs


def _str_values(versions: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in versions.items()}
