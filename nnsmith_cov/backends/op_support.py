"""Which operators and dtype signatures each backend accepts: probed once with single-operator
models through the fuzzer's own path (search, export, worker), cached on disk as JSON.

Cache file `<cache>/support-<backend>-<version>.json`, schema SUPPORT_SCHEMA, e.g.
    {"schema": 1, "backend": "tvm", "version": "0.27.0.post1", "torch": "2.13.0+cpu",
     "ops": {"Add": {"f32,f32->f32": "ok"},
             "Acos": {"f16->f16": "compile: InternalError: unknown intrinsic ..."}}}
An entry is "ok", "untested: <why>" (no single-op model could be made: kept, nothing learned)
or the reason the backend refused the model.
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

SUPPORT_SCHEMA = 1
Sig = tuple[tuple[DType, ...], tuple[DType, ...]]
# Probes need NaN/Inf-free values to be exported at all; single ops find them fast.
_PROBE_SEARCH = {"method": "gradient", "max_iters": 64, "budget_ms": 2000}
_SAVE_EVERY = 25  # probes between cache writes, so an interrupted probe keeps its progress


class SupportError(Exception):
    """No usable operator is left, or the cache folder is unusable."""


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
        return status is None or status == "ok" or status.startswith("untested")

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
            obj.get("schema") == SUPPORT_SCHEMA
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
    return SupportTable(backend, version, torch, obj["ops"])


def _save(table: SupportTable, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(table.to_json(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise SupportError(f"cannot write the op-support cache {path}: {e.strerror}") from None


def probe_graph(op: type[OpSpec], sig: Sig, seeds: int = 4) -> GraphIR | None:
    """A one-operator graph of `op` with exactly `sig` and no 0-d tensors (probing with
    scalars misleads: the exporter turns a 0-d float64 into a float32 constant)."""
    only = type(op.__name__, (op,), {"sigs": [sig]})
    no_scalars = frozenset((d, 0) for d in DType) | GenConfig().excluded
    # Backward insertion makes fresh inputs of every dtype the sig needs; multi-output ops
    # can only be inserted forward.
    for forward_prob in (0.0, 1.0) if op.n_outputs() == 1 else (1.0,):
        cfg = GenConfig(
            nodes=1, ops=[only], forward_prob=forward_prob, binning=False, max_elems=4096, excluded=no_scalars
        )
        for seed in range(seeds):
            try:
                graph = generate(cfg, seed).graph
            except GenerationError:
                continue
            if any(inst.op == op.name() for inst in graph.insts):
                return graph
    return None


def probe(worker: WorkerHandle, op: type[OpSpec], sig: Sig, backends: list[str], timeout_s: float) -> dict[str, str]:
    """Status per backend of one (op, sig)."""
    graph = probe_graph(op, sig)
    if graph is None:
        return dict.fromkeys(backends, "untested: no single-operator graph")
    settings = CaseSettings(backends, timeout_s=timeout_s, search=_PROBE_SEARCH)
    prepared, finding = prepare(worker, graph, 0, settings)
    if finding is not None:  # PyTorch or its exporter refused: no backend can be given this op
        return dict.fromkeys(backends, f"{finding.stage}: {finding.detail[:160]}")
    if prepared.onnx is None:
        return dict.fromkeys(backends, "untested: no NaN/Inf-free values")
    out = {}
    for b in backends:
        reply = run_backend(worker, prepared, b, "opt", timeout_s)
        if reply.msg is None:
            out[b] = f"{'hung' if reply.hung else 'died: ' + str(reply.died)} at {reply.stage}"
        elif reply.msg["kind"] == "error":
            e = reply.msg["error"]
            first = (e["message"].strip().splitlines() or [""])[0]
            out[b] = f"{e['stage']}: {e['type']}: {first[:160]}"
        else:
            out[b] = "ok"  # wrong outputs are findings, not missing support
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
        ok = sum(s == "ok" or s.startswith("untested") for s in statuses)
        rows.append((b, ok, len(statuses) - ok))
    return rows
