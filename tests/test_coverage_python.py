"""The python collector: arcs of TVM and the exporter, exact against coverage.py, stable, and
wired through the worker, the `coverage` command and the fuzz loop."""

from __future__ import annotations

import dataclasses
import json

import coverage
import numpy as np
import pytest
from onnx import TensorProto, helper

from nnsmith_cov.backends.base import Opt
from nnsmith_cov.backends.registry import load_backend
from nnsmith_cov.campaign.testcase import CaseSettings, run_test
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.cli import main
from nnsmith_cov.coverage.collector import PASS_FILTERS, CollectorError
from nnsmith_cov.coverage.factory import make_collector
from nnsmith_cov.coverage.python_collector import PythonCollector
from nnsmith_cov.coverage.universe import Universe, path_matches
from nnsmith_cov.gen.generator import GenConfig, generate
from nnsmith_cov.ops import select_ops


def _onnx(op: str) -> tuple[bytes, dict[str, np.ndarray]]:
    """A one-op float32 model: Conv (1x2x6x6 * 3x2x3x3) or MatMul (4x5 @ 5x3)."""
    if op == "Conv":
        w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2, 3, 3], np.linspace(-1, 1, 54, dtype=np.float32))
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        x_shape, y_shape = [1, 2, 6, 6], [1, 3, 6, 6]
    else:
        w = helper.make_tensor("w", TensorProto.FLOAT, [5, 3], np.linspace(-1, 1, 15, dtype=np.float32))
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        x_shape, y_shape = [4, 5], [4, 3]
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), {"x": np.ones(x_shape, np.float32)}


@pytest.fixture(scope="module")
def collector() -> PythonCollector:
    return PythonCollector([])


@pytest.fixture(scope="module")
def tvm_run():
    backend = load_backend("tvm")
    models = {op: _onnx(op) for op in ("Conv", "MatMul")}

    def run(op: str) -> None:
        data, inputs = models[op]
        backend.run(backend.compile(backend.load(data), Opt.OPT), inputs)

    for op in models:  # first runs fill TVM's lazy caches; measure the steady state
        run(op)
    return run


def _covered(collector: PythonCollector, run, op: str) -> set[str]:
    collector.start()
    run(op)
    hits = collector.stop()
    assert hits.count.tolist() == [1] * len(hits)  # presence only
    return {collector.universe().key(int(i)) for i in hits.index}


def test_universe_names_files_relative_to_their_package(collector):
    u = collector.universe()
    assert len(u) > 50_000 and u.kind == "arc" and u.collector == "python"
    assert "tvm/relax/frontend/onnx/onnx_frontend.py" in u.files
    assert any(f.startswith("torch/onnx/") for f in u.files)
    assert not any(f.startswith("/") or "site-packages" in f for f in u.files)
    assert set(u.build) == {"tvm", "torch.onnx"}
    assert u.file_mask(PASS_FILTERS["python"]).sum() > 1000


def test_universe_is_stable_and_survives_its_cache(collector, tmp_path):
    u = collector.universe()
    fresh = PythonCollector(["tvm", "torch.onnx"], cache_dir=tmp_path)  # analyses from scratch
    assert fresh.universe().ident == u.ident
    again = PythonCollector(["tvm", "torch.onnx"], cache_dir=tmp_path)  # reads the cache
    assert again.universe().ident == u.ident
    cached = next(tmp_path.iterdir())
    cached.write_bytes(b"not a cache")  # a broken cache is recomputed, never trusted
    assert PythonCollector([], cache_dir=tmp_path).universe().ident == u.ident
    assert Universe.from_bytes(u.to_bytes()).ident == u.ident
    with pytest.raises(ValueError, match="not a branch universe"):
        Universe.from_bytes(b"\x00garbage")


def test_same_model_twice_gives_identical_arcs(collector, tvm_run):
    first = _covered(collector, tvm_run, "Conv")
    assert len(first) > 500
    assert _covered(collector, tvm_run, "Conv") == first


def test_conv_and_matmul_reach_different_arcs(collector, tvm_run):
    conv = _covered(collector, tvm_run, "Conv")
    matmul = _covered(collector, tvm_run, "MatMul")
    only_conv, only_matmul = conv - matmul, matmul - conv
    assert any(k.startswith("tvm/topi/nn/conv2d.py:") for k in only_conv)
    assert not any(k.startswith("tvm/topi/nn/conv2d.py:") for k in matmul)
    assert any(k.startswith("tvm/relax/transform/legalize_ops/linear_algebra.py:") for k in only_matmul)


def test_arcs_equal_coverage_py_own_analysis(collector, tvm_run):
    """Our fast path reads the tracer's sets; coverage.py's public API must agree exactly."""
    ours = _covered(collector, tvm_run, "MatMul")
    ref = coverage.Coverage(branch=True, source_pkgs=["tvm", "torch.onnx"], data_file=None, config_file=False)
    ref.set_option("run:disable_warnings", ["module-not-measured", "module-not-imported"])
    ref.start()
    tvm_run("MatMul")
    ref.stop()
    data = ref.get_data()
    theirs = set()
    for path in data.measured_files():
        rel = collector._relative(path)
        if rel is None:
            continue
        analysis = ref._analyze(path)
        possible = analysis.arc_possibilities_set
        theirs |= {f"{rel}:{a}->{b}" for a, b in analysis.arcs_executed_set if (a, b) in possible}
    assert ours == theirs


def test_unknown_package_and_collector_are_one_line_errors():
    with pytest.raises(CollectorError, match="no_such_pkg"):
        PythonCollector(["no_such_pkg"])
    with pytest.raises(CollectorError, match="unknown collector"):
        make_collector("nope")


def test_path_filters_match_whole_components():
    assert path_matches("tvm/relax/transform/fuse_ops.py", "relax/transform/")
    assert path_matches("/build/tvm/src/relax/transform/a.cc", "src/relax/transform/")
    assert not path_matches("tvm/relax/transformer.py", "relax/transform/")
    assert path_matches("tvm/ir/transform.py", "tvm/ir/transform.py")
    assert not path_matches("tvm/tir/transform.py", "ir/transform.py")


@pytest.mark.parametrize("roundtrip", [False, True])
def test_a_fresh_worker_measures_a_model_like_a_busy_one(tmp_path, roundtrip):
    """The worker warms up unmeasured (the IR text round trip included), so a model's first test
    and its repeat cover the same arcs."""
    gen = generate(GenConfig(nodes=5, ops=select_ops(["Conv2d", "Add", "Relu", "Flatten"])), 11)
    graph = dataclasses.replace(gen.graph, roundtrip=roundtrip)
    settings = CaseSettings(["tvm"], search={"method": "sampling", "max_iters": 8})
    worker = WorkerHandle(["tvm"], tmp_path / "worker.log", collector="python")
    try:
        first = run_test(worker, graph, 11, settings)
        second = run_test(worker, graph, 11, settings)
    finally:
        worker.close()
    assert first.status == second.status == "pass"
    assert first.hits is not None and second.hits is not None and len(first.hits) > 500
    assert np.array_equal(first.hits.index, second.hits.index)


def _model_dir(tmp_path, seed: int = 3) -> str:
    out = tmp_path / "model"
    assert (
        main(["generate", "--seed", str(seed), "--nodes", "6", "--ops", "Add", "Relu", "MatMul", "-o", str(out)]) == 0
    )
    return str(out)


def test_coverage_command_prints_json_with_totals_and_pass_only(tmp_path, capsys):
    model = _model_dir(tmp_path)
    capsys.readouterr()
    assert main(["coverage", model, "--backends", "tvm,ort", "--top", "60"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "pass" and out["collector"] == "python"
    assert 0 < out["covered"] < out["universe"]["branches"]
    assert 0 < out["pass_only"]["covered"] <= out["pass_only"]["branches"]
    files = [t["file"] for t in out["top_files"]]
    assert len(files) == 60 and out["files_reached"] > 60
    assert any(f.startswith("torch/onnx/") for f in files) and any(f.startswith("tvm/") for f in files)
    assert all(t["covered"] <= t["branches"] for t in out["top_files"])
    # the exporter runs in the worker too: its files are covered
    assert main(["coverage", model, "--backends", "tvm", "--cov-targets", "torch.onnx"]) == 0
    exporter_only = json.loads(capsys.readouterr().out)
    assert exporter_only["covered"] > 0
    assert all(t["file"].startswith("torch/onnx/") for t in exporter_only["top_files"])


def test_coverage_command_bad_input_is_one_line(tmp_path, capsys):
    assert main(["coverage", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a model folder" in err[0]
    model = _model_dir(tmp_path)
    assert main(["coverage", model, "--cov-targets", "no_such_pkg"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_pkg" in err[0]
