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
        (["generate", "--seed", "1", "--nodes", "0", "-o", "x"], "at least 1"),
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
    assert main(argv) == 1
    assert not (tmp_path / "oracle.npz").exists()
    assert (tmp_path / "inputs.npz").exists()
    assert "still produces NaN/Inf" in capsys.readouterr().err
