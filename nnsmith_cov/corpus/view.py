"""Reading a corpus: one transaction's consistent view, every record validated as it is decoded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import numpy as np

from nnsmith_cov.corpus.blobpack import is_dropped, unpack_blobs
from nnsmith_cov.corpus.records import (
    BLOB_NAME,
    READABLE_SCHEMAS,
    CorpusError,
    Counters,
    StoredTest,
    TestEntry,
    TestRecord,
    TimelineRow,
    decode_bitmap,
    decode_counters,
    decode_finding,
    decode_flaky,
    decode_record,
    decode_scheduler,
    decode_state,
    decode_timeline,
    decode_virgin,
    id_key,
    is_int,
    is_number,
    key_id,
    unpack,
)
from nnsmith_cov.coverage.covmap import Hits, VirginMap

T = TypeVar("T")


@dataclass(frozen=True)
class CorpusMeta:
    """What a corpus says about the campaign that made it (the `meta` database)."""

    schema: int
    created: float  # unix seconds
    config: dict[str, Any]
    versions: dict[str, str]
    collector: str  # "none" when the campaign measured no coverage
    universe_ident: str  # "" without a collector
    universe_size: int  # 0 without a collector


class CorpusView:
    """Reads inside one LMDB transaction (see `CorpusStore.snapshot`); valid only while it lasts.

    Every value is validated as it is decoded; anything malformed is a one-line CorpusError
    naming the record. Not thread-safe, like the transaction under it.
    """

    def __init__(
        self, txn: lmdb.Transaction, dbs: Mapping[str, Any], path: Path, universe_size: int, schema: int = 1
    ) -> None:
        self._schema = schema  # 1 until the meta is read: meta records are the same in every schema
        self._txn = txn
        self._dbs = dbs
        self._path = path
        self._size = universe_size

    def get(self, db: str, key: bytes) -> bytes | None:
        """The raw value under `key` in database `db`, unchecked."""
        return self._txn.get(key, db=self._dbs[db])

    def _bad(self, where: str, problem: object) -> CorpusError:
        return CorpusError(f"{self._path}: damaged {where} ({problem})")

    def _decode(self, decode: Callable[[Any], T], data: Any, where: str) -> T:
        try:
            return decode(data)
        except ValueError as e:
            raise self._bad(where, e) from None

    def _items(self, db: str, first: bytes = b"", prefix: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Items from key `first` on: those that start with it (`prefix`), or all after it."""
        cursor = self._txn.cursor(db=self._dbs[db])
        if not cursor.set_range(first):
            return
        for key, value in cursor:
            if prefix and not key.startswith(first):
                return
            yield key, value

    def meta(self) -> CorpusMeta:
        def field(key: str, check: Callable[[Any], bool], what: str) -> Any:
            data = self.get("meta", key.encode())
            if data is None:
                raise self._bad("meta", f"no {key}")
            value = self._decode(unpack, data, f"meta {key}")
            if not check(value):
                raise self._bad("meta", f"{key} must be {what}")
            return value

        if self.get("meta", b"schema") is None:
            raise CorpusError(f"{self._path} is an LMDB environment, but not a campaign corpus (no schema)")
        schema = field("schema", is_int, "an integer")
        if schema not in READABLE_SCHEMAS:
            readable = ", ".join(map(str, READABLE_SCHEMAS))
            raise CorpusError(f"{self._path} has corpus schema {schema}; this nnsmith-cov reads schemas {readable}")
        config_text = self.get("meta", b"config")
        try:
            config = json.loads((config_text or b"").decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise self._bad("meta", f"config is not JSON: {e}") from None
        if not isinstance(config, dict):
            raise self._bad("meta", "config must be a JSON object")
        versions = field(
            "versions",
            lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
            "a map of strings",
        )
        collector = field("collector", lambda v: isinstance(v, str) and bool(v), "a name")
        ident = field("universe_ident", lambda v: isinstance(v, str), "a string")
        size = field("universe_size", lambda v: is_int(v) and 0 <= v < 1 << 32, "a branch count")
        if (collector == "none") != (size == 0) or (size == 0) != (ident == ""):
            raise self._bad("meta", f"collector {collector}, universe {ident!r} of {size} branches disagree")
        created = field("created", is_number, "a time")
        self._size = size
        return CorpusMeta(schema, float(created), config, versions, collector, ident, size)

    def counters(self) -> Counters:
        data = self.get("state", b"counters")
        if data is None:
            raise self._bad("state", "no counters")
        return self._decode(decode_counters, data, "counters")

    def virgin(self) -> VirginMap | None:
        """The map after the last committed test; None without a collector."""
        if not self._size:
            return None
        data = self.get("state", b"virgin")
        if data is None:
            raise self._bad("state", "no virgin map")
        virgin = self._decode(lambda d: decode_virgin(d, self._size), data, "virgin map")
        flaky = self.get("state", b"flaky")
        if flaky is not None:
            virgin.flag(self._decode(lambda d: decode_flaky(d, self._size), flaky, "flaky branches"))
        return virgin

    def scheduler_state(self) -> dict[str, Any] | None:
        data = self.get("state", b"scheduler")
        return None if data is None else self._decode(decode_scheduler, data, "scheduler state")

    def run_stats(self) -> dict[str, Any] | None:
        """The campaign's counters after the last committed test (None in older corpora)."""
        data = self.get("state", b"run_stats")
        return None if data is None else self._decode(lambda d: decode_state(d, "run stats"), data, "run stats")

    def stored(self, test_id: int) -> StoredTest | None:
        data = self.get("tests", id_key(test_id))
        return None if data is None else self._decode(decode_record, data, f"test {test_id}")

    def record(self, test_id: int) -> TestRecord | None:
        stored = self.stored(test_id)
        return None if stored is None else stored.record

    def entries(self, include_finding_only: bool = False, start: int = 0) -> Iterator[tuple[int, TestRecord]]:
        """Corpus entries (and, if asked, tests kept for findings only) from id `start` on, in id order."""
        for key, data in self._items("tests", id_key(start), prefix=False):
            if len(key) != 8:
                raise self._bad("tests", f"a key of {len(key)} bytes")
            test_id = key_id(key)
            stored = self._decode(decode_record, data, f"test {test_id}")
            if stored.in_corpus or include_finding_only:
                yield test_id, stored.record

    def hits(self, test_id: int) -> Hits | None:
        data = self.get("bitmaps", id_key(test_id))
        if data is None:
            return None
        return self._decode(lambda d: decode_bitmap(d, self._size, self._schema), data, f"bitmap of test {test_id}")

    def stored_blobs(self, test_id: int) -> dict[str, bytes]:
        """A test's blobs as stored: raw bytes in schema 1, tagged (corpus/blobpack.py) from 2."""
        prefix = id_key(test_id)
        out = {}
        for key, data in self._items("blobs", prefix):
            try:
                name = key[8:].decode()
            except UnicodeDecodeError:
                name = ""
            if not BLOB_NAME.fullmatch(name):
                raise self._bad(f"blobs of test {test_id}", f"name {key[8:]!r}")
            out[name] = data
        return out

    def blobs(self, test_id: int) -> dict[str, bytes]:
        """A test's blobs, raw; those the disk budget dropped are left out (see `dropped`)."""
        stored = self.stored_blobs(test_id)
        if self._schema < 2:
            return stored
        return self._decode(unpack_blobs, stored, f"blobs of test {test_id}")

    def dropped(self, test_id: int) -> bool:
        """Whether the disk budget dropped this test's blobs (its record and bitmap remain)."""
        return self._schema >= 2 and any(is_dropped(d) for d in self.stored_blobs(test_id).values())

    def blob(self, test_id: int, name: str) -> bytes | None:
        """One blob's raw bytes; None when absent or dropped."""
        if not BLOB_NAME.fullmatch(name):
            raise ValueError(f"bad blob name {name!r}")
        data = self.get("blobs", id_key(test_id) + name.encode())
        if data is None or self._schema < 2:
            return data
        if is_dropped(data):
            return None
        return self.blobs(test_id).get(name)  # a model recipe needs its sibling's bytes

    def findings(self, test_id: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """(test id, header) of every finding, or of one test's, in test order."""
        out = []
        for key, data in self._items("findings", b"" if test_id is None else id_key(test_id)):
            if len(key) != 12:
                raise self._bad("findings", f"a key of {len(key)} bytes")
            out.append((key_id(key), self._decode(decode_finding, data, f"finding of test {key_id(key)}")))
        return out

    def entry(self, test_id: int) -> TestEntry | None:
        """Everything stored of one test, checked to be whole (record, blobs, bitmap, findings)."""
        stored = self.stored(test_id)
        if stored is None:
            return None
        names = self.stored_blobs(test_id)
        if set(names) != set(stored.blob_names):
            raise self._bad(f"test {test_id}", f"blobs {sorted(names)}, its record lists {list(stored.blob_names)}")
        blobs = self.blobs(test_id)
        hits = self.hits(test_id)
        if (hits is not None) != stored.in_corpus:
            raise self._bad(f"test {test_id}", "bitmap and corpus flag disagree")
        findings = [h for _, h in self.findings(test_id)]
        if len(findings) != stored.n_findings:
            raise self._bad(f"test {test_id}", f"{len(findings)} findings, its record says {stored.n_findings}")
        return TestEntry(stored.record, hits, blobs, findings)

    def check(self) -> list[str]:
        """Everything wrong with the whole corpus, one line each (empty: consistent).

        Every kept test is whole, no blob, bitmap or finding belongs to no test, the
        counters count what is there, and the virgin map is exactly the union of the
        stored bitmaps. Reads every record: minutes for a large corpus, not for a hot path.
        """
        problems: list[str] = []
        counters = self.counters()
        rebuilt = VirginMap(self._size) if self._size else None
        ids: set[int] = set()
        corpus = finding_only = 0
        for key, _ in self._items("tests"):
            if len(key) != 8:
                problems.append(f"test key {key.hex()} is not 8 bytes")
                continue
            test_id = key_id(key)
            ids.add(test_id)
            if test_id >= counters.next_test_id:
                problems.append(f"test {test_id} lies beyond next_test_id {counters.next_test_id}")
            try:
                entry = self.entry(test_id)
            except CorpusError as e:
                problems.append(str(e))
                continue
            assert entry is not None
            if entry.hits is None:
                finding_only += 1
            else:
                corpus += 1
                if rebuilt is not None:
                    rebuilt.update(entry.hits)
        for db in ("blobs", "bitmaps", "findings"):
            for key, _ in self._items(db):
                if len(key) < 8 or key_id(key) not in ids:
                    problems.append(f"{db} key {key.hex()} belongs to no stored test")
        try:
            n_findings, n_rows = len(self.findings()), len(self.timeline())
        except CorpusError as e:
            problems.append(str(e))
            n_findings, n_rows = counters.findings, counters.timeline
        stored = {"corpus": corpus, "finding_only": finding_only, "findings": n_findings, "timeline": n_rows}
        for name, n in stored.items():
            if getattr(counters, name) != n:
                problems.append(f"counters say {name} {getattr(counters, name)}, the corpus holds {n}")
        if rebuilt is not None:
            try:
                virgin = self.virgin()
            except CorpusError as e:
                problems.append(str(e))
            else:
                assert virgin is not None
                differ = int(np.count_nonzero(virgin.virgin != rebuilt.virgin))
                if differ:
                    problems.append(f"the virgin map differs from the union of the bitmaps at {differ} branches")
        return problems

    def timeline(self) -> list[TimelineRow]:
        rows = []
        for key, data in self._items("timeline"):
            if len(key) != 8 or key_id(key) != len(rows):
                raise self._bad("timeline", f"row key {key.hex()} out of sequence")
            rows.append(self._decode(decode_timeline, data, f"timeline row {len(rows)}"))
        return rows
