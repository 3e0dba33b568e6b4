"""What a campaign corpus holds, record by record: the key layout, the encodings and their validation."""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack
import numpy as np

from nnsmith_cov.coverage.covmap import Hits, Novelty, VirginMap

T = TypeVar("T")

CORPUS_SCHEMA = 2  # 2: blobs tagged and compressed (corpus/blobpack.py); 1: raw blobs
READABLE_SCHEMAS = (1, 2)  # a schema 1 corpus still opens, replays and resumes (in its own format)
# One LMDB environment per campaign: a folder holding data.mdb, lock.mdb (LMDB's
# reader table) and writer.lock (held by the one process that writes). Integers in
# keys are big-endian, so LMDB's byte order is numeric order. Values are msgpack
# (maps with string keys), JSON text or raw bytes; nothing is ever pickled.
#
#   db        key                    value
#   meta      b"schema"              msgpack 1
#             b"created"             msgpack 1767225600.25                      (unix seconds)
#             b"config"              JSON text {"seed": 7, "time_s": 14400.0, "generator": {...}, ...}
#             b"versions"            msgpack {"nnsmith-cov": "0.1.0", "tvm": "0.27.0", "torch": "2.13.0+cpu"}
#             b"collector"           msgpack "python"                           ("none": no coverage)
#             b"universe_ident"      msgpack "7450aa4f5bf22795"                 ("" without a collector)
#             b"universe_size"       msgpack 105304                             (0 without a collector)
#             b"universe"            Universe.to_bytes()                        (absent without a collector)
#   tests     u64 test id            msgpack record; test 42, grown from corpus entry 17:
#             {"seed": 8172635412, "status": "pass", "graph": {<GraphIR.to_json()>},
#              "gen": {<GenRecord.to_json()>}, "draws": [["op", 3], ["direction", 0], ...],
#              "timings": {"generate": 41.2, "search": 12.5, "compile:tvm": 830.1},
#              "elapsed_s": 611.4, "novelty": [12, 3], "parent": 17,
#              "corpus": true, "blobs": ["inputs.npz", "model.onnx", "oracle.npz"], "findings": 0}
#             "corpus": true: the test set new map bits and has a bitmap; false: it is kept for its
#             findings only. "novelty" is [new branches, new buckets], or null without a collector.
#   blobs     u64 id + name          schema 2: a tag byte and the bytes, compressed, the model's weights
#                                    stored once (see corpus/blobpack.py); schema 1: raw bytes. The
#                                    names are the record's "blobs" ([A-Za-z0-9._-], <= 64)
#   bitmaps   u64 id                 zlib(msgpack {"index": <u32le * n>, "count": <u32le * n>}): Hits.to_wire()
#   state     b"virgin"              zlib of one byte per branch of the universe (VirginMap.to_bytes's format)
#             b"scheduler"           msgpack Scheduler.state()                  (absent until first saved)
#             b"run_stats"           msgpack RunStats.to_json() after the last committed test: what
#                                    stats.json says, exact on resume (absent in older corpora)
#             b"counters"            msgpack {"next_test_id": 43, "tests_run": 41, "elapsed_s": 611.4,
#                                             "corpus": 9, "finding_only": 2, "findings": 3, "timeline": 5}
#   timeline  u64 row number         msgpack {"elapsed_s": 600.0, "tests": 39, "branches": 4466,
#                                             "pass_branches": 210, "corpus": 9, "findings": 3,
#                                             "disk_kb": 81234, "rss_kb": 612000, "worker_rss_kb": 1403000}
#                                    (the last three absent in older corpora: read as 0)
#   findings  u64 id + u32 k         msgpack, Finding.header() and what the campaign adds, e.g.
#             {"symptom": "crash", "backend": "tvm", "stage": "compile", "opt": "opt",
#              "localized": null, "signature": "tvm/compile: InternalError: Check failed: ...", "new": true}
#
# What is kept: a test that set new map bits enters the corpus with its bitmap; a test
# with findings is kept whether or not it did (without a bitmap when it did not); any
# other test only advances the counters. A finished test changes all of the above in one
# write transaction, so what a reader (or a campaign resumed after kill -9) sees is always
# a state between two whole tests, where (CorpusView.check) every kept test is whole, the
# counters count what is stored, and the virgin map is exactly the union of the bitmaps.

DB_NAMES = ("meta", "tests", "blobs", "bitmaps", "state", "timeline", "findings")
BLOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_ID = (1 << 63) - 1
_MAX_NESTING = 64  # JSON-like values deeper than this are refused (hostile input, not GraphIR)


class CorpusError(Exception):
    """A corpus that cannot be used as asked: missing, damaged, foreign or misused; one line."""


def id_key(test_id: int) -> bytes:
    return test_id.to_bytes(8, "big")


def finding_key(test_id: int, k: int) -> bytes:
    return test_id.to_bytes(8, "big") + k.to_bytes(4, "big")


def key_id(key: bytes) -> int:
    """The test id at the front of a key of `tests`, `blobs`, `bitmaps` or `findings`."""
    if len(key) < 8:
        raise ValueError(f"key of {len(key)} bytes, expected at least 8")
    return int.from_bytes(key[:8], "big")


# -- records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TestRecord:
    """What is known of a kept test, apart from its bytes (blobs) and its coverage (bitmap)."""

    __test__ = False  # not a pytest test class, despite the name

    seed: int
    status: str  # the campaign's word for the outcome: "pass", "finding", "no-values", ...
    graph: dict[str, Any]  # GraphIR.to_json()
    gen: dict[str, Any]  # GenRecord.to_json(), plus "origin": "probe" or a chosen cap's "grow_max"
    draws: list[tuple[str, int | float]]  # every recorded choice, in order
    timings: dict[str, float]  # milliseconds per stage
    elapsed_s: float  # campaign time when the test finished
    novelty: Novelty | None = None  # what it added to the map; None without a collector
    parent: int | None = None  # the corpus entry it was grown from


@dataclass(frozen=True)
class TestEntry:
    """Everything a kept test leaves in the corpus.

    With `hits` it is a corpus entry (it set new map bits); without, it is kept only
    because it has `findings`.
    """

    __test__ = False

    record: TestRecord
    hits: Hits | None = None
    blobs: Mapping[str, bytes] = field(default_factory=dict)  # "model.onnx", "inputs.npz", "oracle.npz"
    findings: Sequence[Mapping[str, Any]] = ()  # Finding.header() and extras, one per finding


@dataclass(frozen=True)
class Counters:
    """Where the campaign stands; the store keeps all but `elapsed_s`, which the campaign passes in."""

    next_test_id: int = 0  # above every committed test id: a resumed campaign starts here
    tests_run: int = 0  # finished tests committed, kept or not
    elapsed_s: float = 0.0
    corpus: int = 0  # tests kept with a bitmap
    finding_only: int = 0  # tests kept for their findings alone
    findings: int = 0  # finding rows
    timeline: int = 0  # timeline rows


@dataclass(frozen=True)
class TimelineRow:
    """One point of the coverage-over-time curve."""

    elapsed_s: float
    tests: int
    branches: int
    pass_branches: int
    corpus: int
    findings: int
    # resources at that point (0: not measured; rows of older corpora lack them)
    disk_kb: int = 0  # the run folder, as allocated on disk
    rss_kb: int = 0  # the campaign's own process, resident
    worker_rss_kb: int = 0  # its workers together, resident


@dataclass(frozen=True)
class StoredTest:
    """A test record as stored: the record plus what the store keeps next to it."""

    record: TestRecord
    in_corpus: bool
    blob_names: tuple[str, ...]
    n_findings: int


# -- msgpack ---------------------------------------------------------------------------


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """msgpack with string keys only; raises ValueError on anything malformed."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except (msgpack.UnpackException, ValueError, TypeError, RecursionError) as e:
        raise ValueError(f"not msgpack ({type(e).__name__}: {e})") from None


def inflate(data: bytes, limit: int) -> bytes:
    """zlib-decompress at most `limit` bytes: a small hostile value cannot claim gigabytes."""
    d = zlib.decompressobj()
    try:
        raw = d.decompress(data, limit)
    except zlib.error as e:
        raise ValueError(f"not zlib data ({e})") from None
    if d.unconsumed_tail or not d.eof:
        raise ValueError(f"zlib data larger than {limit} bytes, or cut short")
    return raw


# -- validation helpers -----------------------------------------------------------------


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _count(x: Any, what: str) -> int:
    _need(is_int(x) and 0 <= x <= MAX_ID, f"{what} must be a non-negative integer")
    return x


def _json_like(x: Any, depth: int = 0) -> bool:
    if depth > _MAX_NESTING:
        return False
    if x is None or isinstance(x, str | bool | int):
        return True
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, list):
        return all(_json_like(v, depth + 1) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _json_like(v, depth + 1) for k, v in x.items())
    return False


def _json_object(x: Any, what: str) -> dict[str, Any]:
    _need(isinstance(x, dict) and _json_like(x), f"{what} must be a JSON object")
    return x


# -- encoders and decoders (decoders validate every field; they raise ValueError) --------

_RECORD_FIELDS = {
    "seed",
    "status",
    "graph",
    "gen",
    "draws",
    "timings",
    "elapsed_s",
    "novelty",
    "parent",
    "corpus",
    "blobs",
    "findings",
}


def encode_record(entry: TestEntry) -> bytes:
    r = entry.record
    return pack(
        {
            "seed": r.seed,
            "status": r.status,
            "graph": r.graph,
            "gen": r.gen,
            "draws": [list(d) for d in r.draws],
            "timings": dict(r.timings),
            "elapsed_s": float(r.elapsed_s),
            "novelty": None if r.novelty is None else [r.novelty.new_branches, r.novelty.new_buckets],
            "parent": r.parent,
            "corpus": entry.hits is not None,
            "blobs": sorted(entry.blobs),
            "findings": len(entry.findings),
        }
    )


def decode_record(data: bytes) -> StoredTest:
    obj = unpack(data)
    _need(isinstance(obj, dict) and set(obj) == _RECORD_FIELDS, "record fields differ from the schema")
    seed = _count(obj["seed"], "seed")
    _need(isinstance(obj["status"], str), "status must be a string")
    graph = _json_object(obj["graph"], "graph")
    gen = _json_object(obj["gen"], "gen")
    draws = obj["draws"]
    _need(isinstance(draws, list), "draws must be a list")
    for d in draws:
        _need(
            isinstance(d, list) and len(d) == 2 and isinstance(d[0], str) and is_number(d[1]),
            "a draw must be [name, number]",
        )
    timings = obj["timings"]
    _need(
        isinstance(timings, dict) and all(is_number(v) for v in timings.values()),
        "timings must map stages to numbers",
    )
    _need(is_number(obj["elapsed_s"]), "elapsed_s must be a number")
    novelty = obj["novelty"]
    if novelty is not None:
        _need(isinstance(novelty, list) and len(novelty) == 2, "novelty must be [new branches, new buckets]")
        novelty = Novelty(_count(novelty[0], "new branches"), _count(novelty[1], "new buckets"))
    parent = obj["parent"]
    if parent is not None:
        parent = _count(parent, "parent")
    _need(isinstance(obj["corpus"], bool), "corpus must be a bool")
    names = obj["blobs"]
    _need(
        isinstance(names, list) and all(isinstance(n, str) and BLOB_NAME.fullmatch(n) for n in names),
        "blobs must list plain file names",
    )
    n_findings = _count(obj["findings"], "findings")
    record = TestRecord(
        seed=seed,
        status=obj["status"],
        graph=graph,
        gen=gen,
        draws=[(d[0], d[1]) for d in draws],
        timings=dict(timings),
        elapsed_s=float(obj["elapsed_s"]),
        novelty=novelty,
        parent=parent,
    )
    return StoredTest(record, obj["corpus"], tuple(names), n_findings)


def encode_entry(entry: TestEntry, universe_size: int) -> tuple[bytes, list[bytes]]:
    """The record and finding rows of `entry`; refuses (ValueError) what could not be read back as given."""
    for name, data in entry.blobs.items():
        _need(isinstance(name, str) and BLOB_NAME.fullmatch(name) is not None, f"bad blob name {name!r}")
        _need(isinstance(data, bytes | bytearray | memoryview), f"blob {name} must be bytes")
    if entry.hits is None:
        _need(bool(entry.findings), "an entry without hits is kept only for its findings, and has none")
    else:
        _need(universe_size > 0, "hits given, but the corpus has no coverage universe")
        if len(entry.hits):
            _need(int(entry.hits.index[-1]) < universe_size, "hits outside the universe")
    try:
        record = encode_record(entry)
        findings = [encode_finding(f) for f in entry.findings]
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"cannot be stored: {e}") from None
    # What is written must read back: the same decoders run on every later open.
    decode_record(record)
    for f in findings:
        decode_finding(f)
    return record, findings


def encode_bitmap(hits: Hits, schema: int = CORPUS_SCHEMA) -> bytes:
    if schema < 2:
        return zlib.compress(pack(hits.to_wire()), 6)
    # Sorted indices as gaps, each u32 array split into its four byte planes: the high
    # planes are nearly all zero and zlib then halves what schema 1 stored.
    gaps = np.diff(hits.index.astype(np.uint32), prepend=np.uint32(0)).astype(np.uint32)
    return zlib.compress(pack({"gaps": _planes(gaps), "count": _planes(hits.count)}), 6)


def decode_bitmap(data: bytes, universe_size: int, schema: int = CORPUS_SCHEMA) -> Hits:
    # 8 bytes per reached branch at most, plus msgpack's few framing bytes
    obj = unpack(inflate(data, 8 * universe_size + 64))
    first = "index" if schema < 2 else "gaps"
    _need(
        isinstance(obj, dict) and set(obj) == {first, "count"} and all(isinstance(v, bytes) for v in obj.values()),
        f"bitmap must be {{{first}, count}} bytes",
    )
    _need(len(obj[first]) % 4 == 0 and len(obj["count"]) % 4 == 0, "bitmap arrays must be whole u32s")
    if schema >= 2:
        gaps, count = _unplanes(obj["gaps"]), _unplanes(obj["count"])
        _need(bool(np.all(gaps[1:] > 0)), "bitmap indices must be increasing")
        index = np.cumsum(gaps, dtype=np.uint64)
        _need(not len(index) or int(index[-1]) < 1 << 32, "bitmap index past u32")
        obj = {"index": index.astype("<u4").tobytes(), "count": count.astype("<u4").tobytes()}
    hits = Hits.from_wire(obj, universe_size)
    _need(len(hits) == len(obj["index"]) // 4, "bitmap indices must be unique, with counts >= 1")
    return hits


def _planes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a.astype("<u4").view(np.uint8).reshape(-1, 4).T).tobytes()


def _unplanes(data: bytes) -> np.ndarray:
    planes = np.frombuffer(data, np.uint8).reshape(4, -1)
    return np.ascontiguousarray(planes.T).view("<u4").reshape(-1).astype(np.uint32)


def encode_virgin(virgin: VirginMap) -> bytes:
    # VirginMap.to_bytes's format at zlib level 1: 1-2 ms instead of 5-19 ms for a map of
    # 105k branches, paid on every corpus entry; about 1.5x the size, read by the same code.
    return zlib.compress(virgin.virgin.tobytes(), 1)


def decode_virgin(data: bytes, universe_size: int) -> VirginMap:
    raw = inflate(data, universe_size + 1)
    _need(len(raw) == universe_size, f"virgin map of {len(raw)} branches, expected {universe_size}")
    return VirginMap(universe_size, np.frombuffer(raw, dtype=np.uint8).copy())


def encode_flaky(branches: np.ndarray) -> bytes:
    """The branches a campaign's calibration found flaky (`VirginMap.flag`), sorted."""
    return zlib.compress(np.asarray(branches, dtype="<u4").tobytes(), 1)


def decode_flaky(data: bytes, universe_size: int) -> np.ndarray:
    raw = inflate(data, 4 * universe_size + 1)
    _need(len(raw) % 4 == 0, f"flaky branches: {len(raw)} bytes, not whole uint32s")
    idx = np.frombuffer(raw, dtype="<u4").astype(np.int64)
    ordered = bool(np.all(np.diff(idx) > 0)) and (not len(idx) or int(idx[-1]) < universe_size)
    _need(ordered, f"flaky branches: not increasing indices below {universe_size}")
    return idx.astype(np.uint32)


_REQUIRED_FINDING = ("symptom", "backend", "stage", "signature")


def encode_finding(header: Mapping[str, Any]) -> bytes:
    return pack(dict(header))


def decode_finding(data: bytes) -> dict[str, Any]:
    obj = unpack(data)
    _need(isinstance(obj, dict), "finding must be a map")
    for k in _REQUIRED_FINDING:
        _need(isinstance(obj.get(k), str), f"finding needs a string {k!r}")
    _need(
        all(v is None or isinstance(v, str | bool) or is_number(v) for v in obj.values()),
        "finding fields must be strings, numbers, booleans or null",
    )
    return obj


# fields added later: a record written before them reads as 0
_OPTIONAL_COUNTS = {"TimelineRow": {"disk_kb", "rss_kb", "worker_rss_kb"}}


def _encode_counts(obj: Counters | TimelineRow) -> bytes:
    return pack({k: getattr(obj, k) for k in type(obj).__dataclass_fields__})


def _decode_counts(cls: type[T], data: bytes, what: str) -> T:
    """A flat record of a non-negative `elapsed_s` and integer counts (Counters, TimelineRow)."""
    fields = tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    obj = unpack(data)
    optional = _OPTIONAL_COUNTS.get(cls.__name__, set())
    _need(isinstance(obj, dict) and set(fields) - optional <= set(obj) <= set(fields), f"{what} fields differ")
    obj = {k: 0 for k in optional} | obj
    _need(is_number(obj["elapsed_s"]) and obj["elapsed_s"] >= 0, "elapsed_s must be a non-negative number")
    ints = {k: _count(obj[k], k) for k in fields if k != "elapsed_s"}
    return cls(elapsed_s=float(obj["elapsed_s"]), **ints)


def encode_counters(c: Counters) -> bytes:
    return _encode_counts(c)


def decode_counters(data: bytes) -> Counters:
    return _decode_counts(Counters, data, "counter")


def encode_timeline(row: TimelineRow) -> bytes:
    return _encode_counts(row)


def decode_timeline(data: bytes) -> TimelineRow:
    return _decode_counts(TimelineRow, data, "timeline")


def decode_scheduler(data: bytes) -> dict[str, Any]:
    """The scheduler checks its own fields (Scheduler.from_state); here only the shape."""
    return decode_state(data, "scheduler state")


def decode_state(data: bytes, what: str) -> dict[str, Any]:
    """A state record whose owner checks its fields; here only that it is an object."""
    return _json_object(unpack(data), what)
