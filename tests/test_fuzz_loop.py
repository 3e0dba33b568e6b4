"""The unguided loop end to end with faulty backends: findings are caught, bundled, deduplicated,
and the loop survives deaths and hangs of its worker."""

from __future__ import annotations

import json

import numpy as np
import pytest
from campaign_helpers import f32_only, run_to_budget, stored_records

from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.ledger import Ledger
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.cli import main
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import select_ops

# Cheap to search and export, and on float32 accepted by ORT: failures are the fakes' alone.
SIMPLE_OPS = ["Add", "Mul", "Sub", "Relu", "Sigmoid", "Tanh", "Abs", "Neg"]


def _fuzz(tmp_path, backend: str, tests: int, timeout_s: float = 60.0, collector: str = "", roundtrip: float = 0.0):
    gen = GenConfig(nodes=4, ops=[f32_only(op) for op in select_ops(SIMPLE_OPS)], roundtrip_prob=roundtrip)
    settings = CaseSettings([backend], timeout_s=timeout_s, search={"method": "sampling", "max_iters": 8})
    run = RunDir(tmp_path / "run")
    # A backend that hangs hangs on the warm-up model too: give up on it there as soon as on a test
    worker = WorkerHandle([backend], run.worker_log(0), collector=collector, warm_up_timeout_s=max(timeout_s, 10))
    events = []
    fuzzer = Fuzzer(FuzzConfig(gen, settings, seed=3, max_tests=tests), run, worker, events.append)
    run_to_budget(fuzzer, worker)
    return fuzzer, events, run


def _bundles(run: RunDir):
    return sorted(p for p in (run.root / "findings").iterdir() if p.is_dir())


def test_perturbed_output_is_an_optimization_inconsistency_and_reproduces(tmp_path, capsys):
    fuzzer, events, run = _fuzz(tmp_path, "faulty_backends:Perturb", tests=3)
    st = fuzzer.stats
    assert st.executed == 3 and st.passed == 0
    assert set(st.findings) == {"inconsistency/execute/faulty_backends:Perturb"}
    assert [e[0] for e in events].count("new") == len(st.signatures) >= 1
    bundle = _bundles(run)[0]
    for name in ("model.onnx", "graph.json", "graph.txt", "inputs.npz", "oracle.npz", "actual.npz", "meta.json"):
        assert (bundle / name).is_file(), name
    meta = json.loads((bundle / "meta.json").read_text())
    assert meta["symptom"] == "inconsistency" and meta["localized"] == "optimization"
    assert meta["versions"]["torch"].startswith("2.13.0") and isinstance(meta["draws"], list)
    lines = [json.loads(x) for x in (run.root / "findings.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and sum(x["new"] for x in lines) == len(st.signatures)
    assert json.loads((run.root / "stats.json").read_text())["tests"] == 3

    assert main(["repro", str(bundle)]) == 2  # a plug-in named by a bundle runs only when the user names it
    assert "--plugin faulty_backends:Perturb" in capsys.readouterr().err
    assert main(["repro", str(bundle), "--plugin", "faulty_backends:Perturb"]) == 0
    assert capsys.readouterr().out.strip().endswith("reproduces")
    # The same bundle against the unperturbed backend: the outputs agree, so it does not reproduce.
    meta["backend"] = "ort"
    (bundle / "meta.json").write_text(json.dumps(meta))
    assert main(["repro", str(bundle)]) == 1
    assert capsys.readouterr().out.strip().endswith("does not reproduce")


@pytest.mark.parametrize(
    "backend, how, stage",
    [
        ("faulty_backends:Segfault", "SIGSEGV", "compile"),
        ("faulty_backends:Abort", "SIGABRT", "execute"),
    ],
)
def test_worker_death_is_recorded_and_the_loop_goes_on(tmp_path, capsys, monkeypatch, backend, how, stage):
    import resource

    # Workers must not leave a core file per crash, whatever limit they inherit (with
    # core_pattern "core", as here, the file would land in the working folder).
    monkeypatch.chdir(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    try:
        fuzzer, events, run = _fuzz(tmp_path, backend, tests=3)
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert not [f for f in tmp_path.rglob("core*") if f.is_file()]
    st = fuzzer.stats
    assert st.findings == {f"crash/{stage}/{backend}": 3}
    assert list(st.signatures) == [f"{backend}/{stage}/opt: {how}"]
    # The first test kills the worker at OPT and once more at O0 (localization); the later two
    # bring a known signature, which is not localized again.
    assert st.restarts == 4
    assert [e[0] for e in events] == ["new", "dup", "dup"]
    (bundle,) = _bundles(run)
    assert json.loads((bundle / "meta.json").read_text())["localized"] == "conversion"
    assert how in (bundle / "error.log").read_text()
    assert main(["repro", str(bundle), "--plugin", backend]) == 0
    assert f"now:      {backend}/{stage}/opt: {how}" in capsys.readouterr().out


def test_hang_past_the_timeout_is_recorded(tmp_path):
    fuzzer, events, run = _fuzz(tmp_path, "faulty_backends:Hang", tests=2, timeout_s=3)
    st = fuzzer.stats
    assert st.findings == {"hang/compile/faulty_backends:Hang": 2}
    assert list(st.signatures) == ["faulty_backends:Hang/compile/opt: timeout"]
    assert st.restarts == 2  # no O0 re-run after a hang: it would only hang again


@pytest.mark.slow
def test_a_timeout_under_the_collector_alone_is_no_hang(tmp_path):
    fuzzer, events, run = _fuzz(tmp_path, "faulty_backends:SlowUnderCoverage", tests=2, timeout_s=3, collector="python")
    st = fuzzer.stats
    assert not st.findings and st.passed == 2  # run natively, each compiled and agreed with PyTorch
    assert st.slow == 2 and st.restarts == 2  # each timeout still cost its worker
    assert json.loads((run.root / "stats.json").read_text())["slow_under_coverage"] == 2
    # a backend that hangs natively too is a hang, confirmed by the native run
    fuzzer, events, run = _fuzz(tmp_path / "h", "faulty_backends:Hang", tests=1, timeout_s=3, collector="python")
    assert fuzzer.stats.findings == {"hang/compile/faulty_backends:Hang": 1} and fuzzer.stats.slow == 0
    assert fuzzer.stats.restarts == 2  # the measured run's, then the native one's
    # a finding of the native run is localized natively too: O0 under the collector would time
    # out again, cost a second worker and read as "O0 fails as well"
    backend = "faulty_backends:SlowUnderCoverageWrongAtOpt"
    fuzzer, events, run = _fuzz(tmp_path / "w", backend, tests=1, timeout_s=3, collector="python")
    assert fuzzer.stats.findings == {f"inconsistency/execute/{backend}": 1}
    assert fuzzer.stats.slow == 1 and fuzzer.stats.restarts == 1
    (header,) = [json.loads(x) for x in (run.root / "findings.jsonl").read_text().splitlines()]
    assert header["localized"] == "optimization"


def test_messages_differing_in_numbers_share_one_signature(tmp_path):
    fuzzer, events, run = _fuzz(tmp_path, "faulty_backends:Raises", tests=3)
    assert fuzzer.stats.findings == {"crash/compile/faulty_backends:Raises": 3}
    assert len(fuzzer.stats.signatures) == 1
    assert fuzzer.stats.restarts == 0  # an exception does not cost the worker


def test_fuzz_cli_runs_and_refuses_to_overwrite(tmp_path, capsys):
    argv = ["fuzz", "-o", str(tmp_path / "r"), "--backends", "ort", "--tests", "2", "--nodes", "3"]
    argv += ["--ops", *SIMPLE_OPS, "--no-support", "--seed", "5"]
    assert main(argv) == 0
    assert json.loads((tmp_path / "r" / "stats.json").read_text())["tests"] == 2
    capsys.readouterr()
    assert main(argv) == 2
    assert "already holds a campaign" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--backends", "nosuch", "--tests", "1"], "unknown backend"),
        (["--tests", "1", "--time", "soon"], "not a duration"),
        ([], "say when to stop"),
        (["--backends", "trt", "--tests", "1", "--no-support"], "backend trt is unavailable"),
    ],
)
def test_fuzz_bad_input_is_one_line_error(tmp_path, capsys, extra, message):
    assert main(["fuzz", "-o", str(tmp_path / "r"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_backend_the_worker_cannot_load_closes_the_worker(tmp_path, capsys, monkeypatch):
    from nnsmith_cov.campaign.worker_handle import WorkerHandle

    closed, real_close = [], WorkerHandle.close

    def close(self):  # noqa: ANN001, ANN202
        closed.append(self.proc is not None and self.proc.poll() is None)  # was it still running?
        return real_close(self)

    monkeypatch.setattr(WorkerHandle, "close", close)
    argv = ["fuzz", "-o", str(tmp_path / "r"), "--backends", "trt", "--tests", "1", "--no-support"]
    assert main(argv) == 2 and "backend trt is unavailable" in capsys.readouterr().err
    assert closed and closed[0] is True  # the running worker was closed, not left to its pipe


def test_repro_of_a_broken_bundle_is_one_line_error(tmp_path, capsys):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "meta.json").write_text("{not json")
    assert main(["repro", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "meta.json" in err or "JSON" in err
    assert len(err.splitlines()) == 1


def test_a_worker_crash_mid_test_does_not_corrupt_the_coverage_map(tmp_path):
    """ORT is not measured by the python collector, so with the same seeds the map holds just the
    exporter's arcs: a worker that segfaults inside the backend must leave exactly that map."""
    clean, _, _ = _fuzz(tmp_path / "clean", "ort", tests=3, collector="python")
    crashed, _, run = _fuzz(tmp_path / "crash", "faulty_backends:Segfault", tests=3, collector="python")
    # The first test dies at OPT and again at O0 (localization); the other two, whose signature
    # is then known, at OPT only.
    assert crashed.stats.restarts == 4
    assert crashed.stats.findings == {"crash/compile/faulty_backends:Segfault": 3}
    assert clean.covmap is not None and crashed.covmap is not None
    assert clean.stats.branches > 100
    assert np.array_equal(crashed.covmap.virgin, clean.covmap.virgin)
    stats = json.loads((run.root / "stats.json").read_text())
    assert stats["coverage"]["branches"] == clean.stats.branches == clean.covmap.count()
    assert json.loads((run.root / "config.json").read_text())["coverage"]["name"] == "python"


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    """The optimization level of every backend run the loop asks its worker for, in order."""
    levels: list[str] = []
    call = WorkerHandle.call

    def counting(self, request, timeout_s, meanwhile=None, then_s=None):
        if request["kind"] == "run":
            levels.append(request["opt"])
        return call(self, request, timeout_s, meanwhile, then_s)

    monkeypatch.setattr(WorkerHandle, "call", counting)
    return levels


def test_import_failures_and_known_signatures_are_not_run_again_at_o0(tmp_path, asked):
    """No optimization level reaches the importer: an import failure is the conversion's,
    without an O0 run; and a signature already filed is not localized again."""
    fuzzer, _, run = _fuzz(tmp_path / "import", "faulty_backends:RaisesAtImport", tests=3)
    assert fuzzer.stats.findings == {"crash/import/faulty_backends:RaisesAtImport": 3}
    assert asked == ["opt"] * 3
    headers = [json.loads(x) for x in (run.root / "findings.jsonl").read_text().splitlines()]
    assert [h["localized"] for h in headers] == ["conversion"] * 3
    asked.clear()
    fuzzer, _, run = _fuzz(tmp_path / "compile", "faulty_backends:Raises", tests=3)
    assert asked == ["opt", "O0", "opt", "opt"]  # only the first of the one signature is localized
    headers = [json.loads(x) for x in (run.root / "findings.jsonl").read_text().splitlines()]
    assert [h["localized"] for h in headers] == ["conversion", None, None]


def test_a_text_round_trip_the_parser_refuses_is_a_finding_of_its_own_stage(tmp_path, asked, capsys):
    """Graphs planned with a round trip go through the backend's printer and parser; a refusal
    there is filed at stage roundtrip, without an O0 run (no optimization level reaches it).
    Graphs without the plan never call it."""
    fuzzer, _, run = _fuzz(tmp_path / "trip", "faulty_backends:BadText", tests=3, roundtrip=1.0)
    assert fuzzer.stats.findings == {"crash/roundtrip/faulty_backends:BadText": 3}
    assert asked == ["opt"] * 3
    headers = [json.loads(x) for x in (run.root / "findings.jsonl").read_text().splitlines()]
    assert [h["localized"] for h in headers] == ["roundtrip"] * 3
    assert main(["repro", str(_bundles(run)[0]), "--plugin", "faulty_backends:BadText"]) == 0  # keeps the plan
    assert capsys.readouterr().out.strip().endswith("reproduces")
    fuzzer, _, _ = _fuzz(tmp_path / "direct", "faulty_backends:BadText", tests=3)
    assert fuzzer.stats.passed == 3 and not fuzzer.stats.findings


def test_a_commit_made_beside_the_next_test_stores_what_one_made_at_once_stores(tmp_path, monkeypatch):
    """`fuzz` commits each test once its worker has the next test's request (`step(defer=True)`):
    the corpus, its hits and findings, and the counters are those of committing each test at once."""
    ops = ["Add", "Mul", "Sub", "Relu", "Tanh", "Abs", "Neg", "Sigmoid"]
    argv = ["--tests", "6", "--backends", "fake_coverage:SigmoidPays", "--collector", "fake_coverage:OpCollector"]
    argv += ["--feedback", "off", "--no-support", "--nodes", "3", "--ops", *ops, "--search", "sampling", "--seed", "5"]
    order: list[tuple[str, int]] = []
    commit, call = Ledger.commit, WorkerHandle.call

    def committing(self, t, *args, **kwargs):
        order.append(("commit", t.test_id))
        return commit(self, t, *args, **kwargs)

    def calling(self, request, timeout_s, meanwhile=None, then_s=None):
        if request["kind"] == "propose":
            order.append(("propose", request["test"]))
        return call(self, request, timeout_s, meanwhile, then_s)

    monkeypatch.setattr(Ledger, "commit", committing)
    monkeypatch.setattr(WorkerHandle, "call", calling)
    assert main(["fuzz", "-o", str(tmp_path / "beside"), *argv]) == 0
    beside = [("propose", k) if i % 2 == 0 else ("commit", k - 1) for k in range(1, 6) for i in range(2)]
    assert order == [("propose", 0), *beside, ("commit", 5)]

    step = Fuzzer.step
    monkeypatch.setattr(Fuzzer, "step", lambda self, worker=None, defer=False: step(self, worker))
    order.clear()
    assert main(["fuzz", "-o", str(tmp_path / "at-once"), *argv]) == 0
    assert order == [(kind, k) for k in range(6) for kind in ("propose", "commit")]
    records = stored_records(tmp_path / "beside")
    assert records[0], "the campaign kept no test: nothing compared"
    assert stored_records(tmp_path / "at-once") == records
    counted = ("tests", "executed", "passed", "findings", "generation_failed", "internal_errors")
    beside_stats, at_once = (json.loads((tmp_path / run / "stats.json").read_text()) for run in ("beside", "at-once"))
    assert {k: beside_stats[k] for k in counted} == {k: at_once[k] for k in counted}
    for k in ("branches", "interesting_tests"):
        assert beside_stats["coverage"][k] == at_once["coverage"][k]


def test_a_flaky_branch_is_counted_but_its_hit_counts_keep_no_test(tmp_path):
    """A branch the collector's calibration finds flaky reaches the campaign's coverage and the
    kept tests' hits (it ran), but its changing counts admit no test: with one op only, the
    first test is the only one kept. Without the flag its counts keep most tests, as they do
    when `--calibration-share 0` leaves the worker no time for reruns."""
    from fake_coverage import FLAKY

    argv = ["--tests", "5", "--backends", "fake_coverage:SigmoidPays", "--feedback", "off", "--no-support"]
    argv += ["--nodes", "2", "--ops", "Add", "--search", "sampling", "--seed", "3"]
    kept = {}
    for name, more in (("FlakyCollector", []), ("UncalibratedFlaky", []), ("no-share", ["--calibration-share", "0"])):
        folder = tmp_path / name
        collector = f"fake_coverage:{'FlakyCollector' if more else name}"
        assert main(["fuzz", "-o", str(folder), *argv, "--collector", collector, *more]) == 0
        tests, _ = stored_records(folder)
        kept[name] = [hits for *_, hits in tests if hits is not None]
        stats = json.loads((folder / "stats.json").read_text())
        assert stats["tests"] == 5 and stats["passed"] == 5
        assert stats["calibration_share"] == (0.0 if more else 0.25)  # what the numbers were measured with
        assert FLAKY in kept[name][0][0]  # counted: it ran
    assert len(kept["FlakyCollector"]) == 1
    assert len(kept["UncalibratedFlaky"]) >= 3
    assert len(kept["no-share"]) >= 3
