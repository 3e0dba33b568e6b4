"""One test case: values and export in the worker, every backend, the oracle, O0 localization."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnsmith_cov.campaign.internal import InternalError, project_frames
from nnsmith_cov.campaign.protocol import decode_arrays, encode_arrays
from nnsmith_cov.campaign.run_limit import RunLimits
from nnsmith_cov.campaign.worker_handle import Reply, WorkerHandle
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.gen.generator import Generated
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.oracle.compare import Mismatch, compare_outputs, tolerance_for
from nnsmith_cov.oracle.consensus import apply_consensus, mismatching
from nnsmith_cov.oracle.finding import Finding, producer_ops
from nnsmith_cov.oracle.precision import judge_precision
from nnsmith_cov.oracle.refusal import error_class
from nnsmith_cov.oracle.signature import death_signature, error_signature, mismatch_signature

PREPARE_SLACK_S = 5.0  # the export's share of a prepare deadline (it takes tens of milliseconds)


@dataclass
class CaseSettings:
    """How a test case is run; part of every bundle's metadata."""

    backends: list[str]
    rtol: float = 1e-2
    atol: float = 1e-3
    half_rtol: float = 5e-2  # float16 outputs: ten ops of half-precision rounding fit in 5%
    half_atol: float = 1e-2
    timeout_s: float = 60.0  # per worker request (search + export, or one backend at one opt level)
    search: dict[str, Any] = field(default_factory=lambda: {"method": "gradient", "max_iters": 256, "budget_ms": 5000})
    localize: bool = True  # re-run at O0 after a failure at OPT

    def prepare_timeout_s(self) -> float:
        """PyTorch's side of a test (value search, then export): twice the search's own budget
        and PREPARE_SLACK_S for the export, within `timeout_s`. The search stops at its budget
        between steps, but not inside one PyTorch call: a float16 ConvTranspose2d of a 1x1
        input with a stride of 65,536 ran 63 s on this CPU, and its test held a 15-minute
        campaign for 80 s. Past this it is a PyTorch hang at the stage it was in."""
        budget_s = float(self.search.get("budget_ms") or 0) / 1000
        return min(self.timeout_s, 2 * budget_s + PREPARE_SLACK_S)

    def to_json(self) -> dict[str, Any]:
        return {
            "backends": self.backends,
            "rtol": self.rtol,
            "atol": self.atol,
            "half_rtol": self.half_rtol,
            "half_atol": self.half_atol,
            "timeout_s": self.timeout_s,
            "search": self.search,
            "localize": self.localize,
        }


@dataclass
class Prepared:
    """The model side of a test: values, PyTorch's outputs, the ONNX model."""

    graph: GraphIR
    seed: int
    values: dict[str, np.ndarray]  # inputs (i<v>) and weights (w<v>)
    oracle: dict[str, np.ndarray] | None
    onnx: bytes | None
    search: dict[str, Any] | None
    ms: dict[str, float] = field(default_factory=dict)  # search, export
    hits: Hits | None = None  # coverage of the export, when the worker has a collector
    # A proposed test's values and model are held by its worker (runs name the test's id there);
    # its reply brought a copy, decoded at `load`.
    test: int | None = None
    fetch: Callable[[], tuple[dict[str, np.ndarray], bytes | None]] | None = field(default=None, repr=False)

    def inputs(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.values.items() if k.startswith("i")}

    @property
    def held(self) -> bool:
        """Whether the worker holds the values and the model (runs name the test), not yet loaded here."""
        return self.fetch is not None

    def load(self) -> Prepared:
        """Decode the values and the model the worker's reply brought (once): for a test that is
        kept, or whose oracle needs the values."""
        if self.fetch is not None:
            fetch, self.fetch = self.fetch, None
            self.values, self.onnx = fetch()
        return self


@dataclass
class CaseResult:
    status: str  # "pass" | "finding" | "no-values"
    prepared: Prepared | None
    findings: list[Finding] = field(default_factory=list)
    ms: dict[str, float] = field(default_factory=dict)  # search, export, <backend>.compile, ...
    hits: Hits | None = None  # coverage of the whole test (export and every backend run), with a collector
    # slots the collector's calibration found flaky during this test (see covmap.VirginMap.flag)
    flaky: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    backends_run: int = 0  # backend runs at OPT (the test was executed when any)
    # Backend runs that ended in the backend's "not implemented": no findings (class "unsupported")
    unsupported: list[Finding] = field(default_factory=list)
    # Backends that timed out under the collector only: run natively, they finished (not hangs)
    slow: list[str] = field(default_factory=list)

    def add_hits(self, msg: dict[str, Any] | None) -> None:
        """Add the hits a worker reply carries (none when the worker died mid-request)."""
        more = _hits(msg or {})
        if more is not None:
            self.hits = more if self.hits is None else self.hits + more
        if msg and msg.get("unstable"):
            self.flaky = np.union1d(self.flaky, np.frombuffer(msg["unstable"], "<u4")).astype(np.uint32)

    def add_run(self, backend: str, reply: Reply) -> None:
        """Account one backend run at OPT: its hits and its stage timings."""
        self.backends_run += 1
        self.add_hits(reply.msg)
        for stage, took in ((reply.msg or {}).get("ms") or {}).items():
            self.ms[f"{backend}.{stage}"] = took


def prepare(worker: WorkerHandle, graph: GraphIR, seed: int, settings: CaseSettings) -> tuple[Prepared, Finding | None]:
    """Value search and export in the worker; a death, hang or error there is a PyTorch finding."""
    request = {"kind": "prepare", "graph": graph.to_json(), "seed": seed, "search": settings.search}
    reply = worker.call(request, settings.prepare_timeout_s())
    msg = reply.msg or {}
    prepared = Prepared(
        graph,
        seed,
        decode_arrays(msg.get("values") or {}),
        decode_arrays(msg["oracle"]) if msg.get("oracle") is not None else None,
        msg.get("onnx"),
        msg.get("search"),
        msg.get("ms") or {},
        _hits(msg),
    )
    return prepared, _torch_failure(reply, "reference")


def export_stored(
    worker: WorkerHandle,
    graph: GraphIR,
    seed: int,
    values: dict[str, np.ndarray],
    oracle: dict[str, np.ndarray] | None,
    settings: CaseSettings,
) -> tuple[Prepared, Finding | None]:
    """Export a stored test's graph with its stored values (no search; a replay): the export
    is measured as in `prepare`, and a death or error there is the same PyTorch finding."""
    request = {"kind": "export", "graph": graph.to_json(), "values": encode_arrays(values)}
    reply = worker.call(request, settings.timeout_s)
    msg = reply.msg or {}
    prepared = Prepared(graph, seed, values, oracle, msg.get("onnx"), None, msg.get("ms") or {}, _hits(msg))
    return prepared, _torch_failure(reply, "export")


@dataclass
class Proposed:
    """A worker's answer to a proposal (see `campaign.proposal`): the generated test and its
    prepare results, or why there is none (`failed`: the generator gave up; `error`: our own
    code raised, or the worker died while generating)."""

    index: int | None = None  # which generator call gave the graph (or raised); FRESH: the fresh one
    gen: Generated | None = None
    prepared: Prepared | None = None
    finding: Finding | None = None
    failed: bool = False
    error: InternalError | None = None


def propose(
    worker: WorkerHandle,
    request: dict[str, Any],
    settings: CaseSettings,
    gen_s: float = 0.0,
    meanwhile: Callable[[], None] | None = None,
    made: Reply | None = None,
) -> Proposed:
    """Generation (given `gen_s` seconds beyond the request's timeout: its own budget), value
    search and export of a proposed test in the worker; a death or error in the search or the
    export is a PyTorch finding, as in `prepare`. `meanwhile` runs here while the worker works.
    `made`: the reply of the "generate" request another worker (`campaign.ahead`) answered for
    this one: the worker then searches and exports that graph."""
    from nnsmith_cov.campaign.proposal import record_from_json
    from nnsmith_cov.ops import is_op

    if made is not None:
        failed = _gen_failure(made, made.msg)
        if failed is not None:
            return failed
        request = request | {"made": made.msg}
    reply = worker.call(request, settings.timeout_s + gen_s, meanwhile, settings.prepare_timeout_s())
    failed = _gen_failure(reply, reply.generated or reply.msg)
    if failed is not None:
        return failed
    made_msg, msg = reply.generated, reply.msg or {}
    assert made_msg is not None
    graph = GraphIR.from_json(made_msg["graph"], known_op=is_op)
    gen = Generated(graph, record_from_json(made_msg["record"]))
    seed = request["seed"]
    oracle = decode_arrays(msg["oracle"]) if msg.get("oracle") is not None else None
    ms = dict(msg.get("ms") or {})
    # the round trip, less the generation where this worker made the graph
    ms["prepare"] = reply.elapsed_ms if made is not None else max(reply.elapsed_ms - gen.record.gen_ms, 0.0)
    prepared = Prepared(graph, seed, {}, oracle, None, msg.get("search"), ms, _hits(msg))
    if reply.msg is not None:
        prepared.test = request["test"]
        values, onnx = msg.get("values") or {}, msg.get("onnx")
        prepared.fetch = lambda: (decode_arrays(values), onnx)
    return Proposed(made_msg["index"], gen, prepared, _torch_failure(reply, "reference"))


def _gen_failure(reply: Reply, msg: dict[str, Any] | None) -> Proposed | None:
    """What a generation that gave no graph stands for (`msg`: the reply's final message, or its
    graph's announcement); None when the graph was made."""
    msg = msg or {}
    if msg.get("kind") == "gen_failed":
        return Proposed(failed=True)
    if msg.get("kind") == "gen_error":
        text = msg["traceback"]
        message = (str(msg["message"]).strip().splitlines() or [""])[0][:300]
        error = InternalError("generate", msg["type"], message, text, project_frames(text))
        return Proposed(msg["index"], error=error)
    if msg.get("kind") not in ("generated", "made"):  # the worker died or hung before its graph was made
        how = "hung" if reply.hung else f"died ({reply.died})"
        error = InternalError.from_worker("generate", f"WorkerDied: the worker {how} while generating\n{reply.log}")
        return Proposed(error=error)
    return None


def _hits(msg: dict[str, Any]) -> Hits | None:
    return Hits.from_wire(msg["hits"]) if msg.get("hits") is not None else None


def _torch_failure(reply: Reply, stage: str) -> Finding | None:
    """The PyTorch finding a prepare/export reply stands for: a death or hang (at `stage`
    unless the worker said where), or the error it reports; None when it went through."""
    if reply.msg is None:
        return _death("torch", reply.stage or stage, "-", reply)
    if reply.msg.get("error") is not None:
        return _classed(_error("torch", "-", reply.msg["error"]), reply.msg["error"])
    return None


def _run(
    worker: WorkerHandle, what: dict[str, Any], backend: str, opt: str, timeout_s: float, roundtrip: bool, native: bool
) -> Reply:
    """The worker's one "run" request; `what` names the model (its bytes and inputs, or a test it holds)."""
    request = {"kind": "run", "backend": backend, "opt": opt, **what, "roundtrip": roundtrip}
    return worker.call(request | ({"native": True} if native else {}), timeout_s)


def run_onnx(
    worker: WorkerHandle,
    onnx: bytes,
    inputs: dict[str, np.ndarray],
    backend: str,
    opt: str,
    timeout_s: float,
    roundtrip: bool = False,
    native: bool = False,
) -> Reply:
    """Import, compile and run ONNX bytes on one backend in the worker (`roundtrip`: compile
    the imported IR printed and parsed back, where the backend has a text form; `native`: on
    the worker's own thread, unmeasured)."""
    what = {"onnx": onnx, "inputs": encode_arrays(inputs)}
    return _run(worker, what, backend, opt, timeout_s, roundtrip, native)


def run_backend(
    worker: WorkerHandle, prepared: Prepared, backend: str, opt: str, timeout_s: float, native: bool = False
) -> Reply:
    """One backend run of a prepared test; `native`: on the worker's own thread, unmeasured."""
    graph = prepared.graph
    if prepared.held:  # the worker has the model and the inputs: name the test
        return _run(worker, {"test": prepared.test}, backend, opt, timeout_s, graph.roundtrip, native)
    assert prepared.onnx is not None
    return run_onnx(worker, prepared.onnx, prepared.inputs(), backend, opt, timeout_s, graph.roundtrip, native)


def confirmed_hang(
    worker: WorkerHandle, prepared: Prepared, backend: str, settings: CaseSettings, result: CaseResult
) -> Finding | None:
    """A run that timed out under the collector, run again natively: instrumentation slows a
    compiler several times (TVM under the binary collector), so only a run that also times out
    natively is a hang. Otherwise the native run is judged as the test's run (its crash or
    mismatch is a finding), and the backend is counted as slow under coverage."""
    native = run_backend(worker, prepared, backend, "opt", settings.timeout_s, native=True)
    if not native.hung:
        result.slow.append(backend)
        for stage, took in ((native.msg or {}).get("ms") or {}).items():
            result.ms[f"{backend}.{stage}"] = took
    return judge(prepared, backend, "opt", native, settings)


def failure(backend: str, opt: str, reply: Reply) -> Finding | None:
    """The crash or hang a backend run ended in; None when it returned outputs."""
    if reply.msg is None:
        return _death(backend, reply.stage or "import", opt, reply)
    if reply.msg["kind"] == "error":
        return _classed(_error(backend, opt, reply.msg["error"], reply.log), reply.msg["error"])
    return None


def _classed(finding: Finding, error: dict[str, str]) -> Finding:
    """`finding` with its class when the error is not a bug (a refusal, the exporter's refusal)."""
    verdict = error_class(finding.backend, error["stage"], error["type"], error["message"])
    if verdict is not None and finding.symptom == "crash":
        finding.category, finding.rule = verdict.category, verdict.rule
    return finding


def judge(prepared: Prepared, backend: str, opt: str, reply: Reply, settings: CaseSettings) -> Finding | None:
    """The oracle on one backend run: None when it agrees with PyTorch."""
    crashed = failure(backend, opt, reply)
    if crashed is not None:
        return crashed
    assert prepared.oracle is not None
    actual = decode_arrays(reply.msg["outputs"])
    half = {"float16": (settings.half_rtol, settings.half_atol)}
    mismatches = compare_outputs(prepared.oracle, actual, settings.rtol, settings.atol, half)
    if not mismatches:
        return None
    first = mismatches[0]
    ops = producer_ops(prepared.graph, int(first.name[1:])) if first.name[1:].isdigit() else []
    finding = Finding(
        symptom="inconsistency",
        backend=backend,
        stage="execute",
        opt=opt,
        signature=mismatch_signature(backend, opt, first.reason, ops),
        detail=f"{first.name}: {first.reason}: {first.detail}",
        log=_mismatch_log(mismatches),
        actual=actual,
    )
    # A float64 re-run of the graph decides whether rounding or a discontinuity explains it.
    tolerance = lambda dt: tolerance_for(dt, settings.rtol, settings.atol, half)
    prepared.load()  # the re-run needs the values
    args = (prepared.graph, prepared.values, prepared.oracle, actual, mismatches, tolerance, prepared.seed)
    verdict = judge_precision(*args)
    if verdict is not None:
        finding.category, finding.rule = verdict.category, verdict.rule
    return finding


# Stages no optimization level reaches, and where a finding there is localized (no O0 run).
BEFORE_OPTIMIZATION = {"import": "conversion", "roundtrip": "roundtrip"}
Known = Callable[[str], bool]  # is a finding signature already on record (bundled, localized)?


def run_test(
    worker: WorkerHandle, graph: GraphIR, seed: int, settings: CaseSettings, known: Known | None = None
) -> CaseResult:
    """Search, export, then each backend at OPT (and at O0 when OPT fails)."""
    return run_prepared(worker, settings, lambda: prepare(worker, graph, seed, settings), known)


def run_prepared(
    worker: WorkerHandle,
    settings: CaseSettings,
    prep: Callable[[], tuple[Prepared, Finding | None]],
    known: Known | None = None,
    limits: RunLimits | None = None,
) -> CaseResult:
    """`prep` (`prepare`, or `export_stored` for a replay), then `run_backends` unless it
    ended in a finding or without values."""
    ms: dict[str, float] = {}
    t0 = time.perf_counter()
    prepared, finding = prep()
    ms["prepare"] = (time.perf_counter() - t0) * 1e3
    ms |= prepared.ms
    result = CaseResult("pass", prepared, [], ms, prepared.hits)
    if finding is not None:
        result.status, result.findings = "finding", [finding]
        return result
    if prepared.oracle is None:
        result.status = "no-values"
        return result
    return run_backends(worker, result, settings, known, limits)


def run_backends(
    worker: WorkerHandle,
    result: CaseResult,
    settings: CaseSettings,
    known: Known | None = None,
    limits: RunLimits | None = None,
) -> CaseResult:
    """Each backend at OPT on a prepared test (and at O0 when OPT fails), judged by its oracle.

    O0 runs natively for a backend slow under coverage (`confirmed_hang`), and not at all
    after a hang (it would only hang again), after a failure at import or in
    the IR's text round trip (no optimization level reaches the importer, the printer or the
    parser: the fault is theirs), nor for a
    signature `known` already (its first occurrence was localized; a campaign's crashes
    repeat by the hundred and each O0 build costs as much as the test).

    With `limits`, a run under a collector gets the backend's calibrated limit, not the whole
    `timeout_s` (`campaign.run_limit`); past it, it is re-run natively as any timeout under
    a collector is.
    """
    prepared, ms = result.prepared, result.ms
    assert prepared is not None and prepared.oracle is not None
    covered = bool(getattr(worker, "collector", ""))
    limits = limits if covered else None
    for backend in settings.backends:
        limit = settings.timeout_s if limits is None else limits.limit(backend, settings.timeout_s)
        reply = run_backend(worker, prepared, backend, "opt", limit)
        if limits is not None and reply.msg is not None:
            limits.record(backend, reply.elapsed_ms / 1e3)
        result.add_run(backend, reply)
        t1 = time.perf_counter()
        finding = judge(prepared, backend, "opt", reply, settings)
        if finding is not None and finding.symptom == "hang" and covered:
            finding = confirmed_hang(worker, prepared, backend, settings, result)
        ms[f"{backend}.compare"] = (time.perf_counter() - t1) * 1e3
        if finding is None:
            continue
        if finding.category == "unsupported":  # not a finding, and O0 would only refuse again
            result.unsupported.append(finding)
            continue
        if finding.stage in BEFORE_OPTIMIZATION:
            finding.localized = BEFORE_OPTIMIZATION[finding.stage]
        elif settings.localize and finding.symptom != "hang" and not (known and known(finding.signature)):
            # natively where the collector made OPT time out: measured, O0 would time out as well,
            # cost another worker, and read as "O0 fails too" (wrongly localized to conversion)
            again = run_backend(worker, prepared, backend, "O0", settings.timeout_s, native=backend in result.slow)
            result.add_hits(again.msg)
            o0 = judge(prepared, backend, "O0", again, settings)
            finding.localized = "optimization" if o0 is None else "conversion"
        result.findings.append(finding)
    # Every backend against PyTorch alike: the reference is the suspect (class "reference").
    differ = mismatching(settings.rtol, settings.atol, {"float16": (settings.half_rtol, settings.half_atol)})
    apply_consensus(result.findings, settings.backends, prepared.oracle, differ)
    if result.findings:
        result.status = "finding"
    elif result.unsupported:
        result.status = "unsupported"
    return result


def _death(backend: str, stage: str, opt: str, reply: Reply) -> Finding:
    how = "timeout" if reply.hung else (reply.died or "died")
    return Finding(
        symptom="hang" if reply.hung else "crash",
        backend=backend,
        stage=stage,
        opt=opt,
        signature=death_signature(backend, stage, opt, how),
        detail=f"worker {'hung' if reply.hung else 'died'} ({how}) at {stage}",
        log=reply.log,
    )


# What an allocation that failed says, in Python and in C++ (the worker's memory limit).
_OOM = ("MemoryError", "std::bad_alloc", "bad_alloc", "Unable to allocate", "Failed to allocate memory")


def _error(backend: str, opt: str, error: dict[str, str], log: str = "") -> Finding:
    first = (error["message"].strip().splitlines() or [""])[0]
    oom = error["type"] == "MemoryError" or any(s in first for s in _OOM)
    return Finding(
        symptom="oom" if oom else "crash",
        backend=backend,
        stage=error["stage"],
        opt=opt,
        signature=error_signature(backend, error["stage"], opt, error["type"], error["message"]),
        detail=f"{error['type']}: {first[:200]}",
        log=error["traceback"] + ("\n--- worker output ---\n" + log if log.strip() else ""),
    )


def _mismatch_log(mismatches: list[Mismatch]) -> str:
    return "".join(f"{m.name}: {m.reason}: {m.detail}\n" for m in mismatches)
