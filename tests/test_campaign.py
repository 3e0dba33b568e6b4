"""A campaign end to end through the CLI: LMDB corpus, feedback, resume, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore

FLAGS = ["--backends", "ort", "--nodes", "4", "--ops", "Add", "Mul", "Relu", "Sigmoid", "MatMul", "--seed", "3"]


def _stored(folder):
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        return store.counters(), store.virgin(), [i for i, _ in store.entries()], store.scheduler_state()


def test_campaign_keeps_new_coverage_and_resumes_where_it_stopped(tmp_path, capsys):
    folder = tmp_path / "camp"
    assert main(["fuzz", "-o", str(folder), "--tests", "4", *FLAGS]) == 0
    counters, virgin, ids, sched = _stored(folder)
    assert counters.next_test_id == 4 and counters.tests_run == 4
    assert 1 <= counters.corpus == len(ids) <= 4 and ids[0] == 0  # the first test always finds something new
    assert virgin is not None and virgin.count() > 100 and sched is not None
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["coverage"]["branches"] == virgin.count() and "scheduler" in stats  # feedback on by default
    config = json.loads((folder / "config.json").read_text())
    assert config["feedback"] is True and config["collector"] == "python"

    assert main(["fuzz", "--resume", str(folder), "--tests", "7"]) == 0
    counters2, virgin2, ids2, _ = _stored(folder)
    assert counters2.next_test_id == 7 and counters2.tests_run == 7
    assert ids2[: len(ids)] == ids and all(i >= 4 for i in ids2[len(ids) :])
    # the map only grows: every branch reached before is still reached
    assert np.all(virgin2.virgin <= virgin.virgin) and virgin2.count() >= virgin.count()
    assert "resume with --resume" in capsys.readouterr().out
    # the hedge's tests (drawn as without feedback) are counted across the resume, and the
    # entries they made say so: as many as those of its tests that reached new coverage
    hedged = json.loads((folder / "stats.json").read_text())["scheduler"]["hedged"]
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        marked = [r.gen.get("hedged") for _, r in store.entries()]
    assert hedged[0] >= 1 and marked.count(True) == hedged[1] and set(marked) <= {True, None}


def test_feedback_off_stores_no_weights_and_existing_folders_are_refused(tmp_path, capsys):
    folder = tmp_path / "plain"
    argv = [
        "fuzz",
        "-o",
        str(folder),
        "--tests",
        "2",
        "--feedback",
        "off",
        "--pass-filter",
        "torchscript_exporter/utils.py",
    ]
    assert main([*argv, *FLAGS]) == 0
    stats = json.loads((folder / "stats.json").read_text())
    assert "scheduler" not in stats and json.loads((folder / "config.json").read_text())["feedback"] is False
    # ORT is not measured: every branch is the exporter's, some in the file named as "passes"
    assert 0 < stats["coverage"]["pass_branches"] < stats["coverage"]["branches"]
    capsys.readouterr()
    assert main(["fuzz", "-o", str(folder), "--tests", "2", *FLAGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a campaign" in err[0]


def test_bad_campaigns_are_one_line_errors(tmp_path, capsys):
    assert main(["fuzz", "--resume", str(tmp_path / "none"), "--tests", "1"]) == 2
    assert "no campaign to resume" in capsys.readouterr().err
    folder = tmp_path / "camp"
    assert main(["fuzz", "-o", str(folder), "--tests", "1", *FLAGS]) == 0
    capsys.readouterr()
    data = folder / "lmdb" / "data.mdb"
    data.write_bytes(b"\0" * 100)  # truncated: not an LMDB file any more
    assert main(["fuzz", "--resume", str(folder), "--tests", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.mdb" in err[0]
    assert main(["fuzz", "-o", str(tmp_path / "x"), "--tests", "1", "--collector", "none", "--feedback", "on"]) == 2
    assert "needs a coverage collector" in capsys.readouterr().err


def test_two_workers_share_one_map_without_duplicate_or_lost_tests(tmp_path):
    folder = tmp_path / "two"
    assert main(["fuzz", "-o", str(folder), "--tests", "6", "--workers", "2", *FLAGS]) == 0
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        counters = store.counters()
        assert counters.tests_run == 6 and counters.next_test_id == 6  # ids 0..5, each committed once
        assert store.check() == []  # map == union of the stored bitmaps, counters match the records
    assert (folder / "workers" / "w1.log").exists()


def _campaign(tmp_path, feedback: bool, tests: int):
    from nnsmith_cov.abstract.dtype import DType
    from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
    from nnsmith_cov.campaign.run_dir import RunDir
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerHandle
    from nnsmith_cov.gen.generator import GenConfig
    from nnsmith_cov.ops import select_ops

    def f32(op):
        sigs = [s for s in op.sigs if all(d is DType.float32 for d in (*s[0], *s[1]))]
        return type(op.__name__, (op,), {"sigs": sigs})

    ops = [f32(op) for op in select_ops(["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"])]
    backend = "fake_coverage:SigmoidPays"
    settings = CaseSettings([backend], search={"method": "sampling", "max_iters": 8}, localize=False)
    cfg = FuzzConfig(GenConfig(nodes=3, ops=ops), settings, seed=1, max_tests=tests, feedback=feedback)
    run = RunDir(tmp_path / ("on" if feedback else "off"))
    worker = WorkerHandle([backend], run.worker_log(0), collector="fake_coverage:OpCollector")
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)
    try:
        fuzzer.start()
        while not fuzzer.done():
            fuzzer.step()
        return fuzzer.scheduler.summary(top=8)["op"], fuzzer.stats
    finally:
        fuzzer.close()
        worker.close()


def test_feedback_raises_the_weight_of_the_op_that_pays_and_off_stays_uniform(tmp_path):
    """Only graphs with a Sigmoid reach new (fake) branches: the scheduler must learn it."""
    on, stats_on = _campaign(tmp_path, True, 150)
    weights = dict(on)
    assert max(weights, key=weights.get) == "Sigmoid"
    assert weights["Sigmoid"] > 1.6 * (1 / 8)  # well above a uniform share of the 8 ops
    off, stats_off = _campaign(tmp_path, False, 30)
    assert {round(w, 6) for _, w in off} == {round(1 / 8, 6)}
    assert stats_on.cov_tests / stats_on.tests > stats_off.cov_tests / stats_off.tests


def test_corpus_entries_replay_to_their_stored_bitmaps(tmp_path):
    """A kept test is its graph and seed: re-running them in a fresh worker reaches the same
    branches (python collector over the exporter; ORT itself is not measured)."""
    from nnsmith_cov.campaign.testcase import CaseSettings, run_test
    from nnsmith_cov.campaign.worker_handle import WorkerHandle
    from nnsmith_cov.gen.graph_ir import GraphIR
    from nnsmith_cov.ops import is_op

    folder = tmp_path / "replay"
    assert main(["fuzz", "-o", str(folder), "--tests", "5", *FLAGS]) == 0
    config = json.loads((folder / "config.json").read_text())
    settings = CaseSettings(["ort"], search=config["search"])
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        entries = [(i, r, store.hits(i)) for i, r in store.entries()]
    assert len(entries) >= 2
    worker = WorkerHandle(["ort"], tmp_path / "w.log", collector="python")
    try:
        for _, record, stored in entries:
            again = run_test(worker, GraphIR.from_json(record.graph, known_op=is_op), record.seed, settings)
            assert again.hits is not None and stored is not None
            assert np.array_equal(again.hits.index, stored.index)
    finally:
        worker.close()


def test_a_stored_graph_regrows_from_its_insertion_draws(cfg10):
    import dataclasses

    from nnsmith_cov.campaign.fuzz_loop import _seed_of
    from nnsmith_cov.gen.generator import generate

    parent = generate(dataclasses.replace(cfg10, nodes=4), 21)
    seed = _seed_of(0, parent.record.to_json(), parent.record.draws)
    assert seed.n_ops == len(parent.record.ops) and len(seed.prefix) == parent.record.insert_draws > 0
    child = generate(dataclasses.replace(cfg10, nodes=seed.n_ops + 3), 99, prefix=seed.prefix)
    assert child.record.ops[: seed.n_ops] == parent.record.ops
    assert len(child.record.ops) > seed.n_ops
    assert [i.op for i in parent.graph.insts] != [i.op for i in child.graph.insts]


def test_seed_energy_favours_entries_that_own_rare_branches():
    from nnsmith_cov.corpus.seeds import Seed, SeedPool
    from nnsmith_cov.coverage.covmap import Hits

    pool = SeedPool(16)
    common = np.array([0, 1, 2, 3], np.uint32)
    for i in range(3):
        pool.add(Seed(i, [("op", 0)], 1), Hits(common, np.ones(4, np.uint32)))
    owner = Hits(np.array([0, 9, 10], np.uint32), np.ones(3, np.uint32))  # alone on branches 9 and 10
    pool.add(Seed(3, [("op", 0)], 1), owner)
    pool.add(Seed(4, [], 1), Hits(np.array([11], np.uint32), np.ones(1, np.uint32)))  # no draws: not growable
    assert len(pool) == 4
    energy = pool.energy()
    assert energy.tolist() == pytest.approx([1 / 4 + 1, 1 / 4 + 1, 1 / 4 + 1, 1 / 4 + 2])
    picks = [pool.pick(np.random.default_rng(s)).test_id for s in range(600)]
    assert picks.count(3) > 1.4 * picks.count(0)
