"""Fault injection: systems under test that crash, hang, exhaust memory, flood stderr or answer
wrongly; a campaign killed with SIGKILL over and over; a disk that fills. After each, the
campaign goes on or resumes, the corpus checks clean, and findings.jsonl and the bundles agree
with it: nothing committed is lost."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore

HERE = Path(__file__).parent
OPS = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"]
CHAOS = "faulty_backends:Chaos"
PERTURB = "faulty_backends:Perturb"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def assert_files_agree_with_corpus(folder: Path) -> None:
    """The corpus is whole, findings.jsonl holds exactly its finding lines, and the bundles on
    disk are exactly those of the lines that were new."""
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == []
        stored = [h for _, h in store.findings() if h["symptom"] != "internal"]
    lines = _lines(folder / "findings.jsonl")
    canon = lambda xs: sorted(json.dumps(x, sort_keys=True) for x in xs)
    assert canon(lines) == canon(stored)
    bundles = {x["bundle"] for x in lines if x["new"]}
    on_disk = {str(p.relative_to(folder)) for p in (folder / "findings").iterdir() if p.is_dir()}
    assert on_disk == bundles
    assert all((folder / b / "meta.json").is_file() for b in bundles)


@pytest.mark.slow
def test_a_chaotic_system_under_test_costs_only_findings(tmp_path):
    """Every misbehaviour of `Chaos` is a finding of its own kind, the campaign runs its whole
    budget without one internal error, and it resumes."""
    folder = tmp_path / "c"
    argv = ["fuzz", "-o", str(folder), "--backends", CHAOS, "--collector", "none", "--no-support", "--tests", "40"]
    argv += ["--nodes", "3", "--ops", *OPS, "--search", "sampling", "--timeout-s", "8", "--worker-mem-mb", "4096"]
    assert main(argv) == 0
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["tests"] == 40 and stats["internal_errors"] == 0
    kinds = {key.split("/")[0] for key in stats["findings"]}
    assert {"crash", "hang", "inconsistency", "oom"} <= kinds, stats["findings"]
    assert stats["worker_restarts"] >= 1  # segfaults, aborts and hangs each cost a worker
    assert_files_agree_with_corpus(folder)
    assert main(["fuzz", "--resume", str(folder), "--tests", "44", "--plugin", CHAOS]) == 0
    assert json.loads((folder / "stats.json").read_text())["tests"] == 44
    assert_files_agree_with_corpus(folder)


@pytest.mark.slow
def test_twenty_kills_at_random_instants_lose_nothing_committed(tmp_path):
    """SIGKILL the campaign (its worker exits on EOF) at seeded random moments after it has made
    progress, twenty times, resuming each time: the corpus always checks clean, committed tests
    stay as they were, and after a last resume the files beside the corpus agree with it."""
    folder = tmp_path / "k"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    first = ["fuzz", "-o", str(folder), "--backends", PERTURB, "--collector", "none", "--no-support", "--time", "1h"]
    first += ["--nodes", "3", "--seed", "4", "--ops", *OPS, "--search", "sampling"]
    rng = random.Random(20261125)
    seen_ids: list[int] = []
    done = 0
    for trial in range(20):
        argv = first if trial == 0 else ["fuzz", "--resume", str(folder), "--plugin", PERTURB]
        proc = subprocess.Popen(
            [sys.executable, "-m", "nnsmith_cov.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:  # wait for this process's first commit
            if (folder / "lmdb" / "data.mdb").exists():
                with CorpusStore.open(folder / "lmdb", readonly=True) as store:
                    if store.counters().tests_run > done:
                        break
            time.sleep(0.1)
        time.sleep(rng.uniform(0.0, 2.0))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        with CorpusStore.open(folder / "lmdb", readonly=True) as store:
            assert store.check() == []
            done = store.counters().tests_run
            ids = [i for i, _ in store.entries(include_finding_only=True)]
        assert ids[: len(seen_ids)] == seen_ids  # nothing committed was lost or rewritten
        seen_ids = ids
    assert done >= 20  # every run made progress before it was killed
    assert main(["fuzz", "--resume", str(folder), "--tests", str(done + 3), "--plugin", PERTURB]) == 0
    assert_files_agree_with_corpus(folder)
    assert not (folder / "findings" / ".staged").exists()


def _small_disk(path: Path, mb: int) -> bool:
    path.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={mb}m", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.slow
def test_a_full_disk_stops_the_campaign_in_one_line_and_it_resumes_once_there_is_room(tmp_path, capsys):
    disk = tmp_path / "disk"
    if not _small_disk(disk, 3):
        pytest.skip("cannot mount a small tmpfs here (needs root and mount)")
    try:
        folder = disk / "c"
        argv = ["fuzz", "-o", str(folder), "--backends", PERTURB, "--collector", "none", "--no-support"]
        argv += ["--tests", "100000", "--nodes", "3", "--ops", *OPS, "--search", "sampling"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("nnsmith-cov: error: campaign stopped") and "Traceback" not in "".join(err)
        with CorpusStore.open(folder / "lmdb", readonly=True) as store:
            assert store.check() == []
            done = store.counters().tests_run
        assert done >= 1
        moved = tmp_path / "moved"
        shutil.copytree(folder, moved)  # room again: the same campaign, elsewhere
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    assert main(["fuzz", "--resume", str(moved), "--tests", str(done + 2), "--plugin", PERTURB]) == 0
    assert_files_agree_with_corpus(moved)
