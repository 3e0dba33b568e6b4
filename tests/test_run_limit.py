"""The calibrated limit of a backend run under a collector: what it is, and that a run past it is
re-run natively with the whole timeout, judged as before."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from nnsmith_cov.campaign.protocol import encode_arrays
from nnsmith_cov.campaign.run_limit import FLOOR_S, MIN_RUNS, SLOWEST_FACTOR, WINDOW, RunLimits
from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.status import result_rows
from nnsmith_cov.campaign.testcase import CaseResult, CaseSettings, Prepared, run_backends
from nnsmith_cov.campaign.worker_handle import Reply
from nnsmith_cov.cli import main
from nnsmith_cov.gen.graph_ir import GraphIR

FULL = 60.0


def test_the_whole_timeout_until_enough_runs_have_finished() -> None:
    limits = RunLimits()
    assert limits.limit("ort", FULL) == FULL
    for _ in range(MIN_RUNS - 1):
        limits.record("ort", 0.5)
    assert limits.limit("ort", FULL) == FULL
    limits.record("ort", 0.5)
    assert limits.limit("ort", FULL) == FLOOR_S  # 3 x 0.5 s is below the floor
    assert limits.limit("tvm", FULL) == FULL  # per backend


def test_the_limit_follows_the_slowest_recent_run_within_the_timeout() -> None:
    limits = RunLimits()
    for _ in range(MIN_RUNS):
        limits.record("tvm", 2.0)
    limits.record("tvm", 8.0)
    assert limits.limit("tvm", FULL) == SLOWEST_FACTOR * 8.0
    limits.record("tvm", 30.0)
    assert limits.limit("tvm", FULL) == FULL  # 90 s: capped at the timeout
    assert limits.limits(FULL) == {"tvm": FULL}
    for _ in range(WINDOW):  # the slow runs leave the window
        limits.record("tvm", 2.0)
    assert limits.limit("tvm", FULL) == FLOOR_S


def test_full_keeps_the_whole_timeout() -> None:
    limits = RunLimits(calibrate=False)
    for _ in range(MIN_RUNS):
        limits.record("ort", 0.1)
    assert limits.limit("ort", FULL) == FULL


class _Worker:
    """A worker under a collector whose runs take the seconds given, in turn (none are slept):
    a run longer than the limit it is given times out, as `WorkerHandle.call` does."""

    collector = "binary"

    def __init__(self, outputs: dict[str, np.ndarray], measured: list[float], native: float = 0.2) -> None:
        self.outputs, self.measured, self.native = outputs, list(measured), native
        self.calls: list[tuple[bool, float]] = []  # (native, timeout) per run

    def call(self, request: dict[str, Any], timeout_s: float) -> Reply:
        native = bool(request.get("native"))
        self.calls.append((native, timeout_s))
        took = self.native if native else self.measured.pop(0)
        if took > timeout_s:
            return Reply(None, "compile", hung=True, elapsed_ms=timeout_s * 1e3)
        return Reply({"kind": "result", "outputs": encode_arrays(self.outputs)}, "execute", elapsed_ms=took * 1e3)


def _result(oracle: dict[str, np.ndarray]) -> CaseResult:
    prepared = Prepared(GraphIR([], [], [], []), 0, {"i0": np.zeros(2, np.float32)}, oracle, b"onnx", None)
    return CaseResult("pass", prepared)


def test_a_run_past_the_calibrated_limit_is_run_natively_with_the_whole_timeout() -> None:
    oracle = {"o0": np.ones(2, np.float32)}
    settings = CaseSettings(["ort"], timeout_s=FULL)
    limits = RunLimits()
    worker = _Worker(oracle, [0.4] * MIN_RUNS + [45.0, 0.4])
    for _ in range(MIN_RUNS):
        assert run_backends(worker, _result(oracle), settings, limits=limits).status == "pass"  # type: ignore[arg-type]
    assert {t for _, t in worker.calls} == {FULL}
    # 45 s under the collector: past the calibrated 10 s, so killed there and run natively
    slow = run_backends(worker, _result(oracle), settings, limits=limits)  # type: ignore[arg-type]
    assert worker.calls[MIN_RUNS:] == [(False, FLOOR_S), (True, FULL)]
    assert slow.status == "pass" and slow.slow == ["ort"] and not slow.findings
    # the killed run is not a finished one: the limit stays where the finished runs put it
    assert limits.limit("ort", FULL) == FLOOR_S
    run_backends(worker, _result(oracle), settings, limits=limits)  # type: ignore[arg-type]
    assert worker.calls[-1] == (False, FLOOR_S)


def test_without_a_collector_every_run_has_the_whole_timeout() -> None:
    oracle = {"o0": np.ones(2, np.float32)}
    limits = RunLimits()
    worker = _Worker(oracle, [0.1] * (MIN_RUNS + 1))
    worker.collector = ""
    for _ in range(MIN_RUNS + 1):
        run_backends(worker, _result(oracle), CaseSettings(["ort"], timeout_s=FULL), limits=limits)  # type: ignore[arg-type]
    assert {t for _, t in worker.calls} == {FULL} and limits.limits(FULL) == {}


def test_the_status_shows_each_backends_limit() -> None:
    assert "run limit" not in dict(result_rows(RunStats(), 1.0))  # no collector, or no run yet
    st = RunStats(run_limits={"tvm": 60.0, "ort": 10.0})
    assert dict(result_rows(st, 1.0))["run limit"] == "ort 10 s, tvm 60 s"


def test_fuzz_shows_each_backends_limit_and_full_keeps_the_timeout(tmp_path) -> None:
    base = ["--tests", str(MIN_RUNS + 2), "--backends", "ort", "--collector", "fake_coverage:OpCollector"]
    base += ["--no-support", "--nodes", "3", "--ops", "Add", "Relu", "--search", "sampling", "--seed", "1"]
    base += ["--gen-process", "off"]
    for mode, expect in (("auto", FLOOR_S), ("full", FULL)):
        folder = tmp_path / mode
        assert main(["fuzz", "-o", str(folder), *base, "--coverage-timeout", mode]) == 0
        stats = json.loads((folder / "stats.json").read_text())
        assert stats["executed"] >= MIN_RUNS + 1
        assert stats["coverage_run_limit_s"] == {"ort": expect}
