"""Re-run tests under a collector into a new campaign folder, as if a campaign had produced them.

The output is a campaign folder like `fuzz`'s (config.json, stats.json, findings/, lmdb/),
so `report` and `fuzz --resume` read it, plus two files of its own:

RUN/replayed.jsonl       one line per replayed item, in replay order:
                         {"test": 3, "source": "models/a.onnx", "kind": "onnx", "status": "pass",
                          "new_branches": 12, "elapsed_s": 4.1}
RUN/replay-errors.jsonl  one line per input that could not be replayed, or that a backend refused:
                         {"source": "models/bad.onnx", "kind": "unreadable", "error": "not an ONNX model (...)"}
                         {"source": "models/b.onnx", "kind": "rejected", "backend": "tvm", "error": "..."}
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnsmith_cov import __version__
from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, test_seed
from nnsmith_cov.campaign.internal import InternalError
from nnsmith_cov.campaign.ledger import Finished, Ledger, Material
from nnsmith_cov.campaign.run_dir import RUN_SCHEMA, RunDir
from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.testcase import (
    CaseResult,
    CaseSettings,
    export_stored,
    failure,
    run_onnx,
    run_prepared,
    run_test,
)
from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.replay.foreign import ForeignModel
from nnsmith_cov.replay.sources import Item, Loaded, NativeTest, ReplayInputError, Source

# How replayed tests are stamped in time: "source" keeps a campaign corpus's elapsed_s
# (later corpora continue after earlier ones), "mtime" orders by file modification time
# and stamps each item with its offset from the oldest, "replay" uses the replay's clock.
CLOCKS = ("source", "mtime", "replay")


class ReplayError(Exception):
    """The replay cannot start (no collector, unavailable backend): one line."""


@dataclass
class Planned:
    """An item's place in the replay: its test id, time stamp and point on the test-count axis."""

    item: Item
    test_id: int
    elapsed_s: float | None  # None: the replay's own clock at the time it finishes
    tests: int


def plan(sources: list[Source], clock: str) -> list[Planned]:
    """Every item of every source in replay order: source by source in the order given (each
    in its own order), or by modification time with the "mtime" clock."""
    items = [item for s in sources for item in s.items]
    if clock == "source" and any(item.source_s is None for item in items):
        raise ReplayError("--clock source needs campaign corpora only (other inputs carry no time stamps)")
    if clock == "mtime":
        items.sort(key=lambda item: (item.mtime, item.origin))
    first = items[0].mtime if items else 0.0
    out = []
    for k, item in enumerate(items):
        elapsed = item.source_s if clock == "source" else item.mtime - first if clock == "mtime" else None
        # On a campaign's own clock its test numbering is the test-count axis too; else replayed items.
        tests = item.source_tests if clock == "source" and item.source_tests is not None else k + 1
        out.append(Planned(item, k, elapsed, tests))
    return out


def default_clock(sources: list[Source]) -> str:
    return "source" if sources and all(s.kind == "corpus" for s in sources) else "replay"


def replay_config(
    sources: list[Source],
    settings: CaseSettings,
    seed: int,
    collector: str,
    cov_targets: list[str],
    pass_filters: list[str] | None,
    clock: str,
) -> dict[str, Any]:
    """The campaign config a replay records: a `fuzz` config (so `fuzz --resume` can continue
    it, with the generator settings of the first campaign replayed, if any) and what was replayed."""
    from nnsmith_cov.ops import ALL_OPS

    base = FuzzConfig(GenConfig(ops=ALL_OPS), settings, seed=seed, feedback=True, collector=collector)
    config = base.to_json() | {"cov_targets": cov_targets, "pass_filters": pass_filters}
    first = next((s.config for s in sources if s.config), None)
    if first:
        for key in ("generator", "feedback", "hedge"):
            if key in first:
                config[key] = first[key]
    clocks = {"source": "the campaigns' own elapsed_s", "mtime": "file modification times", "replay": "the replay's"}
    config["replay"] = {
        "sources": [{"path": str(s.path), "kind": s.kind, "items": len(s.items)} for s in sources],
        "clock": clock,
        "time_stamps": clocks[clock],
        "seed": seed,  # of foreign models' random inputs (test k's inputs: fuzz_loop.test_seed(seed, k))
        "nnsmith-cov": __version__,
    }
    return config


class Replayer:
    """Replays items one at a time on one worker into a new campaign corpus.

    Map, findings and store are updated as in `fuzz`: one write transaction per item, a
    corpus entry for each item that set a new map bit, a bundle per new finding signature.
    A broken input costs only itself. Not thread-safe; one thread drives it.
    """

    def __init__(
        self,
        settings: CaseSettings,
        run: RunDir,
        worker: WorkerHandle,
        on_event: Callable[[tuple[str, Any, Any]], None],
        seed: int = 0,
    ) -> None:
        self.settings, self.run, self.worker, self.on_event, self.seed = settings, run, worker, on_event, seed
        self.stats = RunStats()
        self.ledger = Ledger(run, self.stats, on_event)
        self.versions: dict[str, str] = {"nnsmith-cov": __version__}
        self.universe: Universe | None = None
        self.broken = 0  # inputs that could not be replayed
        self.rejected = 0  # (item, backend) pairs refused at import
        self.items = 0  # items planned
        self.clock = "replay"
        self._t0 = time.monotonic()

    def start(self, config: dict[str, Any]) -> None:
        """Start the worker, measure its universe, create the run folder and its corpus."""
        hello = self.worker.start()
        missing = {b: why for b, why in hello["unavailable"].items() if b in self.settings.backends}
        if missing:
            raise ReplayError("; ".join(f"backend {b} is unavailable: {why}" for b, why in missing.items()))
        if not hello.get("collector"):
            raise ReplayError(
                "a replay measures coverage: name a collector (python, llvm, binary, python+binary or module:Class)"
            )
        self.versions |= {k: str(v) for k, v in hello["versions"].items()}
        self.universe = self.worker.universe()
        self.ledger.track(self.universe, config.get("pass_filters"))
        self.clock = config["replay"]["clock"]
        self.items = sum(s["items"] for s in config["replay"]["sources"])
        config = config | {"versions": self.versions, "coverage": hello["collector"]}
        self.run.create(config)
        self.ledger.store = CorpusStore.create(self.run.root / "lmdb", config, self.versions, self.universe)
        self._t0 = time.monotonic()

    @property
    def store(self) -> CorpusStore | None:
        return self.ledger.store

    def close(self) -> None:
        self.ledger.close()

    # -- one item ----------------------------------------------------------------------------
    def replay(self, p: Planned, last: bool = False) -> None:
        """Load, run and record one planned item; a broken one is listed and skipped."""
        seed = test_seed(self.seed, p.test_id)
        try:
            loaded = p.item.load(seed)
        except ReplayInputError as e:
            self._broken(p.item, "unreadable", str(e))
            return
        self.stats.tests += 1
        rejected: list[dict[str, str]] = []
        try:
            if isinstance(loaded, NativeTest):
                result = self._run_native(loaded)
            else:
                result, rejected = self._run_foreign(loaded)
        except WorkerFault as e:  # nnsmith-cov's own error on this input: recorded apart, keep going
            self._broken(p.item, "fault", str(e).splitlines()[0])
            graph = loaded.graph if isinstance(loaded, NativeTest) else None
            meta = {"replay_of": p.item.origin, "settings": self.settings.to_json(), "versions": self.versions}
            error = InternalError.from_worker("worker", str(e))
            self.ledger.commit_internal(p.test_id, _seed_of(loaded, seed), error, meta, graph, last=last)
            return
        for r in rejected:
            self.rejected += 1
            self._log_error({"source": p.item.origin, "kind": "rejected"} | r)
            self.on_event(("rejected", p.item.origin, r))
        self._finish(p, loaded, seed, result, last)

    def _run_native(self, t: NativeTest) -> CaseResult:
        if not t.values or t.oracle is None:
            return run_test(self.worker, t.graph, t.seed, self.settings)  # searched again, as the campaign did
        return run_prepared(
            self.worker,
            self.settings,
            lambda: export_stored(self.worker, t.graph, t.seed, t.values, t.oracle, self.settings),
        )

    def _run_foreign(self, m: ForeignModel) -> tuple[CaseResult, list[dict[str, str]]]:
        """Every backend at OPT (O0 after a failure); no oracle, so only crashes and hangs
        are findings. An error at import is the backend refusing the model: listed, not filed."""
        result = CaseResult("pass", None)
        rejected = []
        timeout = self.settings.timeout_s
        for backend in self.settings.backends:
            reply = run_onnx(self.worker, m.onnx, m.inputs, backend, "opt", timeout)
            result.add_run(backend, reply)
            found = failure(backend, "opt", reply)
            if found is None:
                continue
            if reply.msg is not None and found.stage == "import":
                rejected.append({"backend": backend, "error": found.detail})
                continue
            if self.settings.localize and found.symptom != "hang":
                again = run_onnx(self.worker, m.onnx, m.inputs, backend, "O0", timeout)
                result.add_hits(again.msg)
                found.localized = "optimization" if failure(backend, "O0", again) is None else "conversion"
            result.findings.append(found)
        if result.findings:
            result.status = "finding"
        elif rejected:
            result.status = "rejected"
        return result, rejected

    def _finish(self, p: Planned, loaded: Loaded, seed: int, result: CaseResult, last: bool) -> None:
        self.stats.restarts = self.worker.deaths
        elapsed = p.elapsed_s if p.elapsed_s is not None else time.monotonic() - self._t0
        meta: dict[str, Any] = {"settings": self.settings.to_json(), "versions": self.versions}
        meta["replay_of"] = p.item.origin
        if isinstance(loaded, NativeTest):
            prep = result.prepared
            meta |= {"search": prep.search if prep else None, "draws": [list(d) for d in loaded.draws]}
            t = Finished(p.test_id, loaded.seed, result, loaded.graph, gen=loaded.gen, draws=list(loaded.draws))
        else:
            meta |= {"symbolic_dims": loaded.dims}
            t = Finished(p.test_id, seed, result, None, material=Material(loaded.inputs, None, loaded.onnx))
        t.meta, t.line, t.elapsed_s, t.tests_axis = meta, {"source": p.item.origin}, elapsed, p.tests
        novelty = self.ledger.fold(result.hits, result.flaky)
        self.ledger.commit(t, novelty, last=last)
        line = {"test": p.test_id, "source": p.item.origin, "kind": p.item.kind, "status": result.status}
        line |= {"new_branches": novelty.new_branches if novelty else 0, "elapsed_s": round(elapsed, 3)}
        with open(self.run.root / "replayed.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")

    # -- bookkeeping ---------------------------------------------------------------------------
    def _broken(self, item: Item, kind: str, error: str) -> None:
        self.broken += 1
        self._log_error({"source": item.origin, "kind": kind, "error": error})
        self.on_event(("broken", item.origin, error))

    def _log_error(self, line: dict[str, Any]) -> None:
        with open(self.run.root / "replay-errors.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")

    def summary(self) -> dict[str, Any]:
        return {"items": self.items, "replayed": self.stats.tests, "broken": self.broken, "rejected": self.rejected}

    def write_stats(self) -> None:
        stats = {"schema": RUN_SCHEMA} | self.stats.to_json() | {"replay": self.summary() | {"clock": self.clock}}
        self.run.write_json("stats.json", stats)


def _seed_of(loaded: Loaded, seed: int) -> int:
    return loaded.seed if isinstance(loaded, NativeTest) else seed


def error_lines(run_root: Path) -> list[dict[str, Any]]:
    """The lines of RUN/replay-errors.jsonl (empty when every input replayed)."""
    try:
        text = (run_root / "replay-errors.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
