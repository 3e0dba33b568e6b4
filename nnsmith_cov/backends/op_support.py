"""Which operators and dtype signatures each backend accepts: probed once with single-operator
models through the fuzzer's own path (search, export, worker), cached on disk as JSON.

Cache file `<cache>/support-<backend>-<version>.json`, schema SUPPORT_SCHEMA, e.g.
    {"schema": 2, "backend": "tvm", "version": "0.27.0.post1", "torch": "2.13.0+cpu",
     "ops": {"Add": {"f32,f32->f32": "ok"},
             "Acos": {"f16->f16": "compile: InternalError: unknown intrinsic ..."}}}
An entry is "ok", "untested: <why>" (no single-op model could be made: kept, nothing learned)
or the reason the backend refused the models: a refusal needs every one of up to
PROBE_INSTANCES instances refused (schema 1 probed one; its refusals are probed again).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.campaign.testcase import CaseSettings, prepare, run_backend
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR

SUPPORT_SCHEMA = 2
# Instances of an (op, sig) a backend must all refuse to be marked as not supporting it: one
# unlucky instance (all dims 1: TVM's trilinear Resize divides by zero) must not bar the op
# from every campaign; such bugs are for the fuzzer to find.
PROBE_INSTANCES = 3
Sig = tuple[tuple[DType, ...], tuple[DType, ...]]
# Probes need NaN/Inf-free values to be exported at all; single ops find them fast.
_PROBE_SEARCH = {"method": "gradient", "max_iters": 64, "budget_ms": 2000}
_SAVE_EVERY = 25  # probes between cache writes, so an interrupted probe keeps its progress


class SupportError(Exception):
    """No usable operator is left, or the cache folder is unusable."""


def usable(status: str) -> bool:
    """A probe status that lets the generator use the (op, sig): accepted, or nothing learned."""
    return status == "ok" or status.startswith("untested")


def sig_key(sig: Sig) -> str:
    return ",".join(d.value for d in sig[0]) + "->" + ",".join(d.value for d in sig[1])


@dataclass
class SupportTable:
    backend: str
    version: str
    torch: str
    entries: dict[str, dict[str, str]] = field(default_factory=dict)  # op -> sig key -> status

    def status(self, op: str, key: str) -> str | None:
        return self.entries.get(op, {}).get(key)

    def supported(self, op: str, key: str) -> bool:
        status = self.status(op, key)
        return status is None or usable(status)

    def to_json(self) -> dict:
        return {
            "schema": SUPPORT_SCHEMA,
            "backend": self.backend,
            "version": self.version,
            "torch": self.torch,
            "ops": self.entries,
        }


def default_cache_dir() -> Path:
    return Path(os.environ.get("NNSMITH_COV_CACHE") or Path.home() / ".cache" / "nnsmith-cov")


def cache_path(cache_dir: Path, backend: str, version: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{backend}-{version}")
    return cache_dir / f"support-{safe}.json"


def _load(path: Path, backend: str, version: str, torch: str) -> SupportTable | None:
    """The cached table, or None when absent, unreadable or made for other versions."""
    if not path.exists():
        return None
    try:
        obj = json.loads(path.read_text())
        ok = (
            obj.get("schema") in (1, SUPPORT_SCHEMA)
            and obj.get("backend") == backend
            and obj.get("version") == version
            and obj.get("torch") == torch
            and isinstance(obj.get("ops"), dict)
            and all(isinstance(v, dict) and all(isinstance(s, str) for s in v.values()) for v in obj["ops"].values())
        )
    except (OSError, ValueError, AttributeError):
        ok = False
    if not ok:
        print(f"nnsmith-cov: ignoring unusable op-support cache {path}; probing again", file=sys.stderr)
        return None
    entries = obj["ops"]
    if obj["schema"] == 1:  # refused after one instance: probe those again
        entries = {op: {k: v for k, v in sigs.items() if usable(v)} for op, sigs in entries.items()}
    return SupportTable(backend, version, torch, entries)


def _save(table: SupportTable, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(table.to_json(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise SupportError(f"cannot write the op-support cache {path}: {e.strerror}") from None


def probe_graphs(op: type[OpSpec], sig: Sig, count: int = PROBE_INSTANCES, seeds: int = 4) -> list[GraphIR]:
    """Up to `count` distinct one-operator graphs of `op` with exactly `sig` and no 0-d tensors
    (probing with scalars misleads: the exporter turns a 0-d float64 into a float32 constant).
    The first has the smallest shapes the solver finds; the others are binned (varied sizes)."""
    only = type(op.__name__, (op,), {"sigs": [sig]})
    no_scalars = frozenset((d, 0) for d in DType) | GenConfig().excluded
    graphs: dict[str, GraphIR] = {}
    for binning in (False, True):
        # Backward insertion makes fresh inputs of every dtype the sig needs; multi-output ops
        # can only be inserted forward.
        for forward_prob in (0.0, 1.0) if op.n_outputs() == 1 else (1.0,):
            cfg = GenConfig(
                nodes=1, ops=[only], forward_prob=forward_prob, binning=binning, max_elems=4096, excluded=no_scalars
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


def probe(worker: WorkerHandle, op: type[OpSpec], sig: Sig, backends: list[str], timeout_s: float) -> dict[str, str]:
    """Status per backend of one (op, sig): "ok" once a backend takes one instance, else the
    reason it refused the first."""
    graphs = probe_graphs(op, sig)
    if not graphs:
        return dict.fromkeys(backends, "untested: no single-operator graph")
    settings = CaseSettings(backends, timeout_s=timeout_s, search=_PROBE_SEARCH)
    out: dict[str, str] = {}
    for graph in graphs:
        prepared, finding = prepare(worker, graph, 0, settings)
        if finding is not None:  # PyTorch or its exporter refused: no backend can be given this op
            for b in backends:
                out.setdefault(b, f"{finding.stage}: {finding.detail[:160]}")
            continue
        if prepared.onnx is None:
            for b in backends:
                out.setdefault(b, "untested: no NaN/Inf-free values")
            continue
        for b in backends:
            if out.get(b) == "ok":
                continue
            reply = run_backend(worker, prepared, b, "opt", timeout_s)
            if reply.msg is None:
                status = f"{'hung' if reply.hung else 'died: ' + str(reply.died)} at {reply.stage}"
            elif reply.msg["kind"] == "error":
                e = reply.msg["error"]
                first = (e["message"].strip().splitlines() or [""])[0]
                status = f"{e['stage']}: {e['type']}: {first[:160]}"
            else:
                status = "ok"  # wrong outputs are findings, not missing support
            if status == "ok":
                out[b] = status
            else:
                out.setdefault(b, status)
        if all(out.get(b) == "ok" for b in backends):
            break
    return out


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
        if any(t.status(op.name(), sig_key(sig)) is None for t in tables.values())
    ]
    for i, (op, sig) in enumerate(todo):
        if progress:
            progress(f"probing operator support: {op.name()} {sig_key(sig)} ({i + 1}/{len(todo)})")
        need = [b for b in backends if tables[b].status(op.name(), sig_key(sig)) is None]
        for b, status in probe(worker, op, sig, need, timeout_s).items():
            tables[b].entries.setdefault(op.name(), {})[sig_key(sig)] = status
        if (i + 1) % _SAVE_EVERY == 0 or i + 1 == len(todo):
            for b in need:
                _save(tables[b], paths[b])
    return tables


def restrict_ops(ops: Sequence[type[OpSpec]], tables: Iterable[SupportTable]) -> list[type[OpSpec]]:
    """Each op narrowed to the signatures every table supports (same name, so GraphIR and
    materialization see the original op); ops with none left are dropped."""
    tables = list(tables)
    out = []
    for op in ops:
        sigs = [s for s in op.sigs if all(t.supported(op.name(), sig_key(s)) for t in tables)]
        if sigs == list(op.sigs):
            out.append(op)
        elif sigs:
            out.append(type(op.__name__, (op,), {"sigs": sigs, "__doc__": op.__doc__}))
    if not out:
        names = ", ".join(t.backend for t in tables)
        raise SupportError(f"no operator of the {len(ops)} asked for is supported by {names}")
    return out


def summary_rows(tables: dict[str, SupportTable]) -> list[tuple[str, int, int]]:
    """(backend, supported, refused) counts of (op, sig) pairs."""
    rows = []
    for b, t in tables.items():
        statuses = [s for sigs in t.entries.values() for s in sigs.values()]
        ok = sum(usable(s) for s in statuses)
        rows.append((b, ok, len(statuses) - ok))
    return rows
