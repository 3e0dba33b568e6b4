"""Internal errors: exceptions of nnsmith-cov's own code while making or judging one test.

They are not findings of the systems under test. A campaign records each one with what
replays it (seed, proposal, parent draws, the op set) and goes on; `Breaker` stops a
campaign whose own code fails too often to be worth running.

RUN/internal.jsonl                one line per internal error, e.g.
    {"test": 17, "seed": 881, "symptom": "internal", "backend": "nnsmith-cov", "stage": "generate",
     "opt": "-", "localized": null, "new": true, "bundle": "internal/generate-3fa2c1d0e9ab",
     "signature": "internal/generate: RuntimeError at gen/feasibility/layout.py:all_padding_window"}
RUN/internal/<stage>-<id>/meta.json   the first of each signature: INTERNAL_SCHEMA, e.g.
    {"schema": 1, "symptom": "internal", "stage": "generate", "signature": "...", "type": "RuntimeError",
     "message": "value cannot be converted ...", "frames": ["nnsmith_cov/gen/generator.py:412 in _generate", ...],
     "test": 17, "seed": 881, "proposal": {<Proposal.to_json()>}, "parent": {"test": 4, "prefix": [...]},
     "generator": {<config.json's "generator">}, "sigs": {"Add": ["f32,f32"], ...}, "settings": {...},
     "versions": {...}}
RUN/internal/<stage>-<id>/error.log   the whole traceback (the worker's, for a worker-side error)
RUN/internal/<stage>-<id>/graph.json  the test's graph, when the error came after generation
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import shutil
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import Sig
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.oracle.signature import short_id

INTERNAL_SCHEMA = 1
SYMPTOM = "internal"
BACKEND = "nnsmith-cov"
# The stages of a test whose errors are ours: the driver's (propose, generate, test: the
# oracle and the test's bookkeeping in this process, observe: the scheduler and the ledger)
# and the worker's (worker: search, export, or a backend adapter).
STAGES = ("propose", "generate", "worker", "test", "observe")

_FRAME = re.compile(r'File "([^"]*nnsmith_cov[/\\][^"]*)", line (\d+), in (\S+)')


@dataclass
class InternalError:
    """One internal error: where (stage, innermost frames of ours) and what."""

    stage: str
    type: str
    message: str
    traceback: str
    frames: list[str] = field(default_factory=list)  # "nnsmith_cov/x.py:12 in f", innermost first

    @classmethod
    def from_exception(cls, stage: str, e: BaseException) -> InternalError:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return cls(stage, type(e).__name__, _first_line(str(e)), text, project_frames(text))

    @classmethod
    def from_worker(cls, stage: str, text: str) -> InternalError:
        """From a worker's fault report: "Type: message" then its traceback."""
        head = _first_line(text)
        kind, _, message = head.partition(": ")
        if not kind.isidentifier():
            kind, message = "WorkerFault", head
        return cls(stage, kind, message, text, project_frames(text))

    @property
    def signature(self) -> str:
        """Exception type and innermost frame of ours (file and function, not the line: an
        edit above it must not split one cause in two)."""
        where = self.frames[0].split(" in ") if self.frames else []
        at = f"{where[0].rsplit(':', 1)[0].removeprefix('nnsmith_cov/')}:{where[1]}" if len(where) == 2 else "?"
        return f"{SYMPTOM}/{self.stage}: {self.type} at {at}"

    def header(self) -> dict[str, Any]:
        """The fields a finding header has, so the corpus stores it as one (symptom "internal")."""
        return {
            "symptom": SYMPTOM,
            "backend": BACKEND,
            "stage": self.stage,
            "opt": "-",
            "localized": None,
            "signature": self.signature,
        }

    def bundle_name(self) -> str:
        return f"{self.stage}-{short_id(self.signature)}"


def project_frames(text: str, keep: int = 5) -> list[str]:
    """The innermost `keep` frames of a traceback that lie in nnsmith-cov, innermost first."""
    frames = []
    for path, line, func in _FRAME.findall(text):
        rel = path.replace("\\", "/")
        rel = "nnsmith_cov/" + rel.rsplit("nnsmith_cov/", 1)[1]
        frames.append(f"{rel}:{line} in {func}")
    return frames[::-1][:keep]


def is_internal(header: dict[str, Any]) -> bool:
    return header.get("symptom") == SYMPTOM


def write_internal_bundle(path: Path, error: InternalError, meta: dict[str, Any], graph_json: str | None) -> Path:
    """The first internal error of a signature, in a folder of its own (written aside, then renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    record = (
        {"schema": INTERNAL_SCHEMA}
        | error.header()
        | {
            "type": error.type,
            "message": error.message,
            "frames": error.frames,
        }
    )
    (tmp / "meta.json").write_text(json.dumps(record | meta, indent=1) + "\n")
    (tmp / "error.log").write_text(f"{error.signature}\n{error.message}\n\n{error.traceback}")
    if graph_json is not None:
        (tmp / "graph.json").write_text(graph_json + "\n")
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


class BreakerTripped(Exception):
    """The campaign's own code fails too often: stop (the corpus is committed and resumable)."""


class Breaker:
    """Stops a campaign whose own code fails too often: more than `max_share` of the last
    `window` tests, or each of its first `first` tests. Not thread-safe (the campaign lock)."""

    def __init__(self, window: int = 100, max_share: float = 0.2, first: int = 10) -> None:
        self.window, self.max_share, self.first = window, max_share, first
        self.recent: collections.deque[bool] = collections.deque(maxlen=window)
        self.seen = 0
        self.errors: collections.Counter[str] = collections.Counter()

    def note(self, signature: str | None) -> None:
        """One finished test: `signature` of its internal error, or None. Raises BreakerTripped."""
        self.seen += 1
        self.recent.append(signature is not None)
        if signature is not None:
            self.errors[signature] += 1
        bad = sum(self.recent)
        if bad > self.max_share * self.window or (self.seen == self.first and bad == self.first):
            common, n = self.errors.most_common(1)[0]
            raise BreakerTripped(
                f"stopped: {bad} of the last {len(self.recent)} tests ended in internal errors"
                f" (commonest, {n} times: {common}); the corpus is saved, resume with --resume once fixed"
            )


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


FLOORS = "op_opset_floors"  # beside a config's fields: each op's `min_opset_for`, by dtype name


def gen_config_json(cfg: GenConfig) -> dict[str, Any]:
    """Everything a GenConfig holds, as JSON: the op set with each op's signatures and opset
    floors (the campaign's, narrowed by the backends' support), so a generation replays exactly."""
    obj: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name == "ops":
            obj[FLOORS] = {op.name(): {d.value: n for d, n in op.min_opset_for.items()} for op in v}
            v = {op.name(): [_sig_text(s) for s in op.sigs] for op in v}
        elif f.name == "excluded":
            v = sorted([d.value, r] for d, r in v)
        elif f.name == "opset_weights" and v is not None:
            v = {str(k): w for k, w in v.items()}
        elif isinstance(v, Mapping):
            v = {k: list(w) if isinstance(w, list | tuple) else w for k, w in v.items()}
        elif isinstance(v, tuple):
            v = list(v)
        obj[f.name] = v
    return obj


def with_floors(ops: Sequence[Any], floors: Mapping[str, Mapping[str, int]]) -> list[Any]:
    """`ops` with the opset floors per dtype that `floors` names (the campaign's: raised where a
    backend refused an older opset)."""
    out = []
    for op in ops:
        want = {DType(d): int(v) for d, v in (floors.get(op.name()) or {}).items()}
        if want != dict(op.min_opset_for):
            op = type(op.__name__, (op,), {"min_opset_for": want, "__doc__": op.__doc__})
        out.append(op)
    return out


def gen_config_from_json(obj: Mapping[str, Any]) -> GenConfig:
    """The GenConfig `gen_config_json` wrote; ValueError names what does not fit (an op or
    signature this version lacks, a field it does not know)."""
    from nnsmith_cov.ops import ALL_OPS

    by_name = {op.name(): op for op in ALL_OPS}
    fields = {f.name for f in dataclasses.fields(GenConfig)}
    unknown = set(obj) - fields - {FLOORS}
    if unknown:
        raise ValueError(f"unknown generator settings {sorted(unknown)}")
    kw = dict(obj)
    floors = kw.pop(FLOORS, None)  # absent in records older than it: each op's own floors then
    ops = []
    for name, sigs in dict(obj.get("ops") or {}).items():
        if name not in by_name:
            raise ValueError(f"no operator {name!r} in this version")
        op = by_name[name]
        keep = [s for s in op.sigs if _sig_text(s) in set(sigs)]
        if len(keep) != len(sigs):
            raise ValueError(f"{name}: signatures {sorted(set(sigs) - {_sig_text(s) for s in op.sigs})} unknown")
        ops.append(op if keep == list(op.sigs) else type(op.__name__, (op,), {"sigs": keep, "__doc__": op.__doc__}))
    kw["ops"] = ops if floors is None else with_floors(ops, floors)
    if "excluded" in kw:
        kw["excluded"] = frozenset((DType(d), int(r)) for d, r in kw["excluded"])
    if kw.get("opset_weights") is not None:
        kw["opset_weights"] = {int(k): float(w) for k, w in kw["opset_weights"].items()}
    if "opsets" in kw:
        kw["opsets"] = tuple(kw["opsets"])
    return GenConfig(**kw)


def _sig_text(sig: Sig) -> str:
    return ",".join(d.value for d in sig[0]) + "->" + ",".join(d.value for d in sig[1])


class InternalReplayError(Exception):
    """An internal-error record that cannot be replayed here (one line)."""


def read_internal(path: Path) -> dict[str, Any]:
    """An internal error's meta.json, checked for what a replay needs."""
    from nnsmith_cov.bounded_read import read_json

    try:
        meta = read_json(path / "meta.json")
    except OSError as e:
        raise InternalReplayError(f"{path}: unreadable meta.json ({type(e).__name__})") from None
    except ValueError as e:  # bounded_read's DataError: one line already
        raise InternalReplayError(str(e)) from None
    if not isinstance(meta, dict) or meta.get("schema") != INTERNAL_SCHEMA or meta.get("symptom") != SYMPTOM:
        raise InternalReplayError(f"{path}: not an internal-error record of schema {INTERNAL_SCHEMA}")
    for key, kind in (("stage", str), ("signature", str), ("seed", int), ("gen_config", dict)):
        if not isinstance(meta.get(key), kind):
            raise InternalReplayError(f"{path}: meta.json lacks a valid {key!r}")
    return meta


def replay_internal(path: Path, meta: dict[str, Any], log_path: Path) -> str | None:
    """Re-run what an internal error's record (`read_internal(path)`) describes, as the campaign ran it: its
    generation (grown from the recorded parent draws, if any) and, where the error came
    after it, the test in a worker. Returns the internal error's signature now, or None
    when the same steps run clean."""
    from nnsmith_cov.baselines import generate_with
    from nnsmith_cov.campaign.testcase import CaseSettings, run_test
    from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle
    from nnsmith_cov.gen.generator import GenerationError, generate

    stage = meta["stage"]
    if stage in ("propose", "observe"):
        raise InternalReplayError(
            f"{path}: a {stage}-stage error depends on the scheduler's state at that moment; "
            "its traceback is in error.log"
        )
    try:
        cfg = gen_config_from_json(meta["gen_config"])
        settings = CaseSettings(**meta["settings"]) if isinstance(meta.get("settings"), dict) else None
    except (TypeError, ValueError) as e:
        raise InternalReplayError(f"{path}: its settings do not fit this version ({e})") from None
    parent = meta.get("parent")
    try:
        if isinstance(parent, dict):
            prefix = [(str(label), value) for label, value in parent["prefix"]]
            gen = generate(cfg, meta["seed"], prefix=prefix, lenient=bool(parent.get("lenient")))
        else:
            gen = generate_with(str(meta.get("generator") or "nnsmith"), cfg, meta["seed"])
    except GenerationError:
        return None
    except Exception as e:  # noqa: BLE001 - the error being replayed
        return InternalError.from_exception("generate", e).signature
    if stage == "generate" or settings is None:
        return None
    worker = WorkerHandle(settings.backends, log_path)
    try:
        worker.start()
        run_test(worker, gen.graph, meta["seed"], settings)
    except WorkerFault as e:
        return InternalError.from_worker("worker", str(e)).signature
    except Exception as e:  # noqa: BLE001 - the oracle's error, in this process
        return InternalError.from_exception("test", e).signature
    finally:
        worker.close()
    return None
