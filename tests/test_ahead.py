"""Generation ahead (`campaign.ahead`): a backend-less worker makes the graphs of tests k+1 and k+2
while the test's worker runs test k; the graphs are the ones the test's worker would have made,
and a generator that dies costs its test only."""

from __future__ import annotations

import json

from campaign_helpers import f32_only
from worker_faults import FAULT_ENV

from nnsmith_cov.campaign import fuzz_loop
from nnsmith_cov.campaign.ahead import Generator, generators_fit
from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import select_ops

OPS = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"]
SEARCH = {"method": "sampling", "max_iters": 8}


def _campaign(folder, backend: str, tests: int, ahead: bool, monkeypatch, seed: int = 5):
    """Run `tests` tests with feedback off; per test number, its graph (None: no graph) and
    the draws that made it; the fuzzer, the worker and the generator (or None)."""
    made: dict[int, tuple] = {}
    real = Fuzzer._generated

    def spy(self, test, proposed):
        gen = real(self, test, proposed)
        made[test.k] = None if gen is None else (json.dumps(gen.graph.to_json(), sort_keys=True), gen.record.draws)
        return gen

    monkeypatch.setattr(Fuzzer, "_generated", spy)
    settings = CaseSettings([backend], search=SEARCH, localize=False)
    ops = [f32_only(op) for op in select_ops(OPS)]
    cfg = FuzzConfig(GenConfig(nodes=4, ops=ops), settings, seed=seed, max_tests=tests, feedback=False)
    run = RunDir(folder)
    worker = WorkerHandle([backend], run.worker_log(0))
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)
    generator = Generator(run.generator_log(0), [backend]) if ahead else None
    results = []
    try:
        fuzzer.start()
        if generator is not None:
            fuzzer.generate_ahead(worker, generator)
        while not fuzzer.done() or fuzzer.has_ahead(worker):
            results.append(fuzzer.step())
    finally:
        fuzzer.close()
        worker.close()
    return made, results, fuzzer, worker, generator


def test_graphs_made_ahead_are_the_graphs_the_worker_makes(tmp_path, monkeypatch):
    """Test for test, the same graph and draws whether the test's worker made it or the
    generator made it ahead; every test after the first was made ahead."""
    backend = "fake_coverage:SigmoidPays"
    alone, _, _, _, _ = _campaign(tmp_path / "alone", backend, 8, False, monkeypatch)
    ahead, results, fuzzer, worker, generator = _campaign(tmp_path / "ahead", backend, 8, True, monkeypatch)
    assert sorted(alone) == list(range(8)) and all(v is not None for v in alone.values())
    assert ahead == alone
    assert generator is not None and generator.handle.tests == 7  # tests 1-7: "generate" requests
    assert fuzzer.stats.tests == 8 and fuzzer.stats.internal_errors == 0 and all(r is not None for r in results)
    # the worker's round trip holds its search and export: a graph made elsewhere is not taken off it
    assert all(r.ms["prepare"] >= r.ms["search"] + r.ms["export"] for r in results if "export" in r.ms)
    assert worker.deaths == 0 and generator.deaths == 0


def test_a_generator_killed_while_generating_costs_that_test_only(tmp_path, monkeypatch):
    """The generator dies making test 2's graph (while the worker runs test 0 or 1): test 2 is
    an internal error of stage generate, as a worker's death there is; the generator is
    replaced (test 3's graph, taken ahead after it, is made by the new one) and the campaign
    runs its budget, the test's worker untouched."""
    monkeypatch.setenv(FAULT_ENV, f"kill:{fuzz_loop.test_seed(5, 2)}")  # read by the plug-in (tests/worker_faults.py)
    _, results, fuzzer, worker, generator = _campaign(tmp_path / "c", "worker_faults:Ort", 5, True, monkeypatch)
    assert [r is None for r in results] == [False, False, True, False, False]
    st = fuzzer.stats
    assert st.tests == 5 and st.internal_errors == 1 and not st.findings
    assert generator is not None and generator.deaths == 1 and worker.deaths == 0
    (line,) = [json.loads(x) for x in (tmp_path / "c" / "internal.jsonl").read_text().splitlines()]
    assert line["test"] == 2 and line["stage"] == "generate" and "WorkerDied" in line["signature"]


def test_a_stopped_campaign_runs_the_tests_it_took_ahead_and_takes_no_more(tmp_path):
    """`run_workers` stopped (a signal) after three tests: the fourth and the fifth, taken
    ahead, still run, and nothing more is taken, though the budget is far from spent."""
    import threading

    backend = "fake_coverage:SigmoidPays"
    settings = CaseSettings([backend], search=SEARCH, localize=False)
    ops = [f32_only(op) for op in select_ops(OPS)]
    cfg = FuzzConfig(GenConfig(nodes=3, ops=ops), settings, seed=3, max_tests=1000, feedback=False)
    run = RunDir(tmp_path / "c")
    worker = WorkerHandle([backend], run.worker_log(0))
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)
    stop, steps = threading.Event(), []

    def on_step() -> None:
        steps.append(1)
        if len(steps) == 3:
            stop.set()

    try:
        fuzzer.start()
        fuzzer.generate_ahead(worker, Generator(run.generator_log(0), [backend]))
        fuzzer.run_workers([], on_step, stop)
    finally:
        fuzzer.close()
        worker.close()
    assert len(steps) == 5 and fuzzer.stats.tests == 5 and fuzzer.stats.executed == 5


def test_generators_fit_where_each_worker_has_a_core_for_one():
    assert generators_fit(1, 2) and generators_fit(2, 4)
    assert not generators_fit(1, 1) and not generators_fit(2, 3)


def test_fuzz_with_a_generator_runs_every_test_it_took(tmp_path):
    """`fuzz --gen-process on` to a time budget: the test taken ahead when time runs out is run
    too, so every numbered test is accounted for; the generator's log sits beside the worker's."""
    folder = tmp_path / "c"
    argv = ["fuzz", "-o", str(folder), "--time", "8s", "--backends", "fake_coverage:SigmoidPays", "--no-support"]
    argv += ["--nodes", "3", "--ops", *OPS, "--search", "sampling", "--seed", "2", "--gen-process", "on"]
    assert main(argv) == 0
    stats = json.loads((folder / "stats.json").read_text())
    accounted = stats["executed"] + stats["no_values"] + stats["generation_failed"] + stats["internal_errors"]
    assert stats["tests"] >= 2 and stats["tests"] == accounted
    assert (folder / "workers" / "g0.log").exists()


def test_gen_process_takes_auto_on_or_off_only(tmp_path, capsys):
    argv = ["fuzz", "-o", str(tmp_path / "c"), "--tests", "1", "--backends", "ort", "--gen-process", "sometimes"]
    assert main(argv) != 0
    assert "--gen-process" in capsys.readouterr().err


def test_a_call_whose_meanwhile_raises_leaves_no_reply_for_the_next_call(tmp_path):
    """The next test is proposed in `meanwhile`, while the worker answers: if that raises, the
    worker's answer must not be read as the next call's. The worker is dropped, the error
    goes up, and the next call gets a fresh worker and its own reply."""
    worker = WorkerHandle([], tmp_path / "w.log")
    try:
        first_pid = worker.start()["pid"]

        def broken() -> None:
            raise RuntimeError("the proposal failed")

        warm = {"kind": "warm_up", "backends": []}
        try:
            worker.call(warm, 60, broken)
        except RuntimeError as e:
            assert str(e) == "the proposal failed"
        else:
            raise AssertionError("meanwhile's error was swallowed")
        reply = worker.call(warm, 60)
        assert reply.msg is not None and reply.msg["kind"] == "warm" and worker.ready["pid"] != first_pid
    finally:
        worker.close()


def test_a_test_applied_beside_the_next_is_applied_in_order_and_charged_its_own_errors(tmp_path, monkeypatch):
    """With a generator, `run_workers` hands the worker its next test before the last one is
    applied (`_finish` runs beside it). The scheduler still observes every test once, in test
    order, and an error of ours while applying test 2 is test 2's internal error (stage
    observe), not test 3's, which runs and is kept as any other."""
    import threading

    from nnsmith_cov.feedback.scheduler import Scheduler

    observed: list[int] = []
    real_observe, real_finish = Scheduler.observe, Fuzzer._finish

    def observe(self, proposal, record, novelty, *args, **kwargs):
        observed.append(record.seed)
        return real_observe(self, proposal, record, novelty, *args, **kwargs)

    def finish(self, test, gen, result, seconds):
        if test.k == 2:
            raise KeyError("applying test 2")
        return real_finish(self, test, gen, result, seconds)

    monkeypatch.setattr(Scheduler, "observe", observe)
    monkeypatch.setattr(Fuzzer, "_finish", finish)
    backend = "fake_coverage:SigmoidPays"
    settings = CaseSettings([backend], search=SEARCH, localize=False)
    ops = [f32_only(op) for op in select_ops(OPS)]
    cfg = FuzzConfig(GenConfig(nodes=3, ops=ops), settings, seed=4, max_tests=7)
    run = RunDir(tmp_path / "c")
    worker = WorkerHandle([backend], run.worker_log(0))
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)
    try:
        fuzzer.start()
        fuzzer.generate_ahead(worker, Generator(run.generator_log(0), [backend]))
        fuzzer.run_workers([], lambda: None, threading.Event())
    finally:
        fuzzer.close()
        worker.close()
    assert observed == [fuzz_loop.test_seed(4, k) for k in range(7) if k != 2]
    st = fuzzer.stats
    assert st.tests == 7 and st.executed == 6 and st.internal_errors == 1  # test 2 counts as its error
    (line,) = [json.loads(x) for x in (tmp_path / "c" / "internal.jsonl").read_text().splitlines()]
    assert line["test"] == 2 and line["stage"] == "observe" and "KeyError" in line["signature"]
    with CorpusStore.open(tmp_path / "c" / "lmdb", readonly=True) as store:
        assert store.counters().tests_run == 7  # every test committed once, test 2 as its error
