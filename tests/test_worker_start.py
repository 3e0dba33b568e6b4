"""A worker that dies while starting (before its hello) is started again, a few times; what
a worker under a collector that follows a thread loads on that thread."""

from __future__ import annotations

import threading

import fake_coverage
import pytest
from faulty_backends import START_DEATHS_ENV

from nnsmith_cov.campaign.worker import Worker
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


def test_a_backend_that_hangs_or_dies_on_the_warm_up_model_is_left_out_of_warm_ups_alone(tmp_path):
    """Each backend warms up in a call of its own, limited by `warm_up_timeout_s`: one that hangs
    or kills the worker there is dropped from later warm-ups by itself, and the worker that
    serves tests is a fresh one warmed with the rest. Neither is a test's finding."""
    specs = ["faulty_backends:Hang", "ort", "faulty_backends:Segfault"]
    w = WorkerHandle(specs, tmp_path / "w.log", collector="python", warm_up_timeout_s=10)
    try:
        assert w.start()["kind"] == "ready"
        assert w.warm_backends == ["ort"] and w.warm_exports
        assert w.starts == 3 and w.deaths == 0  # one start per backend dropped
        assert w.proc is not None and w.proc.poll() is None
        starts = w.starts
        w.close()
        w.start()  # a later start warms what is left, with no new loss
        assert w.warm_backends == ["ort"] and w.starts == starts + 1 and w.deaths == 0
    finally:
        w.close()


def test_a_backend_that_loads_its_libraries_alone_imports_its_package_natively_after_the_follow():
    """Under a collector that follows a thread (the binary one), the followed import thread loads
    only the libraries of a backend that can (`load_libraries`: TVM), and its package is imported
    on the worker's own thread once the measuring thread is located (Frida made TVM's Python
    import ten times slower). A backend without the method, or whose method fails, is imported
    whole on the followed thread, as before."""
    fake_coverage.EVENTS.clear()
    specs = [f"fake_coverage:{c}" for c in ("LibrariesAlone", "LibrariesFail", "NoLibraries")]
    collector = "fake_coverage:FollowedCollector"
    worker = Worker(specs, emit=lambda _: None, collector=collector, ask=lambda _: {"kind": "attached"})
    assert worker.collector_error is None and set(worker.backends) == set(specs) and not worker.unavailable
    main = threading.current_thread().name
    assert fake_coverage.EVENTS == [
        ("follow", main),
        ("load_libraries", "LibrariesAlone", "nncov-import"),
        ("load_libraries", "LibrariesFail", "nncov-import"),
        ("import", "LibrariesFail", "nncov-import"),
        ("import", "NoLibraries", "nncov-import"),
        ("locate", main),
        ("import", "LibrariesAlone", main),
    ]
