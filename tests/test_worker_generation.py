"""Generation in the worker (`campaign.proposal`): the driver proposes, the worker makes the graph
the driver used to make itself, keeps the test's values and model, and hands them over only for
a test the driver keeps; a worker that replaces a crashed one still holds them."""

from __future__ import annotations

import dataclasses
import json
import os
import signal

import pytest
from campaign_helpers import f32_only, run_to_budget
from worker_faults import FAULT_ENV

from nnsmith_cov.abstract.choice import ReplayDivergence
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.baselines import generate_with
from nnsmith_cov.campaign import fuzz_loop
from nnsmith_cov.campaign.cluster import RayWorkerHandle
from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.proposal import FRESH, config_from_json, config_json, record_from_json, record_json
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings, propose, run_backend
from nnsmith_cov.campaign.worker_handle import WorkerFault, WorkerHandle, recycling
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.feedback import mutate
from nnsmith_cov.feedback.scheduler import Scheduler
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.ops import select_ops

OPS = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"]
SEARCH = {"method": "sampling", "max_iters": 8}


def _ops() -> list:
    return [f32_only(op) for op in select_ops(OPS)]


def _untimed(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("gen_ms", "solve_ms")}


def test_every_seeded_way_makes_in_the_worker_the_graph_the_driver_made(tmp_path, monkeypatch):
    """Each test's graph, made by the worker from the proposal, is the one the driver makes from
    the same calls in this process (a mutant, else the parent grown, else fresh), and so are
    its record and which call gave it; every mutation operator is exercised."""
    real = Scheduler.propose
    asked = [0]

    def seeded(self):  # every test asks for a parent, each mutation operator in turn
        asked[0] += 1
        return dataclasses.replace(real(self), seeded=True, mutation=mutate.ARMS[asked[0] % len(mutate.ARMS)])

    monkeypatch.setattr(Scheduler, "propose", seeded)
    made = []
    proposal_of, generated_of = Fuzzer._proposal, Fuzzer._generated

    def spy_proposal(self, test):
        request = proposal_of(self, test)
        made.append({"seed": test.seed, "calls": list(test.calls), "fresh": test.fresh, "request": request})
        return request

    def spy_generated(self, test, proposed):
        made[-1]["index"], made[-1]["gen"] = proposed.index, proposed.gen
        return generated_of(self, test, proposed)

    monkeypatch.setattr(Fuzzer, "_proposal", spy_proposal)
    monkeypatch.setattr(Fuzzer, "_generated", spy_generated)
    backend = "fake_coverage:SigmoidPays"
    settings = CaseSettings([backend], search=SEARCH, localize=False)
    cfg = FuzzConfig(GenConfig(nodes=3, ops=_ops()), settings, seed=7, max_tests=16, feedback=True)
    run = RunDir(tmp_path / "c")
    worker = WorkerHandle([backend], run.worker_log(0), collector="fake_coverage:OpCollector")
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)
    run_to_budget(fuzzer, worker)
    assert fuzzer.stats.internal_errors == 0 and len(made) == 16
    used = set()
    for m in made:
        index, gen = FRESH, None
        for i, (kind, call) in enumerate(m["calls"]):  # in this process, as the driver did before
            try:
                gen = mutate.make(call, m["seed"])
            except (GenerationError, ReplayDivergence):
                continue
            if gen is not None:
                index = i
                used.add(kind)
                break
        if gen is None:
            gen = generate_with("nnsmith", m["fresh"], m["seed"])
        assert m["index"] == index
        assert m["gen"].graph.to_json() == gen.graph.to_json()
        assert _untimed(m["gen"].record.to_json()) == _untimed(gen.record.to_json())
        assert m["gen"].record.draws == gen.record.draws
    assert used >= {"grow", "op_swap"}, f"too few seeded ways ran: {used}"
    # the kept tests came with their values and model (fetched from the worker)
    with CorpusStore.open(tmp_path / "c" / "lmdb", readonly=True) as store:
        kept = [i for i, _ in store.entries()]
        assert kept and all("model.onnx" in store.blobs(i) and "inputs.npz" in store.blobs(i) for i in kept)


def test_a_worker_killed_while_generating_costs_that_test_only(tmp_path, monkeypatch):
    """No graph came back, so no finding: an internal error of stage generate; the next
    test gets a fresh worker and the campaign runs its budget."""
    monkeypatch.setenv(FAULT_ENV, f"kill:{fuzz_loop.test_seed(5, 1)}")
    backend = "worker_faults:Ort"
    settings = CaseSettings([backend], search=SEARCH, localize=False)
    cfg = FuzzConfig(GenConfig(nodes=3, ops=_ops()), settings, seed=5, max_tests=3, feedback=False)
    run = RunDir(tmp_path / "c")
    worker = WorkerHandle([backend], run.worker_log(0))
    fuzzer = Fuzzer(cfg, run, worker, lambda ev: None, corpus=True)
    try:
        fuzzer.start()
        results = [fuzzer.step() for _ in range(3)]
    finally:
        fuzzer.close()
        worker.close()
    assert results[1] is None and results[0] is not None and results[2] is not None
    st = fuzzer.stats
    assert st.tests == 3 and st.internal_errors == 1 and not st.findings and worker.deaths == 1
    (line,) = [json.loads(x) for x in (tmp_path / "c" / "internal.jsonl").read_text().splitlines()]
    assert line["test"] == 1 and line["stage"] == "generate" and "WorkerDied" in line["signature"]


def test_configs_and_records_cross_as_json_unchanged():
    cfg = GenConfig(nodes=4, ops=_ops(), opsets=(13, 17), opset_weights={13: 1.0, 17: 2.0}, dynamic_prob=0.5)
    back = config_from_json(json.loads(json.dumps(config_json(cfg))))
    assert [(o.name(), o.sigs) for o in back.ops] == [(o.name(), o.sigs) for o in cfg.ops]
    assert back.ops is config_from_json(config_json(cfg)).ops  # decoded once per op set
    # an opset floor raised by learned support (a backend refused an older opset) crosses too
    raised = [type(op.__name__, (op,), {"min_opset_for": {DType.float32: 17}}) for op in cfg.ops]
    floors = config_from_json(config_json(dataclasses.replace(cfg, ops=raised))).ops
    assert all(op.opset_floor(DType.float32) == 17 for op in floors)
    a = generate(cfg, 3)
    record = record_from_json(json.loads(json.dumps(record_json(a.record))))
    assert record.to_json() == a.record.to_json() and record.draws == a.record.draws
    assert generate(back, 3).graph.to_json() == a.graph.to_json()
    # a baseline's record keeps its generator's name and steps (the corpus records them)
    b = generate_with("graphfuzzer", cfg, 3)
    back_b = record_from_json(json.loads(json.dumps(record_json(b.record))))
    assert type(back_b) is type(b.record) and back_b.to_json() == b.record.to_json()
    assert back_b.to_json()["generator"] == "graphfuzzer"


def test_the_worker_holds_the_test_across_its_own_crash_and_only_that_test(tmp_path):
    settings = CaseSettings(["ort"], search=SEARCH)
    cfg = GenConfig(nodes=3, ops=_ops())
    worker = WorkerHandle(["ort"], tmp_path / "w.log")
    try:
        worker.start()
        request = {"kind": "propose", "test": 4, "seed": 11, "generator": "nnsmith", "calls": []}
        proposed = propose(worker, request | {"fresh": config_json(cfg), "search": SEARCH}, settings)
        assert proposed.index == FRESH and proposed.finding is None
        assert proposed.gen.graph.to_json() == generate(cfg, 11).graph.to_json()
        prepared = proposed.prepared
        assert prepared.held and prepared.values == {} and prepared.onnx is None  # not decoded yet
        first = run_backend(worker, prepared, "ort", "opt", 30).msg  # named, not sent
        assert first["kind"] == "outputs"
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()
        worker.close()  # the handle takes note (as after a crash in a call); the next call starts a fresh one
        again = run_backend(worker, prepared, "ort", "opt", 30).msg  # a fresh worker, from what the dead one left
        assert again["kind"] == "outputs" and again["outputs"] == first["outputs"]
        with pytest.raises(WorkerFault, match="test 5 is not held"):
            worker.call({"kind": "run", "backend": "ort", "opt": "opt", "test": 5, "roundtrip": False}, 30)
        prepared.load()  # the reply's copy: no round trip
        assert not prepared.held and prepared.onnx and prepared.values
        assert all(name[0] in "iw" for name in prepared.values)
        sent = run_backend(worker, prepared, "ort", "opt", 30).msg  # the copy sent: the held test's model
        assert sent["kind"] == "outputs" and sent["outputs"] == first["outputs"]
        # A generator that gives up is a clean failure, not a fault (no try to place an operator).
        hopeless = config_json(dataclasses.replace(cfg, max_tries_per_node=0))
        failed = propose(worker, request | {"test": 5, "fresh": hopeless, "search": SEARCH}, settings)
        assert failed.failed and failed.gen is None and failed.error is None
    finally:
        worker.close()


def test_recycling_points_reach_ray_handles_too(tmp_path):
    handle = RayWorkerHandle(["ort"], tmp_path / "w.log")
    recycling(handle, 50, 4096)
    assert (handle.recycle_after, handle.max_rss_mb) == (50, 4096)
