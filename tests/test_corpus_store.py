"""The campaign corpus: round trips, refusal of damaged or foreign corpora, atomicity, and kill -9."""

from __future__ import annotations

import hashlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import corpus_writer as cw
import lmdb
import msgpack
import numpy as np
import pytest

import nnsmith_cov.corpus.store as store_module
from nnsmith_cov.corpus import (
    CORPUS_SCHEMA,
    CorpusError,
    CorpusStore,
    Counters,
    TestEntry,
    TestRecord,
    TimelineRow,
)
from nnsmith_cov.coverage.covmap import Hits, Novelty, VirginMap

ROOT = Path(__file__).resolve().parents[1]
GRAPH = {
    "schema": 1,
    "values": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3], "dtype": "f32"}, {"shape": [2, 3], "dtype": "f32"}],
    "inputs": [0],
    "weights": [1],
    "insts": [{"op": "Add", "attrs": {"bcast": [[], [1]]}, "inputs": [0, 1], "outputs": [2]}],
    "outputs": [2],
}
CRASH = {"symptom": "crash", "backend": "tvm", "stage": "compile", "opt": "opt", "localized": None, "signature": "s1"}
WRONG = {
    "symptom": "inconsistency",
    "backend": "ort",
    "stage": "execute",
    "opt": "opt",
    "localized": "optimization",
    "signature": "s2",
    "new": True,
}


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def record(seed: int, novelty: Novelty | None = None, parent: int | None = None) -> TestRecord:
    return TestRecord(
        seed=seed,
        status="pass",
        graph=GRAPH,
        gen={"seed": seed, "ops": ["Add"], "directions": ["forward"], "bins": [], "solve_ms": 1.25},
        draws=[("op", 3), ("direction", 0), ("scale", 0.75)],
        timings={"generate": 40.5, "compile:tvm": 812.0},
        elapsed_s=12.5,
        novelty=novelty,
        parent=parent,
    )


def one_line(e: pytest.ExceptionInfo[CorpusError]) -> str:
    text = str(e.value)
    assert text and "\n" not in text
    return text


def digest(path: Path) -> str:
    return hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path):
    s = CorpusStore.create(tmp_path / "c", {"seed": 7, "time_s": 60.0}, {"pkg": "1.0"}, cw.fake_universe())
    yield s
    s.close()


def poke(path: Path, db: bytes, key: bytes, value: bytes | None) -> None:
    """Change one raw value behind the store's back (the store must be closed)."""
    env = lmdb.open(str(path), max_dbs=10)
    with env.begin(write=True) as txn:
        handle = env.open_db(db, txn=txn)
        if value is None:
            txn.delete(key, db=handle)
        else:
            txn.put(key, value, db=handle)
    env.close()


def fill(s: CorpusStore, n: int, blob_size: int = 100_000) -> VirginMap:
    virgin = s.virgin()
    for i in range(n):
        hits = Hits.from_arrays(np.array([i, 1000 + i]), np.array([1, 5]))
        entry = TestEntry(record(i, virgin.update(hits)), hits, {"model.onnx": os.urandom(blob_size)})
        s.commit(i, entry, elapsed_s=float(i), virgin=virgin)
    return virgin


# -- round trips ---------------------------------------------------------------------------


def test_every_record_kind_round_trips(store: CorpusStore, tmp_path: Path) -> None:
    universe = cw.fake_universe()
    virgin = store.virgin()
    assert virgin is not None and virgin.count() == 0 and len(store) == 0
    hits = Hits.from_arrays(np.array([5, 17, 2999]), np.array([1, 3, 200]))
    novelty = virgin.update(hits)
    inputs = npz(i0=np.arange(6, dtype=np.float32).reshape(2, 3), w1=np.ones(3, np.float32))
    blobs = {"model.onnx": b"\x08\x07onnx-bytes", "inputs.npz": inputs, "oracle.npz": npz(o2=np.zeros((2, 3)))}
    kept = TestEntry(record(11, novelty), hits, blobs, [CRASH, WRONG])
    sched = {"schema": 1, "steps": 3, "groups": {"ops": {"alpha": [1.0, 2.5]}}, "rng": {"state": 12345678901234}}
    row = TimelineRow(elapsed_s=12.5, tests=3, branches=3, pass_branches=1, corpus=1, findings=2)
    after = store.commit(2, kept, elapsed_s=12.5, virgin=virgin, scheduler=sched, timeline=row)
    assert after == Counters(next_test_id=3, tests_run=1, elapsed_s=12.5, corpus=1, findings=2, timeline=1)
    only = TestEntry(record(12, Novelty(0, 0), parent=2), None, {"model.onnx": b"m"}, [CRASH])
    store.commit(3, only, elapsed_s=13.0, scheduler=sched | {"steps": 4})
    store.commit(4, None, elapsed_s=14.0)
    store.close()

    with CorpusStore.open(tmp_path / "c", universe.ident, readonly=True, expect_collector="python") as s:
        assert s.meta.schema == CORPUS_SCHEMA and s.meta.config == {"seed": 7, "time_s": 60.0}
        assert s.meta.versions == {"pkg": "1.0"} and (s.meta.collector, s.meta.universe_size) == ("python", 3000)
        u = s.universe()
        assert u is not None and u.ident == universe.ident and np.array_equal(u.line, universe.line)
        assert s.counters() == Counters(5, 3, 14.0, corpus=1, finding_only=1, findings=3, timeline=1)
        assert len(s) == 1
        assert np.array_equal(s.virgin().virgin, virgin.virgin)
        assert s.scheduler_state() == sched | {"steps": 4}
        assert s.timeline() == [row]
        assert s.findings() == [(2, CRASH), (2, WRONG), (3, CRASH)] and s.findings(3) == [(3, CRASH)]
        assert [i for i, _ in s.entries()] == [2] and [i for i, _ in s.entries(include_finding_only=True)] == [2, 3]
        got = s.entry(2)
        assert got.record == kept.record and got.blobs == blobs and got.findings == [CRASH, WRONG]
        assert np.array_equal(got.hits.index, hits.index) and np.array_equal(got.hits.count, hits.count)
        assert got.record.draws == [("op", 3), ("direction", 0), ("scale", 0.75)]
        with np.load(io.BytesIO(s.blob(2, "inputs.npz")), allow_pickle=False) as z:
            assert np.array_equal(z["i0"], np.arange(6, dtype=np.float32).reshape(2, 3))
        back = s.entry(3)
        assert back.hits is None and back.record.parent == 2 and back.blobs == {"model.onnx": b"m"}
        assert s.entry(4) is None and s.record(4) is None and s.hits(3) is None and s.blobs(4) == {}
        assert s.check() == []


def test_flaky_flags_are_stored_with_the_commit_that_changed_them(store: CorpusStore, tmp_path: Path) -> None:
    virgin = fill(store, 2)
    virgin.flag(np.array([1000, 2500]))
    store.commit(2, None, elapsed_s=2.0, flaky=virgin.flagged())  # flagged by a test not kept
    store.commit(3, None, elapsed_s=3.0)  # None: unchanged
    store.close()
    with CorpusStore.open(tmp_path / "c", readonly=True) as s:
        back = s.virgin()
        assert back.flagged().tolist() == [1000, 2500] and np.array_equal(back.virgin, virgin.virgin)
        assert not back.novelty(Hits.from_arrays(np.array([1000]), np.array([200]))).interesting
        assert s.check() == []


def test_a_campaign_without_coverage_keeps_findings_only(tmp_path: Path) -> None:
    with CorpusStore.create(tmp_path / "n", {}, {}, None) as s:
        assert s.virgin() is None and s.universe() is None and s.meta.collector == "none"
        s.commit(0, TestEntry(record(1, None), None, {}, [CRASH]), elapsed_s=1.0)
        with pytest.raises(ValueError):
            hits = Hits.from_arrays(np.array([0]), np.array([1]))
            s.commit(1, TestEntry(record(2), hits), elapsed_s=1.0, virgin=VirginMap(1))
        assert s.counters().finding_only == 1 and s.check() == []


# -- transactions ------------------------------------------------------------------------------


def test_a_failed_commit_leaves_no_trace(store: CorpusStore, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(store, 1)
    before = store.counters()
    virgin = store.virgin()
    map_before = virgin.virgin.copy()
    hits = Hits.from_arrays(np.array([7]), np.array([2]))
    entry = TestEntry(record(5, virgin.update(hits)), hits, {"model.onnx": b"x"}, [CRASH])

    def fail(_: Counters) -> bytes:
        raise RuntimeError("dies after every put, before the commit")

    monkeypatch.setattr(store_module, "encode_counters", fail)
    with pytest.raises(RuntimeError):
        store.commit(
            1, entry, elapsed_s=2.0, virgin=virgin, scheduler={"steps": 9}, timeline=TimelineRow(1, 1, 1, 1, 1, 1)
        )
    monkeypatch.undo()
    assert store.counters() == before and np.array_equal(store.virgin().virgin, map_before)
    assert store.record(1) is None and store.blobs(1) == {} and store.hits(1) is None and store.findings(1) == []
    assert store.scheduler_state() is None and store.timeline() == [] and store.check() == []
    store.commit(1, entry, elapsed_s=2.0, virgin=virgin)
    assert store.check() == [] and len(store) == 2


def test_ids_are_never_taken_twice(store: CorpusStore) -> None:
    entry = TestEntry(record(1), None, {}, [CRASH])
    store.commit(3, entry, elapsed_s=1.0)
    with pytest.raises(CorpusError) as e:
        store.commit(3, entry, elapsed_s=1.0)
    assert "already stored" in one_line(e)
    store.commit(1, entry, elapsed_s=2.0)  # workers finish out of order
    assert store.counters().next_test_id == 4 and store.counters().tests_run == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"entry": None, "virgin": VirginMap(3000)},  # the map changes only with a corpus entry
        {"entry": TestEntry(record(1))},  # nothing to keep
        {"entry": TestEntry(record(1), None, {"../x": b""}, [CRASH])},
        {"entry": TestEntry(record(1), None, {}, [{"symptom": "crash"}])},
        {"entry": TestEntry(record(1), Hits.from_arrays(np.array([3000]), np.array([1]))), "virgin": VirginMap(3000)},
        {"entry": TestEntry(record(1), Hits.from_arrays(np.array([3]), np.array([1]))), "virgin": VirginMap(5)},
        {"entry": TestEntry(TestRecord(1, "x", {1: 2}, {}, [], {}, 0.0), None, {}, [CRASH])},
        {"entry": None, "scheduler": {"rng": object()}},
        {"entry": None, "timeline": TimelineRow(1.0, -1, 0, 0, 0, 0)},
    ],
)
def test_bad_commits_are_refused_before_writing(store: CorpusStore, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        store.commit(0, elapsed_s=1.0, **kwargs)
    assert store.counters() == Counters() and store.check() == []


def test_the_map_grows_when_full(tmp_path: Path) -> None:
    with CorpusStore.create(tmp_path / "g", {}, {}, cw.fake_universe(), map_size=256 << 10) as s:
        fill(s, 3, blob_size=600_000)
        assert len(s) == 3 and len(s.blob(2, "model.onnx")) == 600_000 and s.check() == []


def test_entries_come_in_id_order_in_batches(store: CorpusStore) -> None:
    fill(store, 7, blob_size=10)
    store.commit(9, TestEntry(record(9), None, {}, [CRASH]), elapsed_s=1.0)
    assert [i for i, _ in store.entries(batch=3)] == list(range(7))
    assert [i for i, _ in store.entries(include_finding_only=True, batch=2)] == [*range(7), 9]


def test_a_reader_follows_a_writer_that_grew_the_map(tmp_path: Path) -> None:
    path = tmp_path / "r"
    writer = [sys.executable, str(Path(__file__).with_name("corpus_writer.py")), str(path), "--map-size", "262144"]
    subprocess.run([*writer, "--tests", "1"], check=True, capture_output=True, cwd=ROOT)
    with CorpusStore.open(path, readonly=True, map_size=256 << 10) as reader:
        assert reader.counters().tests_run == 1
        subprocess.run([*writer, "--tests", "40"], check=True, capture_output=True, cwd=ROOT)
        assert reader.counters().tests_run == 41 and reader.check() == []


# -- refusals ------------------------------------------------------------------------------------


def test_create_refuses_an_existing_path(store: CorpusStore, tmp_path: Path) -> None:
    with pytest.raises(CorpusError) as e:
        CorpusStore.create(tmp_path / "c", {}, {}, None)
    assert "already exists" in one_line(e)


def test_create_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_rename(*_: object) -> None:
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "rename", no_rename)
    with pytest.raises(CorpusError):
        CorpusStore.create(tmp_path / "c", {}, {}, cw.fake_universe())
    assert list(tmp_path.iterdir()) == []


def test_one_writer_at_a_time(store: CorpusStore, tmp_path: Path) -> None:
    with pytest.raises(CorpusError) as e:
        CorpusStore.open(tmp_path / "c")
    assert f"open for writing by pid {os.getpid()}" in one_line(e)


def test_a_foreign_universe_is_refused(store: CorpusStore, tmp_path: Path) -> None:
    ident = store.meta.universe_ident
    store.close()
    with pytest.raises(CorpusError) as e:
        CorpusStore.open(tmp_path / "c", "0123456789abcdef", expect_collector="llvm")
    assert one_line(e) == (
        f"{tmp_path / 'c'} was made with collector python, universe {ident}; "
        "this run measures collector llvm, universe 0123456789abcdef: replay it instead"
    )
    CorpusStore.open(tmp_path / "c", ident).close()


def _garbage(path: Path) -> None:
    path.mkdir()
    (path / "data.mdb").write_bytes(random.Random(1).randbytes(16384))


def _foreign_lmdb(path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v", db=env.open_db(b"other", txn=txn))
    env.close()


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda p: None, "no corpus there"),
        (lambda p: p.write_text("x"), "not a folder"),
        (lambda p: p.mkdir(), "no LMDB data.mdb"),
        (_garbage, "not an LMDB file"),
        (_foreign_lmdb, "not a campaign corpus"),
    ],
)
def test_what_is_not_a_corpus_is_refused(tmp_path: Path, make, says: str) -> None:
    path = tmp_path / "c"
    make(path)
    for readonly in (True, False):
        with pytest.raises(CorpusError) as e:
            CorpusStore.open(path, readonly=readonly)
        assert says in one_line(e)


def _cut(at: float):
    def damage(data: Path) -> None:
        with data.open("r+b") as f:
            f.truncate(int(data.stat().st_size * at) if at < 1 else int(at))

    return damage


def _scribble(data: Path) -> None:
    raw = bytearray(data.read_bytes())
    psize = 4096
    for i in range(2 * psize, len(raw), 97):  # every page past the two header pages
        raw[i] ^= 0x5A
    data.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "damage, verify, says",
    [
        (_cut(100), False, "too short"),
        (_cut(4100), False, "cut inside its second header page"),
        (_cut(0.5), False, "damaged data.mdb"),
        (_scribble, True, "damaged data.mdb"),
    ],
)
def test_damaged_files_are_refused_untouched(store: CorpusStore, tmp_path: Path, damage, verify, says) -> None:
    fill(store, 8)
    store.close()
    path = tmp_path / "c"
    damage(path / "data.mdb")
    before = digest(path)
    for readonly in (True, False):
        with pytest.raises(CorpusError) as e:
            CorpusStore.open(path, readonly=readonly, verify=verify)
        assert says in one_line(e)
    assert digest(path) == before


def test_verify_passes_a_sound_corpus(store: CorpusStore, tmp_path: Path) -> None:
    fill(store, 3)
    store.close()
    CorpusStore.open(tmp_path / "c", readonly=True, verify=True).close()


@pytest.mark.parametrize(
    "db, key, value, says",
    [
        (b"meta", b"schema", msgpack.packb(3), "has corpus schema 3; this nnsmith-cov reads schemas 1, 2"),
        (b"meta", b"schema", None, "not a campaign corpus (no schema)"),
        (b"meta", b"config", b"{not json", "config is not JSON"),
        (b"meta", b"universe_size", msgpack.packb("many"), "universe_size must be"),
        (b"state", b"counters", b"\xc1", "damaged counters"),
        (b"state", b"counters", msgpack.packb({"next_test_id": -1}), "damaged counters"),
    ],
)
def test_malformed_meta_is_refused_at_open(store: CorpusStore, tmp_path: Path, db, key, value, says) -> None:
    store.close()
    path = tmp_path / "c"
    poke(path, db, key, value)
    before = digest(path)
    for readonly in (True, False):
        with pytest.raises(CorpusError) as e:
            CorpusStore.open(path, readonly=readonly)
        assert says in one_line(e)
    assert digest(path) == before


def _read_all(s: CorpusStore) -> None:
    for test_id, _ in s.entries(include_finding_only=True):
        s.entry(test_id)
    s.virgin()
    s.scheduler_state()
    s.timeline()
    s.findings()
    s.universe()


@pytest.mark.parametrize(
    "db, key, value, says",
    [
        (b"tests", (0).to_bytes(8, "big"), b"\x92\x01", "damaged test 0"),
        (b"tests", (0).to_bytes(8, "big"), msgpack.packb({"seed": 1}), "record fields differ"),
        (b"bitmaps", (0).to_bytes(8, "big"), b"not zlib", "damaged bitmap of test 0"),
        (b"bitmaps", (1).to_bytes(8, "big"), None, "bitmap and corpus flag disagree"),
        (b"blobs", (0).to_bytes(8, "big") + b"../evil", b"", "name b'../evil'"),
        (b"blobs", (1).to_bytes(8, "big") + b"model.onnx", None, "its record lists"),
        (b"findings", (0).to_bytes(12, "big"), msgpack.packb({"symptom": "crash"}), "needs a string"),
        (b"state", b"virgin", __import__("zlib").compress(b"\xff" * 10), "virgin map of 10 branches"),
        (b"state", b"scheduler", msgpack.packb([1, 2]), "scheduler state must be a JSON object"),
        (b"state", b"flaky", __import__("zlib").compress(np.array([9, 4], "<u4").tobytes()), "not increasing"),
        (b"state", b"flaky", __import__("zlib").compress(np.array([3000], "<u4").tobytes()), "below 3000"),
        (b"state", b"flaky", __import__("zlib").compress(b"\x01\x02\x03"), "not whole uint32s"),
        (b"timeline", (5).to_bytes(8, "big"), msgpack.packb({}), "out of sequence"),
        (b"meta", b"universe", b"\x00" * 8, "damaged universe"),
    ],
)
def test_malformed_records_are_one_line_errors(store: CorpusStore, tmp_path: Path, db, key, value, says) -> None:
    fill(store, 2)
    store.commit(5, TestEntry(record(5), None, {}, [CRASH]), elapsed_s=3.0, scheduler={"steps": 1})
    store.close()
    path = tmp_path / "c"
    poke(path, db, key, value)
    before = digest(path)
    with CorpusStore.open(path, readonly=True) as s:
        with pytest.raises(CorpusError) as e:
            _read_all(s)
        assert says in one_line(e)
        if db not in (b"meta", b"state"):
            assert any(says in p for p in s.check())
    assert digest(path) == before


# -- kill -9 --------------------------------------------------------------------------------------


def _check_reported(s: CorpusStore, reported: dict[int, str]) -> None:
    """Every test the writer said it committed is there, whole and as written."""
    with s.snapshot() as view:
        for test_id, kind in reported.items():
            entry = view.entry(test_id)
            if kind == "-":
                assert entry is None, test_id
                continue
            assert entry is not None, test_id
            assert entry.blobs == cw.fake_blobs(test_id) and entry.findings == cw.fake_findings(test_id)
            assert entry.record.seed == test_id * 7919
            if kind == "corpus":
                want = cw.fake_hits(test_id)
                assert np.array_equal(entry.hits.index, want.index) and np.array_equal(entry.hits.count, want.count)
                assert entry.record.novelty.interesting
            else:
                assert entry.hits is None and entry.findings


def test_kill_9_anywhere_loses_at_most_the_test_in_flight(tmp_path: Path) -> None:
    rng = random.Random(20240607)
    path = tmp_path / "k"
    reported: dict[int, str] = {}
    unreported = 0  # tests that committed but were killed before they could say so
    stored = Counters()
    for trial in range(12):
        writer = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("corpus_writer.py")), str(path), "--map-size", "262144"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        ready = writer.stdout.readline()
        assert ready == f"ready {stored.next_test_id}\n", writer.communicate()[1]  # resumes where it stood
        time.sleep(rng.uniform(0.0, 0.25))
        if trial % 3 == 1:  # a reader while the writer runs sees a whole state
            with CorpusStore.open(path, readonly=True) as s:
                assert s.check() == []
        os.kill(writer.pid, signal.SIGKILL)
        # Read the rest through the same text stream, not communicate(): readline() above may have
        # buffered lines the writer printed right after "ready", and communicate() reads the pipe
        # itself, past that buffer, so they would be lost (the writer is dead: nothing blocks).
        out = writer.stdout.read()
        writer.stderr.read()
        writer.wait()
        assert writer.returncode == -signal.SIGKILL
        done = [line.split() for line in out.splitlines(keepends=True) if line.endswith("\n")]
        ids = [int(i) for i, _ in done]
        assert ids == list(range(stored.next_test_id, stored.next_test_id + len(ids)))
        reported |= {int(i): kind for i, kind in done}
        with CorpusStore.open(path, readonly=True) as s:
            assert s.check() == []
            now = s.counters()
            # the test in flight may have committed without living to say so; no more than that
            assert now.tests_run - stored.tests_run in (len(ids), len(ids) + 1)
            unreported += now.tests_run - stored.tests_run - len(ids)
            assert now.next_test_id == stored.next_test_id + (now.tests_run - stored.tests_run)
            assert s.scheduler_state() == ({"steps": now.tests_run} if now.tests_run else None)
            _check_reported(s, reported)
            kept = {i for i, _ in s.entries(include_finding_only=True)}
            said = {i for i, kind in reported.items() if kind != "-"}
            assert said <= kept and len(kept - said) <= unreported and max(kept, default=-1) < now.next_test_id
            # the stored map is the union of the stored tests' hits, recomputed here from their ids
            virgin = VirginMap(cw.BRANCHES)
            for i, _ in s.entries():
                virgin.update(cw.fake_hits(i))
            assert np.array_equal(virgin.virgin, s.virgin().virgin)
        stored = now
    assert len(reported) > 50 and {"corpus", "finding", "-"} <= set(reported.values())
