"""The campaign corpus store: one LMDB environment per campaign, one write transaction per finished test."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import numpy as np

from nnsmith_cov.corpus.blobpack import DROPPED, is_dropped, pack_blobs
from nnsmith_cov.corpus.environment import (
    check_data_file,
    fsync_dir,
    one_line,
    open_env,
    release_lock,
    take_writer_lock,
)
from nnsmith_cov.corpus.records import (
    CORPUS_SCHEMA,
    DB_NAMES,
    MAX_ID,
    READABLE_SCHEMAS,
    CorpusError,
    Counters,
    TestEntry,
    TestRecord,
    TimelineRow,
    decode_state,
    decode_timeline,
    encode_bitmap,
    encode_counters,
    encode_entry,
    encode_flaky,
    encode_timeline,
    encode_virgin,
    finding_key,
    id_key,
    inflate,
    is_int,
    is_number,
    pack,
)
from nnsmith_cov.corpus.view import CorpusMeta, CorpusView
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.coverage.universe import Universe

DEFAULT_MAP_SIZE = 64 << 20  # address space reserved at first; doubled whenever a transaction fills it
MAX_MAP_SIZE = 1 << 40

T = TypeVar("T")


class CorpusStore:
    """A campaign's corpus, opened for writing (the campaign) or reading (reports, resume checks).

    Make one with `create` or `open`, never directly. Process safety: one process at a
    time opens a corpus for writing (`writer.lock`, an flock the kernel drops when the
    process dies, however it dies); any number of processes may open it readonly at the
    same time, and each read (`snapshot`) sees one committed state, never part of a test.
    Thread safety: none; use a store from one thread. LMDB allows one open environment
    per file per process, so a process opens a corpus once and shares that store.
    """

    def __init__(self, path: Path, env: lmdb.Environment, readonly: bool, lock_fd: int | None) -> None:
        self.path = path
        self.readonly = readonly
        self._env = env
        self._lock_fd = lock_fd
        self._universe_size = 0  # until the meta is read
        self._schema = 1
        try:
            self._db = {name: env.open_db(name.encode(), create=False) for name in DB_NAMES}
        except lmdb.NotFoundError:
            raise CorpusError(f"{path} is an LMDB environment, but not a campaign corpus") from None
        except lmdb.Error as e:
            raise CorpusError(f"{path}: cannot open its databases ({one_line(e)})") from None
        with self.snapshot() as view:
            self.meta: CorpusMeta = view.meta()
            self._universe_size = self.meta.universe_size
            self._schema = self.meta.schema
            view.counters()  # a corpus without readable counters cannot be resumed or reported

    # -- opening and closing ---------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        config: Mapping[str, Any],
        versions: Mapping[str, str],
        universe: Universe | None,
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        schema: int = CORPUS_SCHEMA,
    ) -> CorpusStore:
        """A new, empty corpus at `path`, open for writing; refuses a path that exists.

        `schema` 1 writes the old format (raw blobs): for tests of old corpora only."""
        if schema not in READABLE_SCHEMAS:
            raise ValueError(f"corpus schema {schema} is not one of {READABLE_SCHEMAS}")
        path = Path(path)
        if path.exists() or path.is_symlink():
            raise CorpusError(f"{path} already exists: resume that campaign, or name a new one")
        try:
            config_text = json.dumps(dict(config), sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"campaign config is not JSON: {e}") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in versions.items()):
            raise ValueError("versions must map names to version strings")
        meta = {
            b"schema": pack(schema),
            b"created": pack(time.time()),
            b"config": config_text.encode(),
            b"versions": pack(dict(versions)),
            b"collector": pack("none" if universe is None else universe.collector),
            b"universe_ident": pack("" if universe is None else universe.ident),
            b"universe_size": pack(0 if universe is None else len(universe)),
        }
        if universe is not None:
            meta[b"universe"] = universe.to_bytes()
        path.parent.mkdir(parents=True, exist_ok=True)
        # Built aside and renamed into place: a corpus folder either holds a whole,
        # empty campaign or does not exist, even if this process dies half-way.
        tmp = path.parent / f".{path.name}.creating-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            env = lmdb.open(str(tmp), map_size=map_size, subdir=True, max_dbs=len(DB_NAMES))
            try:
                with env.begin(write=True) as txn:
                    dbs = {name: env.open_db(name.encode(), txn=txn) for name in DB_NAMES}
                    for key, value in meta.items():
                        txn.put(key, value, db=dbs["meta"])
                    txn.put(b"counters", encode_counters(Counters()), db=dbs["state"])
                    if universe is not None:
                        txn.put(b"virgin", encode_virgin(VirginMap(len(universe))), db=dbs["state"])
            finally:
                env.close()
            fsync_dir(tmp)
            os.rename(tmp, path)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError | lmdb.Error):
                raise CorpusError(f"{path}: cannot create ({one_line(e)})") from None
            raise
        fsync_dir(path.parent)
        return cls.open(path, map_size=map_size)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        expect_ident: str | None = None,
        readonly: bool = False,
        *,
        expect_collector: str | None = None,
        verify: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> CorpusStore:
        """An existing corpus. With `expect_ident`, refuse one measured on another universe.

        `verify` walks every page of the data file first (seconds per gigabyte): for
        corpora from elsewhere. Without it only the file's header and length are checked
        before LMDB maps it, and each record is validated as it is read.
        """
        path = Path(path)
        if not path.exists():
            raise CorpusError(f"{path}: no corpus there")
        if not path.is_dir():
            raise CorpusError(f"{path} is not a corpus (not a folder)")
        data = path / "data.mdb"
        if not data.is_file():
            raise CorpusError(f"{path} is not a corpus (no LMDB data.mdb in it)")
        try:
            check_data_file(path, data, verify)
        except OSError as e:
            raise CorpusError(f"{path}: cannot read data.mdb ({one_line(e)})") from None
        lock_fd = None if readonly else take_writer_lock(path)
        env = None
        try:
            env = open_env(path, readonly, map_size)
            if not readonly:
                env.reader_check()  # free reader slots of dead processes, or they pin old pages forever
            store = cls(path, env, readonly, lock_fd)
        except BaseException:
            if env is not None:
                env.close()
            release_lock(lock_fd)
            raise
        m = store.meta
        if (expect_ident is not None and m.universe_ident != expect_ident) or (
            expect_collector is not None and m.collector != expect_collector
        ):
            # Bitmaps index branches by their number in one universe: merged with another
            # numbering they would name different branches. Re-running the tests does work.
            made = f"collector {m.collector}, universe {m.universe_ident or 'none'}"
            now = [f"collector {expect_collector}"] if expect_collector is not None else []
            now += [f"universe {expect_ident or 'none'}"] if expect_ident is not None else []
            store.close()
            raise CorpusError(f"{path} was made with {made}; this run measures {', '.join(now)}: replay it instead")
        return store

    def close(self) -> None:
        """Close the environment and drop the writer lock; closing twice is harmless."""
        if self._env is not None:
            self._env.close()
            self._env = None
        release_lock(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> CorpusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CorpusStore({str(self.path)!r}, {'readonly' if self.readonly else 'writable'})"

    # -- writing ---------------------------------------------------------------------------
    def commit(
        self,
        test_id: int,
        entry: TestEntry | None = None,
        *,
        elapsed_s: float,
        virgin: VirginMap | None = None,
        scheduler: Mapping[str, Any] | None = None,
        timeline: TimelineRow | None = None,
        run_stats: Mapping[str, Any] | None = None,
        flaky: np.ndarray | None = None,
    ) -> Counters:
        """Record one finished test in one durable transaction; returns the counters after it.

        `entry` is the test when it is kept (a corpus entry when it has hits, else kept
        for its findings), None when it only counts. `virgin` is the map after this test,
        given exactly when the entry has hits (only those change it); `scheduler` its
        state after observing the test (None: unchanged); `timeline` a row to append;
        `run_stats` the campaign's own counters after it (RunStats.to_json(), None: unchanged);
        `flaky` every branch flagged flaky so far (`VirginMap.flag`; None: unchanged).
        When this returns, the test survives any crash; if the process dies before, no
        trace of it is stored. Test ids are the caller's; a stored id is never taken twice.
        """
        if self._env is None or self.readonly:
            raise CorpusError(f"{self.path} is {'closed' if self._env is None else 'open readonly'}: cannot commit")
        if not is_int(test_id) or not 0 <= test_id < MAX_ID:
            raise ValueError(f"test id {test_id!r} is not an integer in [0, 2**63 - 1)")
        if not is_number(elapsed_s) or elapsed_s < 0:
            raise ValueError(f"elapsed_s {elapsed_s!r} is not a non-negative number")
        with_hits = entry is not None and entry.hits is not None
        if (virgin is not None) != with_hits:
            raise ValueError("the virgin map is given exactly when the test enters the corpus with hits")
        size = self.meta.universe_size
        db = self._db
        key = id_key(test_id)
        # Everything is encoded and checked before the transaction starts: the transaction
        # only puts bytes, so a retry after growing the map repeats nothing but puts.
        puts: list[tuple[Any, bytes, bytes]] = []
        n_findings = 0
        if entry is not None:
            try:
                record, findings = encode_entry(entry, size)
            except ValueError as e:
                raise ValueError(f"test {test_id}: {e}") from None
            n_findings = len(findings)
            puts.append((db["tests"], key, record))
            # a resumed schema 1 corpus goes on in its own format: one schema per corpus
            stored = pack_blobs(entry.blobs) if self._schema >= 2 else {n: bytes(d) for n, d in entry.blobs.items()}
            puts += [(db["blobs"], key + name.encode(), data) for name, data in stored.items()]
            puts += [(db["findings"], finding_key(test_id, k), f) for k, f in enumerate(findings)]
            if entry.hits is not None:
                puts.append((db["bitmaps"], key, encode_bitmap(entry.hits, self._schema)))
        if virgin is not None:
            if virgin.size != size:
                raise ValueError(f"virgin map of {virgin.size} branches, the universe has {size}")
            puts.append((db["state"], b"virgin", encode_virgin(virgin)))
        if scheduler is not None:
            puts.append((db["state"], b"scheduler", _encode_scheduler(scheduler)))
        if run_stats is not None:
            puts.append((db["state"], b"run_stats", _encode_state(run_stats, "run stats")))
        if flaky is not None:
            puts.append((db["state"], b"flaky", encode_flaky(flaky)))
        row = None if timeline is None else _encode_timeline(timeline)

        def body(txn: lmdb.Transaction) -> Counters:
            old = self._view(txn).counters()
            if entry is not None and txn.get(key, db=db["tests"]) is not None:
                raise CorpusError(f"{self.path}: test {test_id} is already stored; test ids are never reused")
            new = Counters(
                next_test_id=max(old.next_test_id, test_id + 1),
                tests_run=old.tests_run + 1,
                elapsed_s=float(elapsed_s),
                corpus=old.corpus + with_hits,
                finding_only=old.finding_only + (entry is not None and not with_hits),
                findings=old.findings + n_findings,
                timeline=old.timeline + (row is not None),
            )
            for where, k, v in puts:
                txn.put(k, v, db=where)
            if row is not None:
                txn.put(id_key(old.timeline), row, db=db["timeline"])
            txn.put(b"counters", encode_counters(new), db=db["state"])
            return new

        return self._write(body)

    def save_scheduler(self, state: Mapping[str, Any]) -> None:
        """Store the scheduler state alone (e.g. when a campaign stops between tests)."""
        if self._env is None or self.readonly:
            raise CorpusError(f"{self.path} is {'closed' if self._env is None else 'open readonly'}: cannot write")
        data = _encode_scheduler(state)
        self._write(lambda txn: txn.put(b"scheduler", data, db=self._db["state"]))

    def drop_blobs(self, test_ids: list[int]) -> int:
        """Replace the blobs of `test_ids` by a dropped marker (schema 2 only), in one
        transaction; records, bitmaps and findings stay. Returns the stored bytes freed."""
        if self._env is None or self.readonly:
            raise CorpusError(f"{self.path} is {'closed' if self._env is None else 'open readonly'}: cannot write")
        if self._schema < 2:
            raise CorpusError(f"{self.path} is a schema {self._schema} corpus: its blobs cannot be dropped")
        blobs = self._db["blobs"]

        def body(txn: lmdb.Transaction) -> int:
            freed = 0
            for test_id in test_ids:
                for key, data in list(self._view(txn).stored_blobs(test_id).items()):
                    if not is_dropped(data):
                        freed += len(data) - len(DROPPED)
                        txn.put(id_key(test_id) + key.encode(), DROPPED, db=blobs)
            return freed

        return self._write(body)

    def used_bytes(self) -> int:
        """Bytes of the pages the corpus's records occupy now (what a compacted copy would
        take). data.mdb itself never shrinks: LMDB reuses freed pages instead."""
        if self._env is None:
            raise CorpusError(f"{self.path} is closed")
        psize = self._env.stat()["psize"]
        total = 0
        with self._env.begin() as txn:
            for db in [*self._db.values(), None]:
                st = txn.stat(db) if db is not None else self._env.stat()
                total += (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * psize
        return total

    def _write(self, body: Callable[[lmdb.Transaction], T]) -> T:
        while True:
            try:
                # Leaving the block commits (and, with sync on, fsyncs twice: pages, then the
                # meta page that makes them current); an exception aborts instead.
                with self._env.begin(write=True) as txn:
                    return body(txn)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.Error as e:
                raise CorpusError(f"{self.path}: write failed ({one_line(e)})") from None

    def _grow(self) -> None:
        size = self._env.info()["map_size"]
        if size >= MAX_MAP_SIZE:
            raise CorpusError(f"{self.path}: the corpus is full at {size >> 30} GiB")
        try:
            self._env.set_mapsize(min(2 * size, MAX_MAP_SIZE))
        except lmdb.Error as e:  # e.g. a snapshot of this process still open
            raise CorpusError(f"{self.path}: cannot grow the map ({one_line(e)})") from None

    def _view(self, txn: lmdb.Transaction) -> CorpusView:
        return CorpusView(txn, self._db, self.path, self._universe_size, self._schema)

    # -- reading ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[CorpusView]:
        """A consistent view: every read through it sees the same committed state.

        Keep it short: while it is open, a running campaign cannot reuse the pages it
        sees, and this process cannot grow the map.
        """
        if self._env is None:
            raise CorpusError(f"{self.path} is closed")
        try:
            try:
                txn = self._env.begin()
            except lmdb.MapResizedError:
                # The writer grew the map past ours: adopt its size, then read.
                self._env.set_mapsize(0)
                txn = self._env.begin()
        except lmdb.Error as e:
            raise CorpusError(f"{self.path}: cannot read ({one_line(e)})") from None
        try:
            yield self._view(txn)
        except lmdb.Error as e:  # LMDB's own checks (a page out of range, a bad page type)
            raise CorpusError(f"{self.path}: damaged ({one_line(e)})") from None
        finally:
            txn.abort()

    def universe(self) -> Universe | None:
        """The branch universe the campaign measured, checked against the identity it is stored under."""
        with self.snapshot() as view:
            data = view.get("meta", b"universe")
        m = self.meta
        if m.universe_size == 0:
            return None
        if data is None:
            raise CorpusError(f"{self.path}: damaged (no universe)")
        try:
            inflate(data, 64 * m.universe_size + (64 << 20))  # refuse a decompression bomb before decoding
            u = Universe.from_bytes(data)
        except ValueError as e:
            raise CorpusError(f"{self.path}: damaged universe ({e})") from None
        if (u.ident, len(u), u.collector) != (m.universe_ident, m.universe_size, m.collector):
            raise CorpusError(f"{self.path}: damaged universe (it is not universe {m.universe_ident})")
        return u

    def counters(self) -> Counters:
        with self.snapshot() as view:
            return view.counters()

    def virgin(self) -> VirginMap | None:
        with self.snapshot() as view:
            return view.virgin()

    def scheduler_state(self) -> dict[str, Any] | None:
        with self.snapshot() as view:
            return view.scheduler_state()

    def run_stats(self) -> dict[str, Any] | None:
        with self.snapshot() as view:
            return view.run_stats()

    def entries(self, include_finding_only: bool = False, batch: int = 256) -> Iterator[tuple[int, TestRecord]]:
        """Corpus entries in id order, read `batch` at a time, each batch in its own snapshot.

        A kept test never changes once committed, so batches see every entry once; tests
        committed meanwhile may or may not show up. No read transaction stays open while
        the caller works between items: a long one would keep a running campaign from
        reusing freed pages, and would forbid growing the map in this process.
        """
        start = 0
        while True:
            with self.snapshot() as view:
                chunk = list(itertools.islice(view.entries(include_finding_only, start), max(1, batch)))
            yield from chunk
            if len(chunk) < max(1, batch):
                return
            start = chunk[-1][0] + 1

    def record(self, test_id: int) -> TestRecord | None:
        with self.snapshot() as view:
            return view.record(test_id)

    def entry(self, test_id: int) -> TestEntry | None:
        with self.snapshot() as view:
            return view.entry(test_id)

    def hits(self, test_id: int) -> Hits | None:
        with self.snapshot() as view:
            return view.hits(test_id)

    def blobs(self, test_id: int) -> dict[str, bytes]:
        with self.snapshot() as view:
            return view.blobs(test_id)

    def blob(self, test_id: int, name: str) -> bytes | None:
        with self.snapshot() as view:
            return view.blob(test_id, name)

    def findings(self, test_id: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        with self.snapshot() as view:
            return view.findings(test_id)

    def check(self) -> list[str]:
        """Everything wrong with the corpus (see `CorpusView.check`); empty when consistent."""
        with self.snapshot() as view:
            return view.check()

    def timeline(self) -> list[TimelineRow]:
        with self.snapshot() as view:
            return view.timeline()

    def __len__(self) -> int:
        """Corpus entries (tests kept with a bitmap)."""
        return self.counters().corpus


def _encode_scheduler(state: Mapping[str, Any]) -> bytes:
    return _encode_state(state, "scheduler state")


def _encode_state(state: Mapping[str, Any], what: str) -> bytes:
    try:
        data = pack(dict(state))
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{what} cannot be stored: {e}") from None
    decode_state(data, what)  # what is written must read back
    return data


def _encode_timeline(row: TimelineRow) -> bytes:
    try:
        data = encode_timeline(row)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"timeline row cannot be stored: {e}") from None
    try:
        decode_timeline(data)
    except ValueError as e:
        raise ValueError(f"timeline row cannot be stored: {e}") from None
    return data
