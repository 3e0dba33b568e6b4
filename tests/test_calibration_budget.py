"""A worker's calibration reruns stay within its share of its other busy time (`--calibration-share`)."""

from __future__ import annotations

import numpy as np
from fake_coverage import FLAKY

from nnsmith_cov.campaign.worker import CALIBRATION_SHARE, Worker
from nnsmith_cov.coverage.covmap import Hits


def _first_run(collector) -> dict:  # noqa: ANN001
    collector.start()
    return {"hits": collector.stop().to_wire()}


def test_a_worker_reruns_unseen_blocks_only_while_its_calibration_budget_lasts() -> None:
    worker = Worker([], emit=lambda _: None, collector="fake_coverage:FlakyCollector")
    runs = []
    once = lambda: runs.append(1)  # noqa: E731

    worker.busy_s, worker.calibration_s = 10.0, 0.0  # nothing spent: the run is calibrated
    reply = _first_run(worker.collector)
    assert worker._calibrate(reply, once, "a", "") > 0 and runs == [1]
    assert reply["calibration"]["reran"] and np.frombuffer(reply["unstable"], "<u4").tolist() == [FLAKY]
    assert worker.calibration_s > 0

    # Reruns took more than the share of the rest: the next run is reported uncalibrated.
    worker.busy_s, worker.calibration_s = 10.0, 10.0 * CALIBRATION_SHARE / (1 + CALIBRATION_SHARE) + 0.01
    reply = _first_run(worker.collector)
    assert worker._calibrate(reply, once, "b", "") == 0.0 and runs == [1]
    assert not reply["calibration"]["reran"] and "unstable" not in reply
    assert Hits.from_wire(reply["hits"]).index.tolist()  # the first run's hits stay whole

    # Just within the share: calibrated again.
    worker.busy_s, worker.calibration_s = 10.0, 10.0 * CALIBRATION_SHARE / (1 + CALIBRATION_SHARE) - 0.01
    reply = _first_run(worker.collector)
    assert worker._calibrate(reply, once, "c", "") > 0 and runs == [1, 1]


def test_a_share_of_zero_never_reruns_and_an_infinite_one_always_does() -> None:
    runs = []
    once = lambda: runs.append(1)  # noqa: E731
    never = Worker([], emit=lambda _: None, collector="fake_coverage:FlakyCollector", calibration_share=0.0)
    never.busy_s = never.calibration_s = 0.0  # the first request: no time spent at all
    reply = _first_run(never.collector)
    assert never._calibrate(reply, once, "a", "") == 0.0 and runs == []
    assert not reply["calibration"]["reran"]

    always = Worker([], emit=lambda _: None, collector="fake_coverage:FlakyCollector", calibration_share=float("inf"))
    for busy, spent in ((0.0, 0.0), (10.0, 9.9)):  # the first request, then nearly all time in reruns
        always.busy_s, always.calibration_s = busy, spent
        reply = _first_run(always.collector)
        assert always._calibrate(reply, once, f"b{busy}", "") > 0 and reply["calibration"]["reran"]
    assert runs == [1, 1]
