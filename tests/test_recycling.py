"""Worker recycling (--recycle-after, --worker-max-rss-mb): the worker is replaced at the
configured point, and the campaign measures exactly what it measures without recycling."""

from __future__ import annotations

import json

import numpy as np
import pytest
from campaign_helpers import f32_only, run_to_budget

from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import select_ops

SIMPLE_OPS = ["Add", "Mul", "Sub", "Relu", "Sigmoid", "Tanh", "Abs", "Neg"]


def campaign(tmp_path, tests: int, recycle_after: int = 0, max_rss_mb: int = 0, monkeypatch=None):
    """A short ORT campaign measured by the python collector (the exporter's arcs: deterministic
    for a seed); returns the fuzzer, its worker, and the test count at each recycling."""
    gen = GenConfig(nodes=4, ops=[f32_only(op) for op in select_ops(SIMPLE_OPS)])
    settings = CaseSettings(["ort"], timeout_s=60.0, search={"method": "sampling", "max_iters": 8})
    run = RunDir(tmp_path / "run")
    worker = WorkerHandle(["ort"], run.worker_log(0), collector="python", recycle_after=recycle_after)
    worker.max_rss_mb = max_rss_mb
    points: list[int] = []
    recycle = WorkerHandle.recycle

    def noting(self):
        points.append(self.tests)
        recycle(self)

    if monkeypatch is not None:
        monkeypatch.setattr(WorkerHandle, "recycle", noting)
    fuzzer = Fuzzer(FuzzConfig(gen, settings, seed=5, max_tests=tests), run, worker, lambda ev: None, corpus=True)
    run_to_budget(fuzzer, worker)
    return fuzzer, worker, points, run


def outcome(fuzzer, run) -> dict:
    """What a campaign found and kept, without its clock or its resources."""
    stats = json.loads((run.root / "stats.json").read_text())
    for key in ("elapsed_s", "resources", "worker_recycles", "last_unique_s"):
        stats.pop(key)
    stats["coverage"].pop("last_new_s")
    return stats


@pytest.mark.slow
def test_recycling_happens_at_the_configured_point_and_changes_no_result(tmp_path, monkeypatch):
    plain, plain_worker, _, plain_run = campaign(tmp_path / "plain", tests=5)
    cycled, worker, points, run = campaign(tmp_path / "cycled", tests=5, recycle_after=2, monkeypatch=monkeypatch)
    assert points == [2, 2]  # before tests 3 and 5, each after two tests on one worker
    assert worker.recycles == 2 and worker.starts == 3 and worker.deaths == 0
    assert plain_worker.recycles == 0 and plain_worker.starts == 1
    assert cycled.stats.restarts == 0 and cycled.stats.recycles == 2
    assert plain.covmap is not None and cycled.covmap is not None and plain.stats.branches > 100
    assert np.array_equal(plain.covmap.virgin, cycled.covmap.virgin)
    assert outcome(cycled, run) == outcome(plain, plain_run)
    assert json.loads((run.root / "stats.json").read_text())["worker_recycles"] == 2


@pytest.mark.slow
def test_a_worker_past_its_memory_limit_is_replaced_before_the_next_test(tmp_path, monkeypatch):
    _, worker, points, run = campaign(tmp_path, tests=3, max_rss_mb=1, monkeypatch=monkeypatch)
    assert points == [1, 1] and worker.recycles == 2 and worker.deaths == 0  # any worker holds over 1 MiB
    res = json.loads((run.root / "stats.json").read_text())["resources"]
    assert res["disk_mb"] > 0 and res["rss_mb"] > 10 and len(res["worker_rss_mb"]) == 1
