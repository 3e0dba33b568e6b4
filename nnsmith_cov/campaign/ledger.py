"""The ledger: what one finished test changes, applied in one place for `fuzz` and `replay`.

A finished test changes the counters (`RunStats`), the coverage map, the corpus (its entry,
the virgin map, the scheduler's state, the counters, a timeline row), findings.jsonl or
internal.jsonl, and the bundles of new signatures. The LMDB transaction is the commit
point; nothing outside LMDB is written before it:

  1. bundles of new signatures are staged in RUN/findings/.staged/<test>/ (internal errors:
     RUN/internal/.staged/<test>/)
  2. one transaction stores the test: its entry with its finding lines, the map, the
     scheduler's state, the run's counters, a timeline row
  3. the staged bundles are renamed into place and the lines appended to the .jsonl files

A process killed between 1 and 2 leaves a staging folder of a test the corpus does not
hold; one killed between 2 and 3 leaves a committed test whose bundle or lines are
missing. `reconcile`, run when a campaign resumes, drops the former, finishes the latter,
and rewrites the .jsonl files from the corpus where they disagree: the corpus is the
record and the files beside it are views of it (as libFuzzer's merge redoes what its
control file does not mark done). Counters are stored in the same transaction, so a
resumed campaign counts exactly what its corpus holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov.bounded_read import loads_json, read_json
from nnsmith_cov.campaign.internal import SYMPTOM, InternalError, is_internal, write_internal_bundle
from nnsmith_cov.campaign.resources import disk_kb, rss_kb
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.testcase import CaseResult
from nnsmith_cov.corpus.budget import DiskBudget
from nnsmith_cov.corpus.records import TestEntry, TestRecord, TimelineRow
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.coverage.collector import pass_filters
from nnsmith_cov.coverage.covmap import UNSEEN, Hits, Novelty, VirginMap
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.model_dir import npz_bytes
from nnsmith_cov.oracle.bundle import write_bundle
from nnsmith_cov.oracle.finding import Finding

STAGED = ".staged"
INTERNAL_LOG = "internal.jsonl"
FINDINGS_LOG = "findings.jsonl"

# What the ledger tells its owner: ("new" | "dup", Finding, bundle path or None),
# ("internal", InternalError, bundle path or None).
Event = tuple[str, Any, Any]


@dataclass
class Material:
    """A test's bytes: what its bundles and its corpus blobs are made of."""

    values: dict[str, np.ndarray] = field(default_factory=dict)  # inputs (i<v>) and weights (w<v>)
    oracle: dict[str, np.ndarray] | None = None
    onnx: bytes | None = None

    def blobs(self) -> dict[str, bytes]:
        """What the corpus stores: its model, inputs and oracle, those it has."""
        blobs: dict[str, bytes] = {}
        if self.onnx is not None:
            blobs["model.onnx"] = self.onnx
        if self.values:
            blobs["inputs.npz"] = npz_bytes(self.values)
        if self.oracle is not None:
            blobs["oracle.npz"] = npz_bytes(self.oracle)
        return blobs


@dataclass
class Finished:
    """One finished test as the ledger takes it, from `fuzz` or `replay`."""

    test_id: int
    seed: int
    result: CaseResult
    graph: GraphIR | None  # None: a foreign ONNX model
    gen: dict[str, Any] = field(default_factory=dict)  # GenRecord.to_json() ({} for foreign models)
    draws: list[tuple[str, int | float]] = field(default_factory=list)
    parent: int | None = None  # the corpus entry it was grown from
    meta: dict[str, Any] = field(default_factory=dict)  # what its bundles record beyond the finding
    line: dict[str, Any] = field(default_factory=dict)  # what its finding lines add (a replay's source)
    material: Material | None = None  # None: the prepared test's (values, oracle, model)
    elapsed_s: float | None = None  # its time stamp; None: the campaign's clock now
    tests_axis: int | None = None  # its point on the test-count axis; None: tests started so far

    def bytes(self) -> Material:
        if self.material is not None:
            return self.material
        p = self.result.prepared
        return Material() if p is None else Material(p.values, p.oracle, p.onnx)


class Ledger:
    """Applies finished tests to a campaign's state, each in one commit. Not thread-safe:
    the owner holds its lock around every call."""

    def __init__(
        self, run: RunDir, stats: RunStats, on_event: Callable[[Event], None], timeline_s: float = 5.0
    ) -> None:
        self.run, self.stats, self.on_event, self.timeline_s = run, stats, on_event, timeline_s
        self.store: CorpusStore | None = None
        self.covmap: VirginMap | None = None
        self.pass_mask: np.ndarray | None = None
        self._next_point = 0.0
        self._rows = 0  # timeline rows this process wrote
        # resources are sampled with the timeline, at most every resources_s (a walk of the run folder)
        self.resources_s = 30.0
        self._next_sample = 0.0
        self.workers_rss: Callable[[], list[int]] = list  # the owner's workers' resident KiB
        self.max_corpus_bytes = 0  # the disk budget (--max-corpus-mb; 0: none)
        self.budget: DiskBudget | None = None
        self._flags_changed = False  # flaky branches flagged since the last commit

    # -- coverage ------------------------------------------------------------------------------
    def track(self, universe: Universe, filters: list[str] | None) -> None:
        """Measure against a fresh map of `universe`, pass-only by `filters` (else the collector's);
        a composite's parts are counted apart."""
        self.stats.part_ranges = {p.collector: (p.start, p.stop) for p in universe.parts}
        self.covmap = VirginMap(len(universe))
        self.pass_mask = universe.file_mask(pass_filters(universe.collector, filters))
        self.refresh_coverage()

    def refresh_coverage(self) -> None:
        st, covmap, mask = self.stats, self.covmap, self.pass_mask
        if covmap is None:
            return
        st.branches, st.pass_branches, st.universe = covmap.count(), covmap.count(mask), covmap.size
        reached = covmap.virgin != UNSEEN
        passes = reached & mask if mask is not None else np.zeros_like(reached)
        for name, (lo, hi) in st.part_ranges.items():
            st.parts[name] = (int(np.count_nonzero(reached[lo:hi])), int(np.count_nonzero(passes[lo:hi])), hi - lo)

    def fold(self, hits: Hits | None, flaky: np.ndarray | None = None) -> Novelty | None:
        """Fold one test's hits into the map (None without a collector, or when a worker died
        mid-request and sent none); `flaky`: the branches its calibration found flaky."""
        if self.covmap is None or hits is None:
            return None
        if flaky is not None and len(flaky):
            self.covmap.flag(flaky)
            self._flags_changed = True
        novelty = self.covmap.update(hits, [lo for lo, _ in list(self.stats.part_ranges.values())[1:]])
        if novelty.interesting:
            self.stats.cov_tests += 1
            self.stats.last_new_s = self.stats.elapsed()
            self.refresh_coverage()
        return novelty

    # -- one finished test ---------------------------------------------------------------------
    def commit(
        self, t: Finished, novelty: Novelty | None, scheduler: Mapping[str, Any] | None = None, last: bool = False
    ) -> TestEntry | None:
        """Count, stage the bundles of new signatures, commit, publish. Returns what the corpus
        kept of the test (None: it only counted)."""
        st, result = self.stats, t.result
        for stage, ms in result.ms.items():
            st.stage_ms[stage].append(ms)
        if result.status == "no-values":
            st.no_values += 1
        st.executed += result.backends_run > 0
        st.passed += result.status == "pass"
        st.slow += len(result.slow)
        for refused in result.unsupported:  # not findings: counted, and the campaign learns from them
            st.count_unsupported(refused.signature)
        elapsed = t.elapsed_s if t.elapsed_s is not None else st.elapsed()
        staged: list[tuple[Path, Path]] = []
        lines = []
        for finding in result.findings:
            new = st.count_finding(finding.header())
            final = self.run.bundle_path(finding)
            if new:
                st.last_unique_s = elapsed
                staged.append((self._stage(final, t.test_id, finding, t), final))
            line = {"test": t.test_id, "seed": t.seed} | finding.header()
            lines.append(line | {"new": new, "bundle": str(final.relative_to(self.run.root))} | t.line)
        interesting = novelty is not None and novelty.interesting
        st.corpus += interesting
        entry = None
        if interesting or lines:
            record = TestRecord(
                seed=t.seed,
                status=result.status,
                graph=t.graph.to_json() if t.graph is not None else {},
                gen=t.gen,
                draws=list(t.draws),
                timings={k: round(v, 3) for k, v in result.ms.items()},
                elapsed_s=elapsed,
                novelty=novelty,
                parent=t.parent,
            )
            entry = TestEntry(record, result.hits if interesting else None, t.bytes().blobs(), lines)
        try:
            self._store(t.test_id, entry, elapsed, t.tests_axis, interesting or bool(lines), scheduler, last)
        except ValueError as e:  # nnsmith-cov could not encode its own record: ours, not the test's
            self._unstage(t.test_id, self.run.root / "findings")
            st.corpus -= interesting
            error = InternalError.from_exception("observe", e)
            self.commit_internal(t.test_id, t.seed, error, t.meta, None, scheduler=scheduler, last=last)
            return None
        for path, final in staged:
            _publish(path, final)
        self._unstage(t.test_id, self.run.root / "findings")
        self._append(FINDINGS_LOG, lines)
        for finding, line in zip(result.findings, lines):
            bundle = self.run.root / line["bundle"] if line["new"] else None
            self.on_event(("new" if line["new"] else "dup", finding, bundle))
        return entry

    def commit_internal(
        self,
        test_id: int,
        seed: int,
        error: InternalError,
        meta: Mapping[str, Any],
        graph: GraphIR | None,
        folded: tuple[Hits, Novelty] | None = None,
        scheduler: Mapping[str, Any] | None = None,
        last: bool = False,
    ) -> None:
        """A test ended by an internal error: counted and kept apart from findings (symptom
        "internal", RUN/internal/), the first of each signature with what replays it.
        `folded`: the test's hits and novelty, when they were already folded into the map (the
        error came after): they are stored with it, or the map would hold branches no bitmap
        accounts for."""
        st = self.stats
        new = st.count_internal(error.signature)
        folder = self.run.root / "internal"
        final = folder / error.bundle_name()
        staged = None
        if new:
            staged = folder / STAGED / str(test_id) / final.name
            staged.parent.mkdir(parents=True, exist_ok=True)
            graph_json = graph.dumps() if graph is not None else None
            write_internal_bundle(staged, error, {"test": test_id, "seed": seed} | dict(meta), graph_json)
        line = {"test": test_id, "seed": seed} | error.header() | {"new": new, "bundle": f"internal/{final.name}"}
        record = TestRecord(
            seed=seed,
            status=SYMPTOM,
            graph=graph.to_json() if graph is not None else {},
            gen={},
            draws=[],
            timings={},
            elapsed_s=st.elapsed(),
            novelty=folded[1] if folded is not None else None,
        )
        hits = folded[0] if folded is not None and folded[1].interesting else None
        st.corpus += hits is not None
        self._store(test_id, TestEntry(record, hits, {}, [line]), st.elapsed(), None, True, scheduler, last)
        if staged is not None:
            _publish(staged, final)
        self._unstage(test_id, folder)
        self._append(INTERNAL_LOG, [line])
        self.on_event(("internal", error, final if new else None))

    def skip(self, test_id: int, scheduler: Mapping[str, Any] | None = None, last: bool = False) -> None:
        """A test that produced nothing to keep (its graph could not be made): counters only."""
        self._store(test_id, None, self.stats.elapsed(), None, False, scheduler, last)

    def _store(
        self,
        test_id: int,
        entry: TestEntry | None,
        elapsed: float,
        tests_axis: int | None,
        notable: bool,
        scheduler: Mapping[str, Any] | None,
        last: bool,
    ) -> None:
        if self.store is None:
            return
        st = self.stats
        point = None
        # A point whenever coverage or findings moved (exact curves, also on a replay's
        # borrowed clock), and at least every timeline_s, first and last.
        if notable or last or self._rows == 0 or elapsed >= self._next_point:
            if last or self._rows == 0 or elapsed >= self._next_sample:
                self.sample()
                self._next_sample = elapsed + self.resources_s
            axis = tests_axis if tests_axis is not None else st.tests
            workers = sum(st.worker_rss_kb)
            counts = (st.branches or 0, st.pass_branches or 0, st.corpus, st.findings.total())
            point = TimelineRow(elapsed, axis, *counts, st.disk_kb, st.rss_kb, workers)
            self._next_point = elapsed + self.timeline_s
        virgin = self.covmap if entry is not None and entry.hits is not None else None
        flaky = self.covmap.flagged() if self.covmap is not None and self._flags_changed else None
        self.store.commit(
            test_id,
            entry,
            elapsed_s=elapsed,
            virgin=virgin,
            scheduler=scheduler,
            timeline=point,
            run_stats=st.to_json(),
            flaky=flaky,
        )
        self._flags_changed = False
        self._rows += point is not None
        if self.max_corpus_bytes > 0:
            self._enforce(entry)

    def sample(self) -> None:
        """Measure disk and memory now into the stats (stats.json, the status screen, the timeline)."""
        st = self.stats
        st.disk_kb = disk_kb(self.run.root)
        st.rss_kb = rss_kb(os.getpid())
        st.worker_rss_kb = self.workers_rss()
        if self.store is not None:
            st.corpus_kb = self.store.used_bytes() >> 10

    def _enforce(self, entry: TestEntry | None) -> None:
        assert self.store is not None
        if self.budget is None:
            if self.store.meta.schema < 2:  # an old corpus resumed: its raw blobs cannot be marked dropped
                self.max_corpus_bytes = 0
                return
            self.budget = DiskBudget(self.store, self.max_corpus_bytes)
        if entry is not None and entry.hits is not None:
            self.budget.note(entry.hits)
        done = self.budget.after_commit()
        if done is not None:
            self.stats.blobs_dropped += len(done.tests)
            self.stats.corpus_kb = done.used_bytes >> 10

    def _stage(self, final: Path, test_id: int, finding: Finding, t: Finished) -> Path:
        path = final.parent / STAGED / str(test_id) / final.name
        path.parent.mkdir(parents=True, exist_ok=True)
        m = t.bytes()
        meta = {"seed": t.seed, "test": t.test_id} | t.meta
        return write_bundle(path, finding, t.graph, m.values, m.oracle, m.onnx, meta)

    def _unstage(self, test_id: int, folder: Path) -> None:
        shutil.rmtree(folder / STAGED / str(test_id), ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty: another worker's test is staged there
            (folder / STAGED).rmdir()

    def _append(self, name: str, lines: list[dict[str, Any]]) -> None:
        if lines:
            with open(self.run.root / name, "a") as f:
                f.write("".join(json.dumps(line) + "\n" for line in lines))

    # -- resume --------------------------------------------------------------------------------
    def restore(self) -> None:
        """Counters, map and findings of the stored campaign (a resume)."""
        assert self.store is not None
        st = self.stats
        counters = self.store.counters()
        st.tests, st.resumed_s, st.corpus = counters.next_test_id, counters.elapsed_s, counters.corpus
        if self.covmap is not None:
            virgin = self.store.virgin()
            assert virgin is not None
            self.covmap = virgin
        before = self.store.run_stats()
        if before is None:  # a corpus from before the counters were committed with each test
            try:
                before = read_json(self.run.root / "stats.json")
            except (OSError, ValueError):
                before = {}
        if isinstance(before, dict):
            st.restore(before)
        st.internal_errors = 0
        for _, header in self.store.findings():
            if is_internal(header):
                st.count_internal(header["signature"])
            else:
                st.count_finding(header)
        self._next_point = st.elapsed()
        self.refresh_coverage()

    def reconcile(self) -> list[str]:
        """Make the files beside the corpus agree with it (see the module docstring); returns
        what was repaired, one line each."""
        assert self.store is not None
        repaired: list[str] = []
        stored = self.store.findings()
        committed = {test_id for test_id, _ in stored}
        for folder in (self.run.root / "findings", self.run.root / "internal"):
            staging = folder / STAGED
            if not staging.is_dir():
                continue
            for test_dir in sorted(staging.iterdir()):
                done = test_dir.name.isdigit() and int(test_dir.name) in committed
                for bundle in sorted(test_dir.iterdir()) if done else []:
                    if bundle.is_dir() and not bundle.name.endswith(".tmp") and not (folder / bundle.name).exists():
                        _publish(bundle, folder / bundle.name)
                        repaired.append(f"published the bundle of test {test_dir.name}: {bundle.name}")
                if not done:
                    repaired.append(f"dropped what uncommitted test {test_dir.name} had staged")
                shutil.rmtree(test_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                staging.rmdir()
        for name, want in (
            (FINDINGS_LOG, [h for _, h in stored if not is_internal(h)]),
            (INTERNAL_LOG, [h for _, h in stored if is_internal(h)]),
        ):
            path = self.run.root / name
            try:
                have = [loads_json(line, str(path)) for line in path.read_text().splitlines() if line.strip()]
            except FileNotFoundError:
                have = []
            except (OSError, ValueError):
                have = None
            if have is None or _canon(have) != _canon(want):
                self.run.write_lines(name, [json.dumps(h) for h in want])
                repaired.append(f"{name} rewritten from the corpus ({len(want)} lines)")
        return repaired

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def _publish(staged: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    os.replace(staged, final)


def _canon(lines: list[Any]) -> list[str]:
    return sorted(json.dumps(line, sort_keys=True) for line in lines)
