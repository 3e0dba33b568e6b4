"""Which operators and dtype signatures each backend accepts: probed once with single-operator
models through the fuzzer's own path (search, export, worker), cached on disk as JSON.

Cache file `<cache>/support-<backend>-<version>.json`, schema SUPPORT_SCHEMA, e.g.
    {"schema": 3, "backend": "tvm", "version": "0.27.0.post1", "torch": "2.13.0+cpu",
     "ops": {"Add": {"f32,f32->f32": {"class": "ok"}},
             "Celu": {"f32->f32": {"class": "refused", "detail": "import: OpNotImplemented: ..."}},
             "Acos": {"f16->f16": {"class": "crash", "detail": "compile: InternalError: ...",
                                   "instance": 0}}}}
Each entry has a class:
- "ok": one of the probe instances ran (wrong outputs are findings, not missing support);
- "untested": no single-op model could be made (kept, nothing learned);
- "refused": every one of up to PROBE_INSTANCES instances failed with the frontend's or
  runtime's own "not supported" for the op and type: the only class `restrict_ops` drops;
- "crash": anything else (internal error, failed check, type error in an importer, signal,
  hang): a bug of the backend, so the signature stays in the generator's choices and
  `probe_crashes` hands the failing instance (`instance`) to the campaign to file.
Older schemas stored bare status strings and no class: their failures are probed again.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import MAX_OPSET, OpSpec
from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.campaign.testcase import CaseSettings, prepare, run_backend
from nnsmith_cov.campaign.worker_handle import Reply, WorkerHandle, WorkerStartError
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.oracle.finding import TORCH_STAGES
from nnsmith_cov.oracle.refusal import classify

SUPPORT_SCHEMA = 3
# Instances of an (op, sig) a backend must all refuse to be marked as not supporting it: one
# unlucky instance (all dims 1: TVM's trilinear Resize divides by zero) must not bar the op
# from every campaign; such bugs are for the fuzzer to find.
PROBE_INSTANCES = 3
Sig = tuple[tuple[DType, ...], tuple[DType, ...]]
# Probes need NaN/Inf-free values to be exported at all; single ops find them fast.
_PROBE_SEARCH = {"method": "gradient", "max_iters": 64, "budget_ms": 2000}
_SAVE_EVERY = 25  # probes between cache writes, so an interrupted probe keeps its progress
_DETAIL_CHARS = 200  # of a failure's message kept in the cache
CLASSES = ("ok", "untested", "refused", "crash")
# Stages of a failure that PyTorch (the search or the exporter) had, not the backend.


class SupportError(Exception):
    """No usable operator is left, or the cache folder is unusable."""


@dataclass(frozen=True)
class Outcome:
    """What probing one (op, sig) on one backend found."""

    cls: str  # one of CLASSES
    detail: str = ""  # the failure's status text (of the instance that decided the class)
    instance: int = 0  # which probe instance that was (probe_graphs order)

    def __post_init__(self) -> None:
        if self.cls not in CLASSES:
            raise ValueError(f"unknown probe class {self.cls!r}")

    @property
    def torch_crash(self) -> bool:
        """A crash of PyTorch (the search or the exporter), not of the backend probed."""
        return self.cls == "crash" and self.detail.split(":", 1)[0] in TORCH_STAGES

    @property
    def usable(self) -> bool:
        """Whether the generator keeps the (op, sig): everything but a refusal."""
        return self.cls != "refused"

    def text(self) -> str:
        return self.cls if not self.detail else f"{self.cls}: {self.detail}"

    def to_json(self) -> dict:
        out: dict = {"class": self.cls}
        if self.detail:
            out["detail"] = self.detail
        if self.cls == "crash":
            out["instance"] = self.instance
        return out

    @staticmethod
    def from_json(obj: object) -> Outcome:
        """Raises ValueError/TypeError/KeyError on anything but a schema-3 entry."""
        if not isinstance(obj, dict) or not isinstance(obj.get("detail", ""), str):
            raise ValueError("not a probe entry")
        instance = obj.get("instance", 0)
        if not isinstance(instance, int) or not 0 <= instance < PROBE_INSTANCES:
            raise ValueError("bad probe instance")
        return Outcome(obj["class"], obj.get("detail", ""), instance)


OK = Outcome("ok")


def sig_key(sig: Sig) -> str:
    return ",".join(d.value for d in sig[0]) + "->" + ",".join(d.value for d in sig[1])


@dataclass
class SupportTable:
    backend: str
    version: str
    torch: str
    entries: dict[str, dict[str, Outcome]] = field(default_factory=dict)  # op -> sig key -> outcome
    # Learned while a campaign runs (and written back to the cache, so the next campaign starts
    # knowing it): op -> sig key -> the highest opset at which the backend said it has no
    # implementation. Taken as refused at every opset up to it (backends add types to an op in
    # its later versions), so the generator keeps it above that only.
    refused_at: dict[str, dict[str, int]] = field(default_factory=dict)

    def outcome(self, op: str, key: str) -> Outcome | None:
        return self.entries.get(op, {}).get(key)

    def refuse(self, op: str, key: str, opset: int) -> bool:
        """Record a refusal of (op, sig) at `opset`; True when that is news to the table."""
        known = self.refused_at.setdefault(op, {})
        if known.get(key, 0) >= opset:
            return False
        known[key] = opset
        return True

    def refused_below(self, op: str, key: str) -> int:
        """The lowest opset (op, sig) may still be generated at: 0 when none is ruled out."""
        bar = self.refused_at.get(op, {}).get(key)
        return 0 if bar is None else bar + 1

    def status(self, op: str, key: str) -> str | None:
        """The outcome as one line ("ok", "refused: compile: ..."), or None if not probed."""
        found = self.outcome(op, key)
        return None if found is None else found.text()

    def supported(self, op: str, key: str) -> bool:
        found = self.outcome(op, key)
        return found is None or found.usable

    def to_json(self) -> dict:
        return {
            "schema": SUPPORT_SCHEMA,
            "backend": self.backend,
            "version": self.version,
            "torch": self.torch,
            # PyTorch's own crashes (the value search or the exporter failing) are left out:
            # they are the harness's or PyTorch's, so they are probed again at the next start
            # rather than frozen under the backend's version.
            "ops": {
                op: {k: o.to_json() for k, o in sigs.items() if not o.torch_crash} for op, sigs in self.entries.items()
            },
            "refused_at": {op: dict(sorted(keys.items())) for op, keys in sorted(self.refused_at.items()) if keys},
        }


def default_cache_dir() -> Path:
    return Path(os.environ.get("NNSMITH_COV_CACHE") or Path.home() / ".cache" / "nnsmith-cov")


def cache_path(cache_dir: Path, backend: str, version: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{backend}-{version}")
    return cache_dir / f"support-{safe}.json"


def _from_strings(ops: dict) -> dict[str, dict[str, Outcome]]:
    """Entries of a schema 1 or 2 cache (bare status strings, no class): what worked and what
    was untested are kept; failures were never classed, so they are left out (probed again)."""
    entries: dict[str, dict[str, Outcome]] = {}
    for op, sigs in ops.items():
        if not isinstance(sigs, dict) or not all(isinstance(v, str) for v in sigs.values()):
            raise ValueError("not a status table")
        kept = {}
        for key, status in sigs.items():
            if status == "ok":
                kept[key] = OK
            elif status.startswith("untested"):
                kept[key] = Outcome("untested", status.partition(": ")[2])
        entries[op] = kept
    return entries


def _load(path: Path, backend: str, version: str, torch: str, warn: bool = True) -> SupportTable | None:
    """The cached table, or None when absent, unreadable or made for other versions (said on
    stderr with `warn`: a campaign then probes again)."""
    if not path.exists():
        return None
    entries = None
    try:
        obj = json.loads(path.read_text())
        if (
            obj.get("schema") in (1, 2, SUPPORT_SCHEMA)
            and obj.get("backend") == backend
            and obj.get("version") == version
            and obj.get("torch") == torch
            and isinstance(obj.get("ops"), dict)
        ):
            if obj["schema"] == SUPPORT_SCHEMA:
                entries = {op: {k: Outcome.from_json(v) for k, v in sigs.items()} for op, sigs in obj["ops"].items()}
            else:
                entries = _from_strings(obj["ops"])
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        entries = None
    if entries is None:
        if warn:
            print(f"nnsmith-cov: ignoring unusable op-support cache {path}; probing again", file=sys.stderr)
        return None
    return SupportTable(backend, version, torch, entries, _refused_at(obj.get("refused_at")))


def _refused_at(obj: object) -> dict[str, dict[str, int]]:
    """The learned refusals of a cache (absent before they were written back); entries that
    are not op -> sig key -> opset are dropped, not trusted."""
    if not isinstance(obj, dict):
        return {}
    out: dict[str, dict[str, int]] = {}
    for op, keys in obj.items():
        if isinstance(op, str) and isinstance(keys, dict):
            good = {k: n for k, n in keys.items() if isinstance(k, str) and type(n) is int and n > 0}
            if good:
                out[op] = good
    return out


def remember_refusals(
    cache_dir: Path, versions: Mapping[str, str], backend: str, refused: Iterable[tuple[str, str, int]]
) -> None:
    """Add refusals (op, sig key, opset) a campaign learned to `backend`'s cache file (made,
    without probe entries, when absent: the next probe fills those in). SupportError when the
    cache cannot be written."""
    table = SupportTable(backend, versions[backend], versions["torch"])
    for op, key, opset in refused:
        table.refuse(op, key, opset)
    _save(table, cache_path(cache_dir, backend, versions[backend]))  # merged with what the file holds


def _save(table: SupportTable, path: Path) -> None:
    """Write `table` to its cache file, merged with what is there. Campaigns started together on
    a fresh machine (a benchmark's pairs, a cluster's workers) probe and save the same file: one
    at a time (an flock beside it), each keeps the entries and refusals the others wrote, and
    each writes through its own temporary file (a shared one was renamed away under the other)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(f".{path.name}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # an unusable file there is replaced, as before the merge (its campaign said so at load)
            there = _load(path, table.backend, table.version, table.torch, warn=False)
            merged = table if there is None else _merged(there, table)
            write_atomic(path, json.dumps(merged.to_json(), indent=1, sort_keys=True) + "\n")
    except OSError as e:
        raise SupportError(f"cannot write the op-support cache {path}: {e.strerror}") from None


def _merged(there: SupportTable, ours: SupportTable) -> SupportTable:
    """`ours` with what `there` (the file, as another campaign left it) knows and it does not:
    entries it lacks or holds as PyTorch's crashes (those are never written), and each refusal
    at the higher of the two opsets."""
    entries = {op: dict(sigs) for op, sigs in there.entries.items()}
    for op, sigs in ours.entries.items():
        for key, found in sigs.items():
            if not found.torch_crash or key not in entries.get(op, {}):
                entries.setdefault(op, {})[key] = found
    refused = {op: dict(keys) for op, keys in there.refused_at.items()}
    for op, keys in ours.refused_at.items():
        for key, opset in keys.items():
            refused.setdefault(op, {})[key] = max(opset, refused.get(op, {}).get(key, 0))
    return SupportTable(ours.backend, ours.version, ours.torch, entries, refused)


def probe_graphs(
    op: type[OpSpec], sig: Sig, count: int = PROBE_INSTANCES, seeds: int = 4, opset: int | None = None
) -> list[GraphIR]:
    """Up to `count` distinct one-operator graphs of `op` with exactly `sig` and no 0-d tensors
    (probing with scalars misleads: the exporter turns a 0-d float64 into a float32 constant),
    exported at `opset` (None: the generator's default).
    The first has the smallest shapes the solver finds; the others are binned (varied sizes)."""
    only = type(op.__name__, (op,), {"sigs": [sig]})
    at = {} if opset is None else {"opsets": (opset,)}
    no_scalars = frozenset((d, 0) for d in DType) | GenConfig().excluded
    graphs: dict[str, GraphIR] = {}
    for binning in (False, True):
        # Backward insertion makes fresh inputs of every dtype the sig needs; multi-output ops
        # can only be inserted forward.
        for forward_prob in (0.0, 1.0) if op.n_outputs() == 1 else (1.0,):
            cfg = GenConfig(
                nodes=1,
                ops=[only],
                forward_prob=forward_prob,
                binning=binning,
                max_elems=4096,
                excluded=no_scalars,
                **at,
            )
            for seed in range(seeds):
                try:
                    graph = generate(cfg, seed).graph
                except GenerationError:
                    continue
                if any(inst.op == op.name() for inst in graph.insts):
                    graphs.setdefault(graph.content_hash(), graph)
                    if len(graphs) == count:
                        return list(graphs.values())
                    if not binning:
                        break  # unbinned, other seeds mostly give the same smallest graph
    return list(graphs.values())


def probe_graph(op: type[OpSpec], sig: Sig) -> GraphIR | None:
    """The first probe instance of (op, sig), or None."""
    graphs = probe_graphs(op, sig, count=1)
    return graphs[0] if graphs else None


def _decide(failures: list[tuple[int, str, str]]) -> Outcome:
    """The outcome of a backend that took no instance, from (instance, class, status) of each
    failure: one crash makes it a crash (that instance is the one to file), refusals on all
    instances that ran a refusal; instances that could not be made say nothing."""
    for want in ("crash", "refused", "untested"):
        for instance, cls, status in failures:
            if cls == want:
                return Outcome(cls, status, instance if cls == "crash" else 0)
    return Outcome("untested", "no single-operator graph")


def _run_failure(reply: Reply) -> tuple[str, str]:
    """(class, one line) of a failed backend run: "<stage>: <type>: <message>", or how it
    died. The class is read from the whole message (ORT names the dtype it does not
    support far past the line's first 160 characters)."""
    if reply.msg is None:
        status = f"{'hung' if reply.hung else 'died: ' + str(reply.died)} at {reply.stage}"
        return classify(status), status
    e = reply.msg["error"]
    head = f"{e['stage']}: {e['type']}: "
    first = (e["message"].strip().splitlines() or [""])[0]
    return classify(head + e["message"]), head + first[:_DETAIL_CHARS]


def probe(
    worker: WorkerHandle, op: type[OpSpec], sig: Sig, backends: list[str], timeout_s: float, opset: int | None = None
) -> dict[str, Outcome]:
    """Outcome per backend of one (op, sig) (exported at `opset`; None: the default): ok once
    a backend takes one instance, else its failures classed (see `_decide`)."""
    graphs = probe_graphs(op, sig, opset=opset)
    settings = CaseSettings(backends, timeout_s=timeout_s, search=_PROBE_SEARCH)
    failures: dict[str, list[tuple[int, str, str]]] = {b: [] for b in backends}
    done: set[str] = set()
    for i, graph in enumerate(graphs):
        prepared, finding = prepare(worker, graph, 0, settings)
        if finding is not None:  # PyTorch failed: no backend can be given this instance
            cls = classify(f"{finding.stage}: {finding.detail}")
            for b in backends:
                failures[b].append((i, cls, f"{finding.stage}: {finding.detail[:_DETAIL_CHARS]}"))
            continue
        if prepared.onnx is None:
            for b in backends:
                failures[b].append((i, "untested", "no NaN/Inf-free values"))
            continue
        for b in backends:
            if b in done:
                continue
            reply = run_backend(worker, prepared, b, "opt", timeout_s)
            if reply.msg is not None and reply.msg["kind"] != "error":
                done.add(b)  # wrong outputs are findings, not missing support
            else:
                failures[b].append((i, *_run_failure(reply)))
        if done == set(backends):
            break
    return {b: OK if b in done else _decide(failures[b]) for b in backends}


@dataclass(frozen=True)
class ProbeCrash:
    """A probe instance that crashed a backend (or PyTorch: backend "torch"): a finding the
    campaign files by running `graph()` as a test of its own."""

    backend: str
    op: str
    sig_key: str
    status: str  # "<stage>: <type>: <message>" or how it died
    spec: type[OpSpec] = field(repr=False, compare=False)
    sig: Sig = field(repr=False, compare=False)
    instance: int = 0

    def graph(self) -> GraphIR | None:
        """The single-operator graph that crashed (probe instances are deterministic)."""
        graphs = probe_graphs(self.spec, self.sig, count=self.instance + 1)
        return graphs[self.instance] if len(graphs) > self.instance else None


def probe_crashes(
    tables: Mapping[str, SupportTable] | Iterable[SupportTable], ops: Sequence[type[OpSpec]]
) -> list[ProbeCrash]:
    """The crashes the probe recorded for `ops` (the unrestricted specs), one per (backend,
    op, sig); a PyTorch failure common to all backends is listed once, as backend "torch"."""
    tables = list(tables.values()) if isinstance(tables, Mapping) else list(tables)
    out: dict[tuple[str, str, str], ProbeCrash] = {}
    for op in ops:
        for sig in op.sigs:
            key = sig_key(sig)
            for t in tables:
                found = t.outcome(op.name(), key)
                if found is None or found.cls != "crash":
                    continue
                who = "torch" if found.torch_crash else t.backend
                out.setdefault(
                    (who, op.name(), key), ProbeCrash(who, op.name(), key, found.detail, op, sig, found.instance)
                )
    return list(out.values())


def load_or_probe(
    worker: WorkerHandle,
    backends: list[str],
    ops: Sequence[type[OpSpec]],
    cache_dir: Path,
    timeout_s: float = 60.0,
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, SupportTable]:
    """Support tables of `backends` for `ops`, probing only what the caches lack."""
    versions = worker.start()["versions"]
    tables, paths = {}, {}
    for b in backends:
        paths[b] = cache_path(cache_dir, b, versions[b])
        cached = None if refresh else _load(paths[b], b, versions[b], versions["torch"])
        tables[b] = cached or SupportTable(b, versions[b], versions["torch"])
    todo = [
        (op, sig)
        for op in ops
        for sig in op.sigs
        if any(t.outcome(op.name(), sig_key(sig)) is None for t in tables.values())
    ]
    for i, (op, sig) in enumerate(todo):
        if progress:
            progress(f"probing operator support: {op.name()} {sig_key(sig)} ({i + 1}/{len(todo)})")
        need = [b for b in backends if tables[b].outcome(op.name(), sig_key(sig)) is None]
        for b, found in probe(worker, op, sig, need, timeout_s).items():
            tables[b].entries.setdefault(op.name(), {})[sig_key(sig)] = found
        if (i + 1) % _SAVE_EVERY == 0 or i + 1 == len(todo):
            for b in backends:
                _save(tables[b], paths[b])
    return tables


def restrict_ops(ops: Sequence[type[OpSpec]], tables: Iterable[SupportTable]) -> list[type[OpSpec]]:
    """Each op narrowed to the signatures no table refused (same name, so GraphIR and
    materialization see the original op), and above the opsets refused at run time; ops with
    none left are dropped. Crashes stay: the campaign files them (`probe_crashes`) and meets
    them again in larger graphs."""
    tables = list(tables)
    out = []
    for op in ops:
        sigs = [s for s in op.sigs if all(t.supported(op.name(), sig_key(s)) for t in tables)]
        floors = {sig_key(s): max((t.refused_below(op.name(), sig_key(s)) for t in tables), default=0) for s in sigs}
        sigs = [s for s in sigs if floors[sig_key(s)] <= MAX_OPSET]
        # The generator gates a signature's opset by its first input's dtype: a dtype takes the
        # lowest floor among its signatures, and a signature needing a higher one is dropped.
        by_dtype: dict[DType, int] = {}
        for s in sigs:
            by_dtype[s[0][0]] = min(by_dtype.get(s[0][0], MAX_OPSET + 1), floors[sig_key(s)])
        sigs = [s for s in sigs if floors[sig_key(s)] <= by_dtype[s[0][0]]]
        raised = {d: f for d, f in by_dtype.items() if f > op.opset_floor(d)}
        if sigs == list(op.sigs) and not raised:
            out.append(op)
        elif sigs:
            extra: dict = {"sigs": sigs, "__doc__": op.__doc__}
            if raised:
                extra["min_opset_for"] = dict(op.min_opset_for) | raised
            out.append(type(op.__name__, (op,), extra))
    if not out:
        names = ", ".join(t.backend for t in tables)
        raise SupportError(f"no operator of the {len(ops)} asked for is supported by {names}")
    return out


def ops_for_backends(
    ops: Sequence[type[OpSpec]],
    backends: Sequence[str],
    cache_dir: Path | None = None,
    timeout_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> list[type[OpSpec]]:
    """`ops` narrowed to what every one of `backends` accepts, as a campaign narrows them (the
    probe's cache, probing what it lacks), for a model made outside a campaign (`generate`).
    Starts and closes its own worker; raises SupportError, with one line, on any failure."""
    cache_dir = cache_dir or default_cache_dir()
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SupportError(f"cannot use the op-support cache {cache_dir}: {e.strerror}") from None
    worker = WorkerHandle(list(backends), cache_dir / "probe-worker.log")
    try:
        hello = worker.start()
        missing = {b: why for b, why in (hello.get("unavailable") or {}).items() if b in backends}
        if missing:
            b, why = next(iter(missing.items()))
            raise SupportError(f"backend {b} is unavailable here: {why}")
        tables = load_or_probe(worker, list(backends), ops, cache_dir, timeout_s, progress=progress)
    except WorkerStartError as e:
        raise SupportError(f"the worker for {', '.join(backends)} did not start: {e}") from None
    finally:
        worker.close()
    return restrict_ops(ops, tables.values())


def summary_rows(tables: Mapping[str, SupportTable]) -> list[tuple[str, dict[str, int]]]:
    """(backend, number of (op, sig) pairs per class) for each table."""
    rows = []
    for b, t in tables.items():
        counts = dict.fromkeys(CLASSES, 0)
        for sigs in t.entries.values():
            for found in sigs.values():
                counts[found.cls] += 1
        rows.append((b, counts))
    return rows
