"""A worker that dies while starting (before its hello) is started again, a few times."""

from __future__ import annotations

import pytest
from faulty_backends import START_DEATHS_ENV

from nnsmith_cov.campaign.worker_handle import START_TRIES, WorkerHandle, WorkerStartError

SPEC = "faulty_backends:DiesWhileStarting"


def test_a_start_that_dies_is_tried_again_and_costs_no_test(tmp_path, monkeypatch):
    (tmp_path / "deaths").mkdir()
    monkeypatch.setenv(START_DEATHS_ENV, f"{tmp_path / 'deaths'}:2")
    w = WorkerHandle([SPEC], tmp_path / "w.log")
    try:
        hello = w.start()
        assert hello["kind"] == "ready" and SPEC in hello["versions"] and not hello["unavailable"]
        assert w.start_retries == 2 and w.deaths == 0 and w.starts == 3  # no test's finding, no restart
        assert len(list((tmp_path / "deaths").iterdir())) == 2
    finally:
        w.close()


def test_a_worker_that_always_dies_while_starting_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "deaths").mkdir()
    monkeypatch.setenv(START_DEATHS_ENV, f"{tmp_path / 'deaths'}:99")
    w = WorkerHandle([SPEC], tmp_path / "w.log")
    with pytest.raises(WorkerStartError) as e:
        w.start()
    assert f"(started {START_TRIES} times)" in str(e.value) and "SIGSEGV" in str(e.value)
    assert "\n" not in str(e.value) and len(list((tmp_path / "deaths").iterdir())) == START_TRIES
