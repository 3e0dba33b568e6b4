"""Corpus schema 2 storage (compressed blobs, weights stored once, compact bitmaps), old
schema 1 corpora still read and resumed, and the disk budget's drop rule."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from corpus_writer import BRANCHES, fake_universe

from nnsmith_cov.corpus import CorpusStore, TestEntry, TestRecord
from nnsmith_cov.corpus.blobpack import MODEL, pack_blobs, unpack_blobs
from nnsmith_cov.corpus.budget import DiskBudget
from nnsmith_cov.corpus.records import CorpusError, decode_bitmap, encode_bitmap
from nnsmith_cov.coverage.covmap import Hits, Novelty, VirginMap


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def material(seed: int, n: int = 4096) -> dict[str, bytes]:
    """A model whose bytes embed its weight verbatim (as ONNX initializers do), with its values."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal(16).astype(np.float32)
    model = b"\x08\x07header" + w.tobytes() + b"tail-of-graph" * 5
    return {"model.onnx": model, "inputs.npz": npz(w0=w, i1=x), "oracle.npz": npz(o2=x * 2)}


def record(seed: int) -> TestRecord:
    return TestRecord(seed, "pass", {}, {}, [("op", seed)], {}, float(seed), Novelty(1, 0))


def commit(s: CorpusStore, covmap: VirginMap, test_id: int, hits: Hits, blobs: dict[str, bytes]) -> None:
    covmap.update(hits)
    s.commit(test_id, TestEntry(record(test_id), hits, blobs), elapsed_s=float(test_id), virgin=covmap)


def test_blobs_pack_smaller_and_read_back_exactly() -> None:
    blobs = material(1)
    packed = pack_blobs(blobs)
    assert packed["model.onnx"][:1] == MODEL  # the weight is a reference into inputs.npz
    assert len(packed["model.onnx"]) < 200 < len(blobs["model.onnx"])
    assert unpack_blobs(packed) == blobs
    # a model that shares nothing with its values is compressed (or kept) whole
    alone = {"model.onnx": b"abc" * 1000}
    assert unpack_blobs(pack_blobs(alone)) == alone
    random = {"oracle.npz": np.random.default_rng(2).bytes(5000)}
    assert pack_blobs(random)["oracle.npz"][:1] == b"R" and unpack_blobs(pack_blobs(random)) == random


def test_bitmaps_of_both_schemas_round_trip() -> None:
    rng = np.random.default_rng(3)
    hits = Hits.from_arrays(rng.choice(BRANCHES, 500, replace=False), rng.integers(1, 1000, 500))
    for schema in (1, 2):
        back = decode_bitmap(encode_bitmap(hits, schema), BRANCHES, schema)
        assert np.array_equal(back.index, hits.index) and np.array_equal(back.count, hits.count)
    assert len(encode_bitmap(hits, 2)) < len(encode_bitmap(hits, 1))
    with pytest.raises(ValueError):  # one schema's bitmap is not read as the other's
        decode_bitmap(encode_bitmap(hits, 1), BRANCHES, 2)


@pytest.mark.parametrize("schema", [1, 2])
def test_corpus_of_each_schema_stores_reopens_and_resumes(tmp_path: Path, schema: int) -> None:
    path = tmp_path / "c"
    u = fake_universe()
    rng = np.random.default_rng(4)
    hits = [Hits.from_arrays(rng.choice(BRANCHES, 40, replace=False), np.ones(40)) for _ in range(4)]
    with CorpusStore.create(path, {"seed": 1}, {}, u, schema=schema) as s:
        covmap = VirginMap(len(u))
        for k in range(2):
            commit(s, covmap, k, hits[k], material(k))
    with CorpusStore.open(path, u.ident) as s:  # resumed: goes on in the corpus's own schema
        assert s.meta.schema == schema
        covmap = s.virgin()
        for k in range(2, 4):
            commit(s, covmap, k, hits[k], material(k))
    with CorpusStore.open(path, readonly=True) as s:
        assert s.check() == []
        for k in range(4):
            e = s.entry(k)
            assert e is not None and dict(e.blobs) == material(k)
            assert np.array_equal(e.hits.index, hits[k].index)
            assert s.blob(k, "model.onnx") == material(k)["model.onnx"]
        with s.snapshot() as view:
            raw = view.stored_blobs(0)["model.onnx"]
        assert (raw == material(0)["model.onnx"]) == (schema == 1)  # schema 1 stores raw bytes


def test_old_schema_corpus_cannot_drop_blobs(tmp_path: Path) -> None:
    with CorpusStore.create(tmp_path / "c", {}, {}, None, schema=1) as s:
        with pytest.raises(CorpusError, match="schema 1"):
            s.drop_blobs([0])


def budget_corpus(tmp_path: Path) -> tuple[CorpusStore, list[Hits]]:
    """Six tests of ~120 KB of incompressible blobs; tests 1 and 4 alone reach branch 2000+k."""
    u = fake_universe()
    s = CorpusStore.create(tmp_path / "c", {}, {}, u)
    covmap = VirginMap(len(u))
    common = np.arange(0, 50)
    all_hits = []
    for k in range(6):
        index = np.concatenate([common, [2000 + k]]) if k in (1, 4) else common + 100 * (k % 2)
        hits = Hits.from_arrays(np.asarray(index), np.ones(len(index)))
        rng = np.random.default_rng(10 + k)
        commit(s, covmap, k, hits, {"model.onnx": rng.bytes(120_000)})
        all_hits.append(hits)
    return s, all_hits


def test_budget_drops_non_owners_oldest_first_and_keeps_records(tmp_path: Path) -> None:
    s, all_hits = budget_corpus(tmp_path)
    full = s.used_bytes()
    # room for about three tests' blobs: three go, the owners of a rare branch (1, 4) stay
    budget = DiskBudget(s, full - 3 * 120_000 + 60_000)
    done = budget.enforce()
    assert done is not None and done.tests == [0, 2, 3] and not done.over
    assert s.used_bytes() < full - 2 * 120_000
    with s.snapshot() as view:
        assert [view.dropped(k) for k in range(6)] == [True, False, True, True, False, False]
    for k in range(6):  # records and bitmaps are never dropped
        e = s.entry(k)
        assert e is not None and e.record.seed == k and np.array_equal(e.hits.index, all_hits[k].index)
        assert (e.blobs == {}) == (k in (0, 2, 3))
        assert (s.blob(k, "model.onnx") is None) == (k in (0, 2, 3))
    assert s.check() == []
    assert budget.enforce() is None  # under the budget now: nothing more goes
    s.close()


def test_budget_takes_owners_last_when_it_must(tmp_path: Path) -> None:
    s, _ = budget_corpus(tmp_path)
    done = DiskBudget(s, s.used_bytes() - 5 * 120_000 + 60_000).enforce()
    assert done is not None and done.tests == [0, 2, 3, 5, 1]
    done = DiskBudget(s, 1).enforce()  # records and bitmaps alone exceed it: all blobs go, and it says so
    assert done is not None and done.tests == [4] and done.over
    s.close()


# -- end to end: the CLI on a corpus in the old format, and on one whose blobs were dropped ----

FLAGS = ["--backends", "ort", "--nodes", "4", "--ops", "Add", "Mul", "Relu", "Sigmoid", "MatMul", "--seed", "3"]


def as_schema_1(src: Path, dst: Path) -> None:
    """Rewrite a corpus in schema 1, as an nnsmith-cov before schema 2 would have stored it."""
    with CorpusStore.open(src, readonly=True) as s:
        meta, universe = s.meta, s.universe()
        entries = [s.entry(k) for k, _ in s.entries(include_finding_only=True)]
        ids = [k for k, _ in s.entries(include_finding_only=True)]
        run_stats, scheduler, counters = s.run_stats(), s.scheduler_state(), s.counters()
    with CorpusStore.create(dst, meta.config, meta.versions, universe, schema=1) as d:
        covmap = VirginMap(meta.universe_size)
        for k, e in zip(ids, entries):
            if e.hits is not None:
                covmap.update(e.hits)
            d.commit(k, e, elapsed_s=e.record.elapsed_s, virgin=covmap if e.hits is not None else None)
        for k in sorted(set(range(counters.next_test_id)) - set(ids)):  # the tests that were only counted
            d.commit(k, elapsed_s=counters.elapsed_s, run_stats=run_stats)
        if scheduler is not None:
            d.save_scheduler(scheduler)


@pytest.mark.slow
def test_old_corpora_and_dropped_blobs_replay_to_the_same_map_and_resume(tmp_path: Path) -> None:
    import shutil

    from nnsmith_cov.cli import main

    camp = tmp_path / "camp"
    assert main(["fuzz", "-o", str(camp), "--tests", "6", *FLAGS]) == 0
    with CorpusStore.open(camp / "lmdb", readonly=True) as s:
        assert s.meta.schema == 2 and s.check() == []
        want = s.virgin().covered()
    old = tmp_path / "old"
    shutil.copytree(camp, old, ignore=shutil.ignore_patterns("lmdb"))
    as_schema_1(camp / "lmdb", old / "lmdb")
    with CorpusStore.open(camp / "lmdb") as s:  # the budget at its tightest: every blob goes
        done = DiskBudget(s, 1).enforce()
        assert done is not None and len(done.tests) == s.counters().corpus + s.counters().finding_only
    for source in (old, camp):  # dropped tests are searched again from their seeds
        out = tmp_path / f"replay-{source.name}"
        assert main(["replay", str(source), "--backends", "ort", "-o", str(out)]) == 0
        with CorpusStore.open(out / "lmdb", readonly=True) as r:
            assert r.check() == [] and np.array_equal(r.virgin().covered(), want)
    assert main(["fuzz", "--resume", str(old), "--tests", "9"]) == 0  # an old corpus goes on, in its format
    with CorpusStore.open(old / "lmdb", readonly=True) as s:
        assert s.meta.schema == 1 and s.check() == [] and s.counters().next_test_id == 9
