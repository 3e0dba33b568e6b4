"""The `nnsmith-cov` command: generate's files, determinism, and one-line errors."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import is_op

FILES = ("model.onnx", "graph.json", "graph.txt")


def test_generate_writes_files_and_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["generate", "--seed", "5", "--nodes", "8", "-o", str(a)]) == 0
    assert main(["generate", "--seed", "5", "--nodes", "8", "-o", str(b)]) == 0
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    graph = GraphIR.loads((a / "graph.json").read_text(), is_op)
    assert len(graph.insts) == 8
    model = onnx.load(a / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == [f"i{v}" for v in graph.inputs]


def test_generate_respects_ops_and_no_binning(tmp_path):
    assert main(["generate", "--seed", "1", "--nodes", "4", "--ops", "add", "Relu", "--no-binning", "-o",
                 str(tmp_path)]) == 0  # fmt: skip
    graph = GraphIR.loads((tmp_path / "graph.json").read_text(), is_op)
    assert set(graph.op_counts()) <= {"Add", "Relu"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "-o", "x"], "--seed"),
        (["generate", "--seed", "abc", "-o", "x"], "not an integer"),
        (["generate", "--seed", "-3", "-o", "x"], "seed must be"),
        (["generate", "--seed", "1", "--nodes", "0", "-o", "x"], "must be in 1..200"),
        (["generate", "--seed", "1", "--nodes", "201", "-o", "x"], "must be in 1..200"),
        (["generate", "--seed", "1", "--ops", "Nope", "-o", "x"], "unknown operator"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_line_error(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nnsmith-cov: error:")
    assert message in err


def test_unwritable_output_is_one_line_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["generate", "--seed", "1", "-o", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err


def test_console_entry_point_runs_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "nnsmith_cov.cli", "generate", "--seed", "zz", "-o", "x"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_batch_summarizes(tmp_path, capsys):
    assert main(["batch", "--count", "5", "--nodes", "5", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "median" in out
    assert len(list(tmp_path.iterdir())) == 5


def test_ops_lists_the_library(capsys):
    assert main(["ops"]) == 0
    assert "vulnerable" in capsys.readouterr().out


def test_generate_writes_values_and_oracle(tmp_path):
    from nnsmith_cov.materialize.model_dir import load_npz

    assert main(["generate", "--seed", "5", "--nodes", "8", "-o", str(tmp_path)]) == 0
    graph = GraphIR.loads((tmp_path / "graph.json").read_text(), is_op)
    values = load_npz(tmp_path / "inputs.npz")
    assert set(values) == {f"i{v}" for v in graph.inputs} | {f"w{v}" for v in graph.weights}
    oracle = load_npz(tmp_path / "oracle.npz")
    assert set(oracle) == {f"o{v}" for v in graph.outputs}
    for v in graph.outputs:
        assert oracle[f"o{v}"].shape == graph.types[v].shape


def test_failed_search_writes_no_oracle(tmp_path, capsys):
    # Log of a few hundred values drawn once around 0: some are negative.
    (tmp_path / "oracle.npz").write_bytes(b"stale")
    argv = ["generate", "--seed", "3", "--ops", "Log", "--nodes", "2", "--search", "none", "-o", str(tmp_path)]
    assert main(argv) == 2  # a folder holding a model is replaced only with --force
    assert "--force" in capsys.readouterr().err and (tmp_path / "oracle.npz").read_bytes() == b"stale"
    argv.append("--force")
    assert main(argv) == 1
    assert not (tmp_path / "oracle.npz").exists()
    assert (tmp_path / "inputs.npz").exists()
    assert "still produces NaN/Inf" in capsys.readouterr().err


def test_generate_says_when_it_built_fewer_operators_than_asked(tmp_path, capsys):
    # a small solver budget: the generator keeps what fits, and says so
    argv = ["generate", "--seed", "1", "--nodes", "30", "--solver-work", "20000", "--search", "none", "-o"]
    main([*argv, str(tmp_path)])
    graph = GraphIR.loads((tmp_path / "graph.json").read_text(), is_op)
    assert len(graph.insts) < 30
    lines = [x for x in capsys.readouterr().err.splitlines() if "operators asked for" in x]
    assert lines == [f"generated {len(graph.insts)} of the 30 operators asked for (the solver's work budget or the "
                     "insertion tries ran out; see --solver-work)"]  # fmt: skip


def test_resume_restores_what_fuzz_stored(tmp_path):
    """The checks of a stored config accept what `fuzz` writes, and give back its settings."""
    import argparse
    import json

    from nnsmith_cov.campaign.fuzz_loop import FuzzConfig
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.cli_checks import restore_fuzz_args
    from nnsmith_cov.gen.generator import GenConfig
    from nnsmith_cov.ops import select_ops

    gen = GenConfig(nodes=7, ops=select_ops(["Add", "Relu"]), opsets=(13, 17))
    settings = CaseSettings(["ort", "mymod:Backend"], rtol=0.5, timeout_s=9.0)
    cfg = FuzzConfig(gen, settings, seed=11, max_tests=40, feedback=True, collector="python", dynamic_arm=True)
    (tmp_path / "config.json").write_text(json.dumps({"schema": 1} | cfg.to_json() | {"versions": {}}))
    args = argparse.Namespace(resume=tmp_path, time=None, tests=None, plugin=["mymod:Backend"])
    restore_fuzz_args(args)
    assert (args.nodes, args.seed, args.tests, args.time) == (7, 11, 40, None)
    assert args.backends == ["ort", "mymod:Backend"] and args.rtol == 0.5 and args.timeout_s == 9.0
    assert args.opsets == [13, 17] and args.dynamic is None and args.collector == "python"
    assert sorted(args.ops) == ["Add", "Relu"] and args.feedback == "on" and args.output == tmp_path


def test_resume_takes_only_the_flags_that_do_not_change_the_campaign(tmp_path):
    from nnsmith_cov.cli import CliError
    from nnsmith_cov.cli_checks import check_resume_flags

    ok = ["fuzz", "--resume", "x", "--time", "1m", "--tests", "3", "--workers", "2", "--plugin", "a:B"]
    check_resume_flags(ok + ["--no-support", "--status-every", "5"])
    with pytest.raises(CliError, match="does not take --backends, --seed"):
        check_resume_flags([*ok, "--seed", "0", "--backends", "ort"])  # even at their defaults


def test_a_plug_in_backend_of_a_bundle_runs_only_when_named(tmp_path):
    import json

    import numpy as np

    from nnsmith_cov.gen.generator import GenConfig, generate
    from nnsmith_cov.materialize.model_dir import leaf_names
    from nnsmith_cov.ops import select_ops
    from nnsmith_cov.oracle.bundle import BundleError, read_bundle

    graph = generate(GenConfig(nodes=3, ops=select_ops(["Add", "Relu"])), 2).graph
    (tmp_path / "graph.json").write_text(graph.dumps())
    np.savez(tmp_path / "inputs.npz", **{n: np.zeros(graph.types[v].shape) for v, n in leaf_names(graph).items()})
    meta = {"schema": 1, "symptom": "crash", "backend": "mymod:Backend", "stage": "compile", "opt": "opt",
            "signature": "s", "seed": 2}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="--plugin mymod:Backend"):
        read_bundle(tmp_path)
    assert read_bundle(tmp_path, ["mymod:Backend"]).meta["backend"] == "mymod:Backend"  # nothing imported yet


def test_output_folders_that_hold_nothing_of_ours_are_taken(tmp_path):
    from nnsmith_cov.cli_checks import check_model_folder, check_new_campaign

    (tmp_path / "notes.txt").write_text("mine")
    check_new_campaign(tmp_path, "-o")
    check_new_campaign(tmp_path / "new" / "deeper", "-o")
    (tmp_path / "graph.json").write_text("{}")
    check_model_folder(tmp_path, force=True)
