"""Reduce one bundle: re-run it, shrink its graph while the finding holds, write what is left.

OUT (default BUNDLE/reduced) is a bundle `read_bundle` and `nnsmith-cov repro` accept, plus
reduce.json (what the reduction did; `pattern` is the root-cause key triage groups by) and,
where a stand-alone script can show the finding, repro.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnsmith_cov.campaign.repro import bundle_settings
from nnsmith_cov.campaign.testcase import BEFORE_OPTIMIZATION, Prepared, export_stored, prepare
from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle, WorkerStartError
from nnsmith_cov.materialize.model_dir import leaf_names
from nnsmith_cov.materialize.torch_module import output_name
from nnsmith_cov.oracle.bundle import Bundle, read_bundle, write_bundle
from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.signature import fault_op
from nnsmith_cov.reduce.candidates import Candidate, build, full_cut, pattern
from nnsmith_cov.reduce.check import Checker, keeps
from nnsmith_cov.reduce.delta import Search, alone
from nnsmith_cov.reduce.script import write_script
from nnsmith_cov.reduce.trace import TraceError, record_values

REDUCED = "reduced"
REDUCE_JSON = "reduce.json"
DEFAULT_BUDGET_S = 120.0
# Keys of the original meta.json that describe the original test, not the reduced one.
_STALE = (
    "schema",
    "symptom",
    "backend",
    "stage",
    "opt",
    "localized",
    "signature",
    "category",
    "rule",
    "detail",
    "graph_hash",
    "draws",
    "generator",
)


class ReduceError(Exception):
    """The bundle cannot be reduced here (one line: why)."""


@dataclass
class ReduceResult:
    out: Path
    signature: str  # the finding reduced (the bundle's signature)
    reduced_signature: str  # what the reduced bundle shows (an inconsistency names other ops)
    original_ops: int
    ops: list[str]  # the reduced graph's op types, in graph order
    steps: int
    seconds: float
    candidates_run: int
    out_of_time: bool
    script: Path | None
    passes: dict[str, int] = field(default_factory=dict)
    # Whether the recorded run gave the bundle's expected outputs again (fresh inputs carry its values).
    reference_agrees: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "reduced_signature": self.reduced_signature,
            "original_ops": self.original_ops,
            "reduced_ops": len(self.ops),
            "ops": self.ops,
            "pattern": pattern(self.ops),
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "candidates_run": self.candidates_run,
            "out_of_time": self.out_of_time,
            "passes": self.passes,
            "repro": None if self.script is None else self.script.name,
            "reference_agrees": self.reference_agrees,
        }


def reduce_bundle(
    path: Path,
    out: Path | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    plugins: Collection[str] = (),
    timeout_s: float | None = None,
) -> ReduceResult:
    """Reduce the bundle at `path` into `out` within about `budget_s` seconds (checked before
    each candidate; the best found so far is written when it runs out). BundleError for a
    bundle that cannot be read, ReduceError when it cannot be reduced here."""
    t0 = time.monotonic()
    bundle = read_bundle(path, plugins)
    out = out if out is not None else path / REDUCED
    _check_out(out, path)
    meta = bundle.meta
    stage, backend, opt = meta["stage"], meta["backend"], meta["opt"]
    settings = bundle_settings(meta, timeout_s, localize=False)
    names = leaf_names(bundle.graph)
    recorded = {v: bundle.values[n] for v, n in names.items() if n in bundle.values}
    if stage != "reference":  # the reference ran: every value it computed can seed a fresh input
        if len(recorded) != len(names):
            raise ReduceError(f"{path}/inputs.npz lacks values of the graph's inputs or weights")
        try:
            recorded = record_values(bundle.graph, bundle.values, settings.timeout_s)
        except TraceError as e:
            raise ReduceError(f"{path}: {e}") from None
    agrees = _agrees(bundle, recorded) if stage != "reference" else None
    with tempfile.TemporaryDirectory(prefix="nnsmith-reduce-") as tmp:
        worker = WorkerHandle(settings.backends, Path(tmp) / "worker.log")
        try:
            hello = worker.start()
            if backend in hello["unavailable"]:
                raise ReduceError(f"backend {backend} is unavailable here: {hello['unavailable'][backend]}")
            checker = Checker(worker, settings, backend, stage, opt, meta["seed"])
            target = _baseline(bundle, checker)
            if target is None or any(getattr(target, k) != meta[k] for k in ("symptom", "backend", "stage", "opt")):
                now = "the test passes" if target is None else target.signature
                raise ReduceError(f"{path}: does not reproduce ({now}; the bundle says {meta['signature']})")

            def holds(cut: Any) -> bool:
                return keeps(target, checker.run(build(bundle.graph, cut, recorded)).finding)

            deadline = t0 + budget_s
            start = full_cut(bundle.graph)
            named = fault_op(target.log) if target.symptom == "crash" else None
            first = alone(bundle.graph, start, named) if named else []
            search = Search(bundle.graph, start, holds, deadline, target.symptom != "inconsistency", first)
            progress = search.run()
            if progress.steps:
                final = build(bundle.graph, progress.cut, recorded)
                outcome = checker.run(final)
                finding, prepared = outcome.finding, outcome.prepared
                assert finding is not None and prepared is not None  # it held when kept (and is cached)
                _localize(finding, prepared, checker)
                written = _write(out, bundle, final, finding, prepared)
            else:  # nothing could go: the original is its own reduction
                written = _copy_original(out, bundle, target)
                finding = target
        except WorkerStartError as e:
            raise ReduceError(str(e)) from None
        except WorkerFault as e:  # nnsmith-cov's own error in the worker: its first line is the news
            raise ReduceError(f"internal error in the worker: {str(e).splitlines()[0]}") from None
        finally:
            worker.close()
    written_back = read_bundle(out, plugins)  # also checks that OUT reads as a bundle
    result = ReduceResult(
        out=out,
        signature=meta["signature"],
        reduced_signature=finding.signature,
        original_ops=len(bundle.graph.insts),
        ops=written,
        steps=progress.steps,
        seconds=time.monotonic() - t0,
        candidates_run=checker.runs,
        out_of_time=progress.out_of_time,
        script=write_script(out, written_back.meta, written_back.graph.roundtrip),
        passes=dict(Counter(progress.passes)),
        reference_agrees=agrees,
    )
    (out / REDUCE_JSON).write_text(json.dumps(result.to_json(), indent=1) + "\n")
    return result


def _agrees(bundle: Bundle, recorded: dict[int, Any]) -> bool | None:
    """Whether the recorded run reproduced the bundle's expected outputs bit for bit."""
    if bundle.oracle is None:
        return None
    pairs = [(bundle.oracle.get(output_name(v)), recorded.get(v)) for v in bundle.graph.outputs]
    return all(e is not None and a is not None and e.shape == a.shape and (e == a).all() for e, a in pairs)


def _check_out(out: Path, bundle: Path) -> None:
    """OUT is replaced when written: it may only be absent, empty, or an earlier reduction."""
    if out.resolve() == bundle.resolve():
        raise ReduceError(f"{out}: the output must not be the bundle itself")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "meta.json").is_file())):
        raise ReduceError(f"{out}: exists and is not a bundle; choose another output folder")


def _baseline(bundle: Bundle, checker: Checker) -> Finding | None:
    """What the bundle shows now, run as it was stored (its own ONNX model and values)."""
    meta, s = bundle.meta, checker.settings
    if meta["stage"] == "reference":
        return prepare(checker.worker, bundle.graph, meta["seed"], s)[1]
    prepared, finding = export_stored(checker.worker, bundle.graph, meta["seed"], bundle.values, bundle.oracle, s)
    if finding is not None or meta["stage"] == "export":
        return finding
    if bundle.onnx is None:
        raise ReduceError(f"{bundle.path}: a {meta['stage']} finding needs model.onnx")
    stored = Prepared(bundle.graph, meta["seed"], bundle.values, bundle.oracle, bundle.onnx, meta.get("search"))
    return checker.on_backend(stored, meta["opt"])


def _localize(finding: Finding, prepared: Prepared, checker: Checker) -> None:
    """Where O0 puts the reduced finding, as a campaign would record it."""
    if finding.stage in BEFORE_OPTIMIZATION:
        finding.localized = BEFORE_OPTIMIZATION[finding.stage]
    elif finding.backend != "torch" and finding.symptom != "hang" and finding.opt == "opt":
        crash_only = finding.symptom != "inconsistency"
        o0 = checker.on_backend(prepared, "O0", crash_only=crash_only)
        finding.localized = "optimization" if o0 is None else "conversion"


def _write(out: Path, bundle: Bundle, cand: Candidate, finding: Finding, prepared: Prepared) -> list[str]:
    stage = bundle.meta["stage"]
    values = prepared.values if stage == "reference" else cand.values  # the search found them anew
    oracle = prepared.oracle if stage == "reference" else cand.oracle
    if oracle is None and stage != "reference":  # leaves were filled: what PyTorch says of the new values
        try:
            computed = record_values(cand.graph, cand.values)
            oracle = {output_name(v): computed[v] for v in cand.graph.outputs}
        except TraceError:
            oracle = {}  # a crash re-runs without expected outputs (repro needs the file)
    meta = {k: v for k, v in bundle.meta.items() if k not in _STALE}
    if bundle.meta["stage"] == "reference":
        meta["search"] = prepared.search
    meta["reduced_from"] = {
        "bundle": str(bundle.path),
        "signature": bundle.meta["signature"],
        "graph_hash": bundle.graph.content_hash(),
        "ops": len(bundle.graph.insts),
    }
    write_bundle(out, finding, cand.graph, values, oracle, prepared.onnx, meta)
    return cand.ops()


def _copy_original(out: Path, bundle: Bundle, finding: Finding) -> list[str]:
    """OUT as a copy of the bundle's files (its subfolders, such as an earlier OUT, left out)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in bundle.path.iterdir():
        if f.is_file() and not f.is_symlink():
            shutil.copyfile(f, tmp / f.name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return [inst.op for inst in bundle.graph.insts]
