"""The Tzer-style baseline: its mutants are well-formed or cleanly rejected, the same seed makes
the same mutant and a stored chain rebuilds it, the pass menu builds, the pool switches to pass
mutation past its tolerance, and `fuzz --generator tzer` stores, reports, resumes and repros."""

from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from nnsmith_cov.cli import main  # noqa: E402
from nnsmith_cov.corpus.store import CorpusStore  # noqa: E402
from nnsmith_cov.tir import mutate, passes, seeds  # noqa: E402
from nnsmith_cov.tzer import mutant  # noqa: E402
from nnsmith_cov.tzer.pool import TOLERANCE, Entry, Pool  # noqa: E402


def _well_formed(func) -> bool:
    return bool(tvm.tirx.analysis.verify_well_formed(func, assert_mode=False))


def test_every_seed_is_well_formed_and_round_trips_through_tvmscript():
    for name in seeds.names():
        func = seeds.seed(name)
        assert _well_formed(func), name
        tvm.ir.assert_structural_equal(func, seeds.parse(func.script()), map_free_vars=True)


def test_every_mutant_is_well_formed_or_a_clean_rejection():
    accepted, rejected = {}, 0
    for name in seeds.names():
        func = seeds.seed(name)
        for kind in mutate.NAMES:
            for draw in range(3):
                try:
                    new = mutate.mutate(func, kind, draw)
                except mutate.Rejected:  # the only exception a mutation may raise
                    rejected += 1
                    continue
                assert _well_formed(new), (name, kind, draw)
                assert new.script() != func.script(), (name, kind, draw)  # it changed something
                accepted[kind] = accepted.get(kind, 0) + 1
    assert set(accepted) == set(mutate.NAMES), "every mutation applies somewhere"
    assert sum(accepted.values()) > 3 * rejected


def test_mutants_round_trip_through_the_text_the_corpus_stores():
    func = seeds.seed("script.int_mix")
    for kind in mutate.NAMES:
        try:
            new = mutate.mutate(func, kind, 5)
        except mutate.Rejected:
            continue
        tvm.ir.assert_structural_equal(new, seeds.parse(new.script()), map_free_vars=True)


def test_unknown_mutation_is_rejected():
    with pytest.raises(mutate.Rejected, match="unknown mutation"):
        mutate.mutate(seeds.seed("script.stencil"), "nosuch", 0)


def test_same_seed_replays_the_same_mutants_and_a_chain_rebuilds_them():
    entry = Entry("topi.matmul_relu", [], ["StmtSimplify"], seeds.seed("topi.matmul_relu"))
    scripts = []
    for k in range(4):  # a chain of four IR mutations, each from its own test seed
        a, b = mutant.make(entry, 100 + k, "ir"), mutant.make(entry, 100 + k, "ir")
        assert a.func.script() == b.func.script() and a.chain == b.chain and a.step == b.step
        entry = Entry(entry.origin, a.chain, a.passes, a.func)
        scripts.append(a.func.script())
    assert len(entry.chain) == 4
    rebuilt = mutant.replay(entry.origin, entry.chain)
    assert rebuilt.script() == scripts[-1]
    fresh = Entry("topi.matmul_relu", [], [], seeds.seed("topi.matmul_relu"))
    assert len({mutant.make(fresh, k, "ir").func.script() for k in range(6)}) > 1  # seeds matter


def test_pass_sequences_mutate_within_the_menu_and_build():
    rng = np.random.default_rng(3)
    seq = passes.initial(rng)
    seen = set()
    for _ in range(60):
        seq, step = passes.mutate(seq, rng)
        seen.add(step)
        assert 1 <= len(seq) <= passes.MAX_PASSES and set(seq) <= set(passes.MENU)
    assert seen == {"pass.insert", "pass.delete", "pass.replace", "pass.swap"}
    again = np.random.default_rng(3)
    assert passes.mutate(["StmtSimplify", "RemoveNoOp"], again) == passes.mutate(
        ["StmtSimplify", "RemoveNoOp"], np.random.default_rng(3)
    )
    mod = tvm.IRModule({"main": seeds.seed("topi.softmax")})
    out = passes.make(list(passes.MENU))(mod)  # every pass of the menu applies to a loop-form seed
    assert isinstance(out, tvm.IRModule)
    with pytest.raises(ValueError, match="unknown TIR pass"):
        passes.make(["NoSuchPass"])


def test_pool_switches_to_pass_mutation_past_its_tolerance_and_keeps_only_gains():
    parent = Entry("script.stencil", [], ["StmtSimplify"])
    pool = Pool([parent])
    for _ in range(TOLERANCE):
        assert parent.mode() == "ir"
        pool.observe(parent, "ir", False, None)
    assert parent.mode() == "pass" and len(pool.entries) == 1
    pool.observe(parent, "pass", False, None)
    assert parent.mode() == "pass"
    child = Entry("script.stencil", [("shrink_loop", 1)], ["StmtSimplify"])
    pool.observe(parent, "pass", True, child)
    assert parent.mode() == "ir" and pool.entries == [parent, child]


def test_tzer_needs_the_tvm_backend(tmp_path, capsys):
    code = main(["fuzz", "-o", str(tmp_path / "x"), "--tests", "2", "--generator", "tzer", "--backends", "ort"])
    assert code != 0
    assert "--backends tvm" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_fuzz_with_tzer_stores_reports_resumes_and_repros(tmp_path):
    folder = tmp_path / "tzer"
    argv = ["fuzz", "-o", str(folder), "--tests", "6", "--generator", "tzer", "--backends", "tvm"]
    assert main([*argv, "--collector", "python", "--seed", "2"]) == 0
    config = json.loads((folder / "config.json").read_text())
    assert config["generator"]["name"] == "tzer"
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        entries = list(store.entries(include_finding_only=True))
        assert store.counters().next_test_id == 6
    assert entries, "the first test always reaches new coverage"
    for _, record in entries:
        gen = record.gen
        assert gen["generator"] == "tzer" and gen["origin"] in seeds.names()
        chain = [(n, d) for n, d in gen["chain"]]
        assert mutant.replay(gen["origin"], chain).script() == gen["tir"]  # the record replays its TIR
        assert set(gen["passes"]) <= set(passes.MENU)
    assert main(["fuzz", "--resume", str(folder), "--tests", "8"]) == 0
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.counters().next_test_id == 8
    assert main(["report", str(folder), "-o", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.json").exists()
    bundles = [p for p in (folder / "findings").glob("*") if (p / "meta.json").exists()]
    for bundle in bundles[:1]:  # a finding, where this short run had one, replays
        meta = json.loads((bundle / "meta.json").read_text())
        assert meta["tzer"]["tir"] and meta["generator"]["name"] == "tzer"
        if meta["symptom"] == "crash":  # a compiler crash on the same TIR is deterministic
            assert main(["repro", str(bundle)]) == 0


class _FakeWorker:
    """Answers "tir" requests from a table keyed by whether the optional passes were asked for."""

    def __init__(self, with_passes, without):
        self.replies = {True: with_passes, False: without}
        self.requests = []

    def call(self, request, timeout_s):
        self.requests.append(request)
        return self.replies[bool(request["passes"])]


def _outputs(value):
    from nnsmith_cov.campaign.protocol import encode_arrays
    from nnsmith_cov.campaign.worker_handle import Reply

    return Reply({"kind": "outputs", "outputs": encode_arrays({"B": np.full(4, value, "float32")})}, "execute")


def test_the_oracle_compares_with_and_without_passes_and_localizes_crashes():
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import Reply
    from nnsmith_cov.tzer.case import arguments, run_case

    settings = CaseSettings(["tvm"])
    args = arguments(seeds.seed("script.clamp_sum"), 1)
    assert set(args) == {"A", "B"} and args["A"].shape == (4, 8)
    np.testing.assert_array_equal(args["A"], arguments(seeds.seed("script.clamp_sum"), 1)["A"])
    result, reference = run_case(_FakeWorker(_outputs(1.0), _outputs(1.0)), "s", ["StmtSimplify"], args, settings)
    assert result.status == "pass" and not result.findings and reference["B"][0] == 1.0
    result, _ = run_case(_FakeWorker(_outputs(2.0), _outputs(1.0)), "s", ["StmtSimplify"], args, settings)
    (finding,) = result.findings
    assert finding.symptom == "inconsistency" and finding.opt == "opt" and "StmtSimplify" in finding.detail
    error = {"stage": "compile", "type": "InternalError", "message": "Check failed: x", "traceback": ""}
    crash = Reply({"kind": "error", "error": error}, "compile")
    result, reference = run_case(_FakeWorker(crash, _outputs(1.0)), "s", ["LoopPartition"], args, settings)
    (finding,) = result.findings
    assert finding.symptom == "crash" and finding.localized == "optimization" and reference is None
    hang = Reply(None, "compile", hung=True)
    fake = _FakeWorker(hang, _outputs(1.0))
    result, _ = run_case(fake, "s", ["LoopPartition"], args, settings)
    assert result.findings[0].symptom == "hang" and len(fake.requests) == 1  # no rerun after a hang


@pytest.fixture
def experiment():
    from scripts_loader import script

    with script("experiment") as module:
        yield module


def test_the_experiment_runs_tzer_on_tvm_alone(experiment):
    import argparse
    from pathlib import Path

    configs = experiment.parse_configs(experiment.DEFAULT_CONFIGS)
    assert [c.label for c in configs][-1] == "tzer-on" and len(configs) == 5
    args = argparse.Namespace(backends="ort,tvm", collector="python", time="1m", seed=1, jobs=2)
    argv = experiment.fuzz_argv(experiment.Config("tzer", "on"), Path("/nonexistent/tzer-on"), args)
    assert argv[argv.index("--backends") + 1] == "tvm" and argv[argv.index("--generator") + 1] == "tzer"
    argv = experiment.fuzz_argv(experiment.Config("lemon", "off"), Path("/nonexistent/lemon-off"), args)
    assert argv[argv.index("--backends") + 1] == "ort,tvm"
    assert argv[argv.index("--gen-process") + 1] == "off"  # two campaigns at once share the cores


@pytest.mark.slow
def test_repro_reruns_a_tzer_bundle_from_its_stored_tir(tmp_path, capsys):
    from nnsmith_cov.materialize.model_dir import npz_bytes
    from nnsmith_cov.oracle.signature import error_signature
    from nnsmith_cov.tzer.case import arguments

    func = seeds.seed("script.stencil")
    message = "unknown TIR pass 'NoSuchPass'"  # a deterministic compile-stage error, through the worker
    signature = error_signature("tvm", "compile", "opt", "ValueError", message)
    for name, seq in (("fails", ["NoSuchPass"]), ("passes", ["StmtSimplify"])):
        bundle = tmp_path / name
        bundle.mkdir()
        record = {"origin": "script.stencil", "chain": [], "passes": seq, "mode": "ir", "seed": 1, "tir": func.script()}
        meta = {"schema": 1, "symptom": "crash", "backend": "tvm", "stage": "compile", "opt": "opt",
                "signature": signature, "settings": {"timeout_s": 60.0}, "tzer": record}  # fmt: skip
        (bundle / "meta.json").write_text(json.dumps(meta))
        (bundle / "inputs.npz").write_bytes(npz_bytes(arguments(func, 1)))
    assert main(["repro", str(tmp_path / "fails")]) == 0
    assert "reproduces" in capsys.readouterr().out
    assert main(["repro", str(tmp_path / "passes")]) == 1
    assert "no finding (the test passes)" in capsys.readouterr().out
