"""Campaigns with their workers on Ray (`--cluster ray`): the same records as local workers, an
actor lost mid-test replaced, a killed driver resumed; without Ray, one line saying how to install it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from campaign_helpers import stored_records

from nnsmith_cov.campaign.cluster import ClusterSpec, parse_cluster
from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore

HERE = Path(__file__).parent
OPS = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"]
BASE = ["--no-support", "--nodes", "3", "--ops", *OPS, "--search", "sampling", "--seed", "5"]
KILL_ENV = "NNSMITH_COV_TEST_KILL_HOST"  # (cluster_backends.KILL_ENV)


def test_cluster_values_parse_and_bad_ones_are_one_line_errors(tmp_path, capsys):
    assert parse_cluster("local") == ClusterSpec("local") and not parse_cluster("local").ray
    assert parse_cluster("ray") == ClusterSpec("ray", None)
    assert parse_cluster("ray:auto") == ClusterSpec("ray", "auto")
    assert parse_cluster("ray://head.lab:10001") == ClusterSpec("ray", "ray://head.lab:10001")
    for bad in ("rayy", "ray://head", "ray://:10001", "ray://h:0", "slurm"):
        with pytest.raises(ValueError, match="unknown cluster"):
            parse_cluster(bad)
    assert main(["fuzz", "-o", str(tmp_path / "x"), "--tests", "1", "--cluster", "ray://nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "unknown cluster" in err[-1] and not (tmp_path / "x").exists()


def test_without_ray_the_cluster_flag_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    argv = ["fuzz", "-o", str(tmp_path / "x"), "--tests", "1", "--cluster", "ray", "--backends", "ort", *BASE]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'nnsmith-cov[ray]'" in err[0]
    assert not (tmp_path / "x").exists()  # refused before anything was written


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray instance of 2 CPUs for this module's campaigns, whose actors import this folder's backends."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'nnsmith-cov[ray]')")
    armed = tmp_path_factory.mktemp("kill") / "armed"
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]), KILL_ENV: str(armed)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    try:
        yield armed
    finally:
        ray.shutdown()


def _campaign(folder: Path, cluster: str, workers: int, extra: list[str]) -> tuple[list, list]:
    argv = ["fuzz", "-o", str(folder), "--cluster", cluster, "--workers", str(workers), *BASE, *extra]
    assert main(argv) == 0
    return stored_records(folder)


@pytest.mark.slow
def test_ray_workers_give_the_records_local_workers_give(ray_cluster, tmp_path):
    # One worker with coverage: every kept entry, its graph and its hits, alike.
    cov = ["--tests", "6", "--backends", "fake_coverage:SigmoidPays", "--collector", "fake_coverage:OpCollector"]
    cov += ["--feedback", "off"]  # (feedback weighs tests' times: its proposals differ run to run)
    local = _campaign(tmp_path / "cov-local", "local", 1, cov)
    assert local[0], "the campaign kept no test: nothing compared"
    assert _campaign(tmp_path / "cov-ray", "ray", 1, cov) == local
    # Two workers and a system under test that crashes, aborts, hangs and miscomputes: the same
    # findings on the same tests (a worker the system under test killed is a finding, not a fault).
    chaos = ["--tests", "10", "--backends", "faulty_backends:Chaos", "--collector", "none", "--no-localize"]
    chaos += ["--timeout-s", "3"]
    local = _campaign(tmp_path / "chaos-local", "local", 2, chaos)
    assert local[1], "no findings: nothing compared"
    assert _campaign(tmp_path / "chaos-ray", "ray", 2, chaos) == local
    stats = json.loads((tmp_path / "chaos-ray" / "stats.json").read_text())
    assert stats["internal_errors"] == 0 and stats["tests"] == 10
    assert any(k.startswith("crash/") for k in stats["findings"]) and stats["worker_restarts"] >= 1


@pytest.mark.slow
def test_an_actor_killed_mid_test_is_replaced_and_the_campaign_completes(ray_cluster, tmp_path):
    ray_cluster.write_text("armed")  # the first compile kills its actor
    folder = tmp_path / "killed"
    argv = ["fuzz", "-o", str(folder), "--cluster", "ray", "--tests", "6", "--backends", "cluster_backends:KillsHost"]
    assert main([*argv, "--collector", "none", *BASE]) == 0
    assert not ray_cluster.exists()  # the kill happened
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["tests"] == 6 and stats["findings"] == {}  # the lost actor is no finding of the system under test
    assert stats["internal_errors"] == 1 and stats["worker_restarts"] >= 1  # ... but the test in flight is lost
    lines = [json.loads(x) for x in (folder / "internal.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["stage"] == "worker"
    assert "Ray actor lost" in json.loads((folder / lines[0]["bundle"] / "meta.json").read_text())["message"]
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == [] and store.counters().tests_run == 6


@pytest.mark.slow
def test_a_driver_killed_with_sigkill_resumes_on_the_cluster(ray_cluster, tmp_path):
    folder = tmp_path / "k"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    argv = ["fuzz", "-o", str(folder), "--cluster", "ray", "--workers", "1", "--time", "1h"]
    argv += ["--backends", "faulty_backends:Perturb", "--collector", "none", *BASE]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nnsmith_cov.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    done, deadline = 0, time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None and done < 2:  # a few commits, then the kill
            if (folder / "lmdb" / "data.mdb").exists():
                with CorpusStore.open(folder / "lmdb", readonly=True) as store:
                    done = store.counters().tests_run
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL and done >= 2, err.decode()[-2000:]
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        done = store.counters().tests_run
        before = [i for i, _ in store.entries(include_finding_only=True)]
    resume = ["fuzz", "--resume", str(folder), "--cluster", "ray", "--tests", str(done + 2)]
    assert main([*resume, "--plugin", "faulty_backends:Perturb"]) == 0
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == [] and store.counters().tests_run == done + 2
        after = [i for i, _ in store.entries(include_finding_only=True)]
    assert after[: len(before)] == before and len(after) > len(before)  # Perturb: every test is a finding
