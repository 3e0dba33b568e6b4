"""Root causes of a run's findings: its findings.jsonl lines grouped, with what reduction learned.

A run files one bundle per signature, yet one defect can show under several signatures (an
inconsistency keyed by whatever op sat next to the first bad output). Once a bundle has been
reduced (BUNDLE/reduced/reduce.json, written by `nnsmith-cov reduce`), its reduced op pattern
names the defect better than its signature: signatures whose reduced patterns are equal, on the
same backend, symptom and stage, are one root cause. A signature not reduced yet is its own.
Findings of one signature that the oracle put in different classes (a mismatch excused as
precision in one test, not in another) are kept apart: a root cause has one class, so that
counting compiler bugs never counts what the oracle excused.

Everything here reads files a campaign may still be appending to, and that may be damaged:
a malformed line is a `TriageError` naming the file and line; a damaged reduce.json only costs
its reduction (a note says so).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nnsmith_cov.bounded_read import DataError, json_type, loads_json, read_json
from nnsmith_cov.oracle.finding import CLASSES
from nnsmith_cov.oracle.refusal import error_class
from nnsmith_cov.oracle.signature import canonical, defect, fault_op, is_generic, split

FINDINGS_LOG = "findings.jsonl"
REDUCED = "reduced"  # BUNDLE/reduced/: the reducer's output for BUNDLE
REDUCE_JSON = "reduce.json"
MAX_LINE_BYTES = 1 << 20  # a finding line is a header and a path: far below this
OLD_CLASS = "bug"  # runs from before findings were classified


class TriageError(Exception):
    """A run folder that cannot be triaged; the message is one line."""


@dataclass
class Occurrence:
    """One line of RUN/findings.jsonl: one finding of one test."""

    test: int
    signature: str
    symptom: str
    backend: str
    stage: str
    category: str
    rule: str
    bundle: Path | None  # the signature's bundle folder (RUN/...), None when the line names none
    elapsed_s: float | None  # campaign seconds, when the line carries them (replays do)


@dataclass
class Reduction:
    """What BUNDLE/reduced/reduce.json says of one reduced bundle."""

    path: Path  # BUNDLE/reduced
    pattern: str  # the reduced graph's op pattern, canonical text
    reduced_ops: int
    original_ops: int | None = None
    seconds: float | None = None
    out_of_time: bool = False  # the budget ran out first: smaller may exist


@dataclass
class RootCause:
    key: str
    category: str  # the class of its findings
    rule: str  # the rule that classed its first finding
    findings: int
    tests: int
    first_test: int
    first_s: float | None
    backends: list[str]
    signatures: list[str]  # in the order first seen
    bundle: Path | None  # the first signature's bundle: what `--reduce` reduces
    reduction: Reduction | None  # the smallest reduction among its bundles

    def to_json(self) -> dict[str, Any]:
        red = self.reduction
        return {
            "key": self.key,
            "class": self.category,
            "rule": self.rule,
            "findings": self.findings,
            "tests": self.tests,
            "first_seen": {"test": self.first_test, "elapsed_s": self.first_s},
            "backends": self.backends,
            "signature": self.signatures[0],
            "signatures": self.signatures,
            "bundle": _shown(self.bundle),
            "reduced": None
            if red is None
            else {
                "path": _shown(red.path),
                "ops": red.reduced_ops,
                "original_ops": red.original_ops,
                "pattern": red.pattern,
                "seconds": red.seconds,
                "out_of_time": red.out_of_time,
            },
        }


@dataclass
class Triage:
    run: Path
    root_causes: list[RootCause]
    findings: int
    tests: int
    internal_errors: int = 0  # lines of RUN/internal.jsonl: nnsmith-cov's own, never root causes
    notes: list[str] = field(default_factory=list)

    def by_class(self) -> dict[str, tuple[int, int]]:
        """class -> (findings, root causes), classes in CLASSES order then any others."""
        found: dict[str, list[int]] = {}
        for rc in self.root_causes:
            counts = found.setdefault(rc.category, [0, 0])
            counts[0] += rc.findings
            counts[1] += 1
        return {c: (found[c][0], found[c][1]) for c in sorted(found, key=_class_rank)}

    def to_json(self) -> dict[str, Any]:
        return {
            "run": str(self.run),
            "findings": self.findings,
            "tests": self.tests,
            "internal_errors": self.internal_errors,
            "classes": {c: {"findings": f, "root_causes": r} for c, (f, r) in self.by_class().items()},
            "root_causes": [rc.to_json() for rc in self.root_causes],
        }


def triage_run(run: Path, times_from_corpus: bool = True) -> Triage:
    """The root causes of the run in folder `run`, ordered as the table lists them: by class
    (compiler bugs first), then most findings, then first seen."""
    occurrences = read_findings(run)
    notes: list[str] = []
    reductions: dict[Path, Reduction] = {}
    for bundle in dict.fromkeys(o.bundle for o in occurrences if o.bundle is not None):
        try:
            red = read_reduction(bundle)
        except DataError as e:
            notes.append(f"note: ignored a damaged reduction: {e}")
            continue
        if red is not None:
            reductions[bundle] = red
    faults = {}
    for o in occurrences:
        if o.bundle is not None and o.bundle not in faults and o.symptom == "crash" and is_generic(o.signature):
            faults[o.bundle] = bundle_fault_op(o.bundle)
    causes = group(occurrences, reductions, {b: op for b, op in faults.items() if op is not None})
    if times_from_corpus:
        _times_from_corpus(run, causes)
    return Triage(
        run,
        causes,
        findings=len(occurrences),
        tests=len({o.test for o in occurrences}),
        internal_errors=_count_lines(run / "internal.jsonl"),
        notes=notes,
    )


def read_findings(run: Path) -> list[Occurrence]:
    """Every line of RUN/findings.jsonl, in the order the campaign committed them."""
    if not run.exists():
        raise TriageError(f"{run}: no such folder")
    if not run.is_dir():
        raise TriageError(f"{run}: not a run folder (not a folder)")
    log = run / FINDINGS_LOG
    if not log.exists():
        if (run / "config.json").is_file():
            return []  # a run that has found nothing (yet)
        raise TriageError(f"{run}: not a run folder (no {FINDINGS_LOG} or config.json)")
    try:
        data = log.read_bytes()
    except OSError as e:
        raise TriageError(f"{log}: cannot read ({e.strerror or e})") from None
    lines = data.split(b"\n")
    if lines and lines[-1].strip():
        # A line without its newline is one a running campaign is still appending: not yet there.
        lines.pop()
    out = []
    for number, raw in enumerate(lines, 1):
        if raw.strip():
            out.append(reclassed(_occurrence(raw, f"{log}:{number}", run)))
    return out


def _occurrence(raw: bytes, where: str, run: Path) -> Occurrence:
    try:
        obj = loads_json(raw, where, max_bytes=MAX_LINE_BYTES, finite=True)
    except DataError as e:
        raise TriageError(str(e)) from None
    if not isinstance(obj, dict):
        raise TriageError(f"{where}: a JSON {json_type(obj)}, expected an object")
    test = obj.get("test")
    if type(test) is not int or test < 0:
        raise TriageError(f"{where}: 'test' must be a non-negative integer")
    text = {}
    for key in ("signature", "symptom", "backend", "stage"):
        value = obj.get(key)
        if not isinstance(value, str) or not value:
            raise TriageError(f"{where}: {key!r} must be a non-empty string, not {json_type(value)}")
        text[key] = value
    category = obj.get("category", OLD_CLASS)
    if category is None:
        category = OLD_CLASS
    if not isinstance(category, str) or not category:
        raise TriageError(f"{where}: 'category' must be a non-empty string, not {json_type(category)}")
    rule = obj.get("rule") or ""
    if not isinstance(rule, str):
        raise TriageError(f"{where}: 'rule' must be a string, not {json_type(rule)}")
    elapsed = obj.get("elapsed_s")
    elapsed = float(elapsed) if isinstance(elapsed, int | float) and not isinstance(elapsed, bool) else None
    return Occurrence(
        test=test,
        category=category,
        rule=rule,
        bundle=_bundle_path(obj.get("bundle"), run),
        elapsed_s=elapsed,
        **text,
    )


def _bundle_path(value: Any, run: Path) -> Path | None:
    """The bundle a line names, inside the run folder; a path that leaves it is data we ignore."""
    if not isinstance(value, str) or not value:
        return None
    rel = Path(value)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    return run / rel


def read_reduction(bundle: Path) -> Reduction | None:
    """The reduction of `bundle` (None: not reduced); DataError when reduce.json is damaged."""
    path = bundle / REDUCED / REDUCE_JSON
    try:
        obj = read_json(path, max_bytes=MAX_LINE_BYTES, finite=True)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: a JSON {json_type(obj)}, expected an object")
    reduced = obj.get("reduced_ops")
    if type(reduced) is not int or reduced < 0:
        raise DataError(f"{path}: 'reduced_ops' must be a non-negative integer")
    pattern = _pattern_text(obj.get("pattern"))
    if pattern is None:
        raise DataError(f"{path}: 'pattern' must be a string or a list of op names")
    original = obj.get("original_ops")
    seconds = obj.get("seconds")
    return Reduction(
        path=path.parent,
        pattern=pattern,
        reduced_ops=reduced,
        original_ops=original if type(original) is int else None,
        seconds=float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else None,
        out_of_time=obj.get("out_of_time") is True,
    )


def _pattern_text(pattern: Any) -> str | None:
    """One canonical text per pattern, whether the reducer wrote it as text or as op names."""
    if isinstance(pattern, str):
        return pattern
    if isinstance(pattern, list) and all(isinstance(p, str) for p in pattern):
        return "<-".join(pattern)
    return None


def root_key(o: Occurrence, reductions: dict[Path, Reduction], faults: dict[Path, str] | None = None) -> str:
    """What makes two findings of one class one root cause.

    A crash whose message names a check of the backend's own ("Binary operators must have the
    same datatype", "unknown intrinsic tirx.asin") is keyed by that message with its instance
    text folded (`signature.defect`), on one backend, whatever the op, graph or stage: the
    backend prints that text from one place, so every graph that reaches it shows one defect,
    and the ops differ only in which member of a family (Elu, Selu, ThresholdedRelu building a
    float32 constant for an fp16 input) took the shared path there. The fix, and the issue one
    would file, is one.

    A crash whose text is Python's own ("'NoneType' object is not iterable") or a death names no
    place: two of them are one defect only at one stage in one op at fault, the op the backend
    says it was converting (TVM's "Error converting operator X") or else the reduced graph's op
    pattern (the ops it could not lose); without either, the signature alone.

    Inconsistencies and hangs: the reduced op pattern on one backend, symptom and stage once the
    bundle was reduced, else the signature, normalized again."""
    red = reductions.get(o.bundle) if o.bundle is not None else None
    if o.symptom == "crash" and o.signature.partition(": ")[1]:
        if not is_generic(o.signature):
            return f"{o.category} crash: {defect(o.signature)}"
        fault = (faults or {}).get(o.bundle) if o.bundle is not None else None
        if fault is not None:
            return f"{o.category} crash: {defect(o.signature)} at {o.stage} in {fault}"
        if red is not None:
            return f"{o.category} crash: {defect(o.signature)} at {o.stage} in {red.pattern}"
    if red is None:
        return f"{o.category} signature: {canonical(o.signature)}"
    return f"{o.category} pattern: {o.symptom}/{o.backend}/{o.stage}: {red.pattern}"


_LOG_TAIL = 1 << 16  # bytes of error.log read: the worker's output sits at its end


def bundle_fault_op(bundle: Path) -> str | None:
    """The ONNX op the backend says it failed on, from the bundle's (reduced, else own) error.log."""
    for log in (bundle / REDUCED / "error.log", bundle / "error.log"):
        try:
            with open(log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - _LOG_TAIL, 0))
                found = fault_op(f.read().decode("utf-8", "replace"))
        except OSError:
            continue
        if found:
            return found
    return None


def reclassed(o: Occurrence) -> Occurrence:
    """`o` with the class today's rules give a PyTorch-side error a run filed as a bug (runs from
    before PyTorch's own failures were kept out of the compiler bugs)."""
    if o.backend != "torch" or o.category != OLD_CLASS or o.symptom != "crash":
        return o
    kind, _, message = split(o.signature)[3].partition(": ")
    verdict = error_class("torch", o.stage, kind, message)
    if verdict is None:
        return o
    return replace(o, category=verdict.category, rule=f"{verdict.rule} (re-read)")


def group(
    occurrences: list[Occurrence], reductions: dict[Path, Reduction], faults: dict[Path, str] | None = None
) -> list[RootCause]:
    """Root causes of `occurrences` (in commit order), sorted for the table; `faults` maps a
    bundle to its op at fault (`fault_op`)."""
    groups: dict[str, list[Occurrence]] = {}
    for o in occurrences:
        groups.setdefault(root_key(o, reductions, faults), []).append(o)
    causes = [_cause(key, members, reductions) for key, members in groups.items()]
    causes.sort(key=lambda rc: (_class_rank(rc.category), -rc.findings, rc.first_test))
    return causes


def _cause(key: str, members: list[Occurrence], reductions: dict[Path, Reduction]) -> RootCause:
    first = members[0]
    bundles = [o.bundle for o in members if o.bundle is not None]
    reduced = [reductions[b] for b in dict.fromkeys(bundles) if b in reductions]
    return RootCause(
        key=key,
        category=first.category,
        rule=first.rule,
        findings=len(members),
        tests=len({o.test for o in members}),
        first_test=first.test,
        first_s=first.elapsed_s,
        backends=sorted({o.backend for o in members}),
        signatures=list(dict.fromkeys(o.signature for o in members)),
        bundle=bundles[0] if bundles else None,
        reduction=min(reduced, key=lambda r: r.reduced_ops) if reduced else None,
    )


def _class_rank(category: str) -> tuple[int, str]:
    return (CLASSES.index(category) if category in CLASSES else len(CLASSES), category)


def _times_from_corpus(run: Path, causes: list[RootCause]) -> None:
    """First-seen times the lines lack, from the corpus records of those tests (read-only; a
    run without a readable corpus keeps them unknown)."""
    missing = [rc for rc in causes if rc.first_s is None]
    if not missing or not (run / "lmdb" / "data.mdb").is_file():
        return
    import lmdb

    from nnsmith_cov.corpus.records import CorpusError
    from nnsmith_cov.corpus.store import CorpusStore

    with contextlib.suppress(CorpusError, OSError, ValueError, lmdb.Error):
        with CorpusStore.open(run / "lmdb", readonly=True) as store:
            for rc in missing:
                record = store.record(rc.first_test)
                if record is not None:
                    rc.first_s = float(record.elapsed_s)


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def _shown(path: Path | None) -> str | None:
    return None if path is None else str(path)
