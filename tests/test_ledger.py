"""The campaign ledger: one commit per finished test, nothing outside LMDB before it, and a
campaign that contains its own errors (internal errors), stops on a breaker, and resumes."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from campaign_helpers import f32_only
from worker_faults import FAULT_ENV

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.campaign import fuzz_loop, ledger
from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.internal import Breaker, BreakerTripped, InternalError, gen_config_from_json, gen_config_json
from nnsmith_cov.campaign.ledger import Finished, Ledger
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.testcase import CaseResult, CaseSettings, Prepared
from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle
from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.feedback.scheduler import Scheduler
from nnsmith_cov.gen.generator import GenConfig, generate
from nnsmith_cov.ops import select_ops
from nnsmith_cov.oracle.finding import Finding

OPS = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"]


def _fuzzer(folder, tests: int, backend: str = "fake_coverage:SigmoidPays", feedback: bool = True) -> Fuzzer:
    ops = [f32_only(op) for op in select_ops(OPS)]
    settings = CaseSettings([backend], search={"method": "sampling", "max_iters": 8}, localize=False)
    cfg = FuzzConfig(GenConfig(nodes=3, ops=ops), settings, seed=5, max_tests=tests, feedback=feedback)
    run = RunDir(folder)
    worker = WorkerHandle([backend], run.worker_log(0), collector="fake_coverage:OpCollector")
    return Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)


def _drive(fuzzer: Fuzzer, resume: bool = False) -> list[str]:
    try:
        repaired = fuzzer.start(resume=resume)
        while not fuzzer.done():
            fuzzer.step()
        fuzzer.write_stats()
        return repaired
    finally:
        fuzzer.close()
        fuzzer.worker.close()


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class _Counted:
    """Faults injected where this process cannot count them (a worker): how many were planned."""

    def __init__(self, raised: int) -> None:
        self.raised = raised


class _EveryThird:
    """Wraps a callable to raise RuntimeError on every third call."""

    def __init__(self, fn, error=RuntimeError):
        self.fn, self.calls, self.raised, self.error = fn, 0, 0, error

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls % 3 == 0:
            self.raised += 1
            raise self.error("injected fault")
        return self.fn(*args, **kwargs)


@pytest.mark.parametrize("stage", ["propose", "generate", "worker", "test", "observe"])
def test_a_fault_in_any_stage_is_an_internal_error_and_the_campaign_runs_its_budget(tmp_path, monkeypatch, stage):
    if stage == "propose":
        fault = _EveryThird(Scheduler.propose)
        monkeypatch.setattr(Scheduler, "propose", lambda self, *a, **k: fault(self, *a, **k))
    elif stage == "generate":  # in the worker, where graphs are made: its every third of the 9
        monkeypatch.setenv(FAULT_ENV, "every3")
        fault = _Counted(3)
    elif stage == "worker":  # the worker's own code failed (search, export): it reports a fault
        fault = _EveryThird(fuzz_loop.run_prepared, lambda m: WorkerFault(f"RuntimeError: {m}\nTraceback: ..."))
        monkeypatch.setattr(fuzz_loop, "run_prepared", fault)
    elif stage == "test":  # the oracle and the rest of the test in this process
        fault = _EveryThird(fuzz_loop.run_prepared)
        monkeypatch.setattr(fuzz_loop, "run_prepared", fault)
    else:
        fault = _EveryThird(Scheduler.observe)
        monkeypatch.setattr(Scheduler, "observe", lambda self, *a, **k: fault(self, *a, **k))
    # feedback off for generation: seeded tests grow their parent through `generate` instead
    backend = "worker_faults:SigmoidPays" if stage == "generate" else "fake_coverage:SigmoidPays"
    fuzzer = _fuzzer(tmp_path / "c", tests=9, backend=backend, feedback=stage != "generate")
    _drive(fuzzer)
    st = fuzzer.stats
    assert st.tests == 9 and fault.raised >= 2
    assert st.internal_errors == fault.raised
    assert not any("internal" in key or "nnsmith-cov" in key for key in st.findings)  # apart from findings
    internal = _lines(tmp_path / "c" / "internal.jsonl")
    assert len(internal) == fault.raised and {x["stage"] for x in internal} == {stage}
    assert not _lines(tmp_path / "c" / "findings.jsonl")
    first = tmp_path / "c" / internal[0]["bundle"]
    meta = json.loads((first / "meta.json").read_text())
    assert meta["stage"] == stage and meta["seed"] == internal[0]["seed"] and "injected fault" in meta["message"]
    assert json.loads((tmp_path / "c" / "stats.json").read_text())["internal_errors"] == fault.raised
    with CorpusStore.open(tmp_path / "c" / "lmdb", readonly=True) as store:
        assert store.check() == []
        assert store.counters().tests_run == 9  # every test committed, internal ones too
    monkeypatch.undo()
    again = _fuzzer(tmp_path / "c", tests=12, backend=backend)
    assert _drive(again, resume=True) == []  # nothing to repair
    assert again.stats.tests == 12 and again.stats.internal_errors == fault.raised  # counted, not lost


def test_a_fault_on_every_call_trips_the_breaker_with_one_line_and_loses_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FAULT_ENV, "always")  # the workers' generator raises (tests/worker_faults.py)
    folder = tmp_path / "c"
    argv = ["fuzz", "-o", str(folder), "--backends", "worker_faults:Ort", "--collector", "none", "--no-support"]
    argv += ["--tests", "50"]
    assert main([*argv, "--nodes", "3", "--ops", *OPS]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # the first error of its kind is announced once, then the breaker's one line ends the run
    last = err.strip().splitlines()[-1]
    assert last.startswith("nnsmith-cov: stopped: 10 of the last 10 tests") and "RuntimeError" in last
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == []
        assert store.counters().tests_run == 10  # the first ten, each committed
    assert len(_lines(folder / "internal.jsonl")) == 10


def test_pytorch_stuck_in_one_call_is_cut_at_the_prepare_deadline_not_the_request_timeout(tmp_path, monkeypatch):
    """A value search that cannot stop (one PyTorch call of 40 s) is cut at the prepare deadline
    (`CaseSettings.prepare_timeout_s`: twice the 5 s search budget plus 5 s, so 15 s) after the
    graph is made, well within the request's 60 s, which it would have outlasted and passed:
    a PyTorch hang at the search, and the campaign goes on."""
    monkeypatch.setenv(FAULT_ENV, "slow_search:40")  # every search sleeps 40 s (tests/worker_faults.py)
    folder = tmp_path / "c"
    argv = ["fuzz", "-o", str(folder), "--backends", "worker_faults:Ort", "--collector", "none", "--no-support"]
    assert main([*argv, "--tests", "2", "--timeout-s", "60", "--nodes", "3", "--ops", *OPS]) == 0
    found = _lines(folder / "findings.jsonl")
    assert [(f["symptom"], f["backend"], f["stage"]) for f in found] == [("hang", "torch", "reference")] * 2
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["tests"] == 2 and stats["worker_restarts"] >= 1


def test_the_breaker_counts_a_window():
    b = Breaker(window=100, max_share=0.2, first=10)
    for k in range(200):  # one in six fails: under the threshold forever
        b.note("x" if k % 6 == 0 else None)
    b = Breaker(window=100, max_share=0.2, first=10)
    for _ in range(15):
        b.note(None)
    with pytest.raises(BreakerTripped, match="21 of the last"):
        for _ in range(21):
            b.note("sig")
    b = Breaker(first=10)
    with pytest.raises(BreakerTripped, match="10 of the last 10"):
        for _ in range(10):
            b.note("sig")


def test_an_internal_generation_error_replays_alone(tmp_path, monkeypatch, capsys):
    """The record of an internal error holds what re-runs its generation exactly: with the
    fault in place the same signature shows again (exit 0), without it the steps run clean."""
    from nnsmith_cov.gen import generator

    bad_seed = fuzz_loop.test_seed(5, 1)  # test 1 of the campaign below
    real = generator._generate

    def flaky(cfg, seed, *args, **kwargs):
        if seed == bad_seed:
            raise ZeroDivisionError("injected")
        return real(cfg, seed, *args, **kwargs)

    monkeypatch.setattr(generator, "_generate", flaky)  # for the repro, in this process
    monkeypatch.setenv(FAULT_ENV, f"seed:{bad_seed}")  # for the campaign's worker
    _drive(_fuzzer(tmp_path / "c", tests=3, backend="worker_faults:SigmoidPays"))
    (line,) = _lines(tmp_path / "c" / "internal.jsonl")
    assert line["seed"] == bad_seed and line["test"] == 1
    assert line["signature"] == "internal/generate: ZeroDivisionError at gen/generator.py:generate"
    bundle = tmp_path / "c" / line["bundle"]
    assert main(["repro", str(bundle)]) == 0
    assert "reproduces" in capsys.readouterr().out
    monkeypatch.undo()
    assert main(["repro", str(bundle)]) == 1
    assert "does not reproduce" in capsys.readouterr().out


def test_gen_config_round_trips_with_narrowed_signatures():
    ops = [f32_only(op) for op in select_ops(OPS)]
    cfg = GenConfig(nodes=5, ops=ops, opsets=(13, 17), opset_weights={13: 0.5, 17: 2.0}, dynamic_prob=0.5)
    back = gen_config_from_json(json.loads(json.dumps(gen_config_json(cfg))))
    assert [(o.name(), o.sigs) for o in back.ops] == [(o.name(), o.sigs) for o in cfg.ops]
    a, b = generate(cfg, 11), generate(back, 11)
    assert a.graph.to_json() == b.graph.to_json()
    with pytest.raises(ValueError, match="no operator"):
        gen_config_from_json(gen_config_json(cfg) | {"ops": {"NoSuchOp": []}})
    # an opset floor raised by learned support is part of the config: an internal error's replay needs it
    raised = [type(op.__name__, (op,), {"min_opset_for": {DType.float32: 17}}) for op in ops]
    back = gen_config_from_json(json.loads(json.dumps(gen_config_json(dataclasses.replace(cfg, ops=raised)))))
    assert all(op.opset_floor(DType.float32) == 17 for op in back.ops)
    # a config written before floors were recorded keeps each op's own
    old = gen_config_json(cfg)
    del old["op_opset_floors"]
    assert [o.min_opset_for for o in gen_config_from_json(old).ops] == [o.min_opset_for for o in ops]


def _graph_and_result(status: str, backends_run: int, findings: list[Finding]):
    gen = generate(GenConfig(nodes=2, ops=[f32_only(op) for op in select_ops(["Add", "Relu"])]), 3)
    prepared = Prepared(gen.graph, 3, {}, None, None if backends_run == 0 else b"onnx", None)
    return gen, CaseResult(status, prepared, findings, backends_run=backends_run)


def _ledger(tmp_path) -> Ledger:
    run = RunDir(tmp_path / "run")
    run.create({})
    return Ledger(run, RunStats(), lambda ev: None)


def test_a_test_counts_as_executed_only_when_a_backend_ran(tmp_path):
    """The one rule for fuzz and replay (both commit through the ledger): an export-stage
    finding never reached a backend."""
    led = _ledger(tmp_path)
    export = Finding("crash", "torch", "export", "-", "torch/export: E", "E")
    gen, result = _graph_and_result("finding", 0, [export])
    led.commit(Finished(0, 3, result, gen.graph), None)
    assert led.stats.executed == 0 and led.stats.findings == {"crash/export/torch": 1}
    gen, result = _graph_and_result("pass", 1, [])
    led.commit(Finished(1, 3, result, gen.graph), None)
    assert led.stats.executed == 1 and led.stats.passed == 1


class _Killed(BaseException):
    """Stands for the process dying at one instant."""


@pytest.mark.parametrize("when", ["before-commit", "after-commit"])
def test_a_kill_around_the_commit_leaves_files_that_resume_reconciles(tmp_path, monkeypatch, when):
    """Findings' bundles are staged, committed with the test, then published: killed before
    the commit, the test leaves nothing a resume keeps; killed after, a resume publishes it."""
    folder = tmp_path / "c"
    first = _fuzzer(folder, tests=2, backend="faulty_backends:Perturb")
    _drive(first)
    assert len(_lines(folder / "findings.jsonl")) == 2
    if when == "before-commit":
        monkeypatch.setattr(CorpusStore, "commit", lambda *a, **k: (_ for _ in ()).throw(_Killed()))
    else:
        monkeypatch.setattr(ledger, "_publish", lambda *a: (_ for _ in ()).throw(_Killed()))
    killed = _fuzzer(folder, tests=3, backend="faulty_backends:Perturb")
    with pytest.raises(_Killed):
        _drive(killed, resume=True)
    staged = list((folder / "findings" / ".staged").glob("*/*"))
    monkeypatch.undo()
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        committed = store.counters().tests_run
    assert committed == (2 if when == "before-commit" else 3)
    resumed = _fuzzer(folder, tests=3 if when == "after-commit" else 2, backend="faulty_backends:Perturb")
    repaired = _drive(resumed, resume=True)
    assert not (folder / "findings" / ".staged").exists()
    lines = _lines(folder / "findings.jsonl")
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        stored = [h for _, h in store.findings()]
        assert store.check() == []
    assert sorted(json.dumps(x, sort_keys=True) for x in lines) == sorted(json.dumps(x, sort_keys=True) for x in stored)
    bundles = {x["bundle"] for x in lines if x["new"]}
    assert all((folder / b / "meta.json").is_file() for b in bundles)
    on_disk = {str(p.relative_to(folder)) for p in (folder / "findings").iterdir() if p.is_dir()}
    assert on_disk == bundles  # no orphan bundle, none missing
    if when == "after-commit" and staged:
        assert any("published" in r for r in repaired)
    if when == "before-commit" and staged:
        assert any("dropped" in r for r in repaired)
    np.testing.assert_equal(len(lines), len(stored))


def test_project_frames_and_signature_name_the_innermost_frame_of_ours():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/nnsmith_cov/campaign/worker.py", line 10, in serve\n'
        '  File "/x/nnsmith_cov/search/gradient.py", line 99, in search_values\n'
        '  File "/usr/lib/python3/torch/nn.py", line 5, in forward\n'
        "RuntimeError: boom"
    )
    e = InternalError.from_worker("worker", "RuntimeError: boom\n" + text)
    assert e.frames[0] == "nnsmith_cov/search/gradient.py:99 in search_values"
    assert e.signature == "internal/worker: RuntimeError at search/gradient.py:search_values"


def test_sigterm_ends_a_campaign_cleanly_and_it_resumes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    folder = tmp_path / "c"
    argv = ["fuzz", "-o", str(folder), "--backends", "ort", "--collector", "none", "--no-support", "--time", "10m"]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "nnsmith_cov.cli", *argv, "--nodes", "3", "--ops", *OPS], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (folder / "lmdb" / "data.mdb").exists():
            with CorpusStore.open(folder / "lmdb", readonly=True) as store:
                if store.counters().tests_run >= 2:
                    break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130  # as for Ctrl-C: interrupted, not killed
    stats = json.loads((folder / "stats.json").read_text())
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == []
        assert store.counters().tests_run == stats["tests"] >= 2  # nothing started was left uncounted
    assert main(["fuzz", "--resume", str(folder), "--tests", str(stats["tests"] + 2)]) == 0
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == [] and store.counters().tests_run == stats["tests"] + 2
