"""ORT and TVM each compile and run a small real model at both optimization levels;
errors carry their stage; the registry resolves names and plug-ins."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from nnsmith_cov.backends.base import BackendError, Opt, Stage
from nnsmith_cov.backends.registry import check_spec, load_backend


def _model() -> bytes:
    """y = relu(x @ w + b) with w, b as initializers; z = sigmoid(y) * x[:, :3]."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.linspace(-1, 1, 12, dtype=np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.1, -0.2, 0.3])
    starts = helper.make_tensor("starts", TensorProto.INT64, [1], [0])
    ends = helper.make_tensor("ends", TensorProto.INT64, [1], [3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
        helper.make_node("Sigmoid", ["y"], ["s"]),
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["xs"]),
        helper.make_node("Mul", ["s", "xs"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("y", "z")],
        [w, b, starts, ends, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _expected(x: np.ndarray) -> dict[str, np.ndarray]:
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    y = np.maximum(x @ w + np.array([0.1, -0.2, 0.3], np.float32), 0)
    return {"y": y, "z": (1 / (1 + np.exp(-y))) * x[:, :3]}


@pytest.mark.parametrize("name", ["ort", "tvm"])
@pytest.mark.parametrize("opt", list(Opt))
def test_backend_runs_a_small_model(name, opt):
    backend = load_backend(name)
    assert backend.unavailable() is None
    assert backend.version()
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 4 - 1
    out = backend.run(backend.compile(backend.load(_model()), opt), {"x": x})
    assert set(out) == {"y", "z"}
    for k, v in _expected(x).items():
        assert out[k].shape == v.shape and out[k].dtype == np.float32
        np.testing.assert_allclose(out[k], v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, stage", [("ort", Stage.COMPILE), ("tvm", Stage.IMPORT)])
def test_a_broken_model_fails_with_its_stage(name, stage):
    backend = load_backend(name)
    with pytest.raises(BackendError) as info:
        backend.compile(backend.load(b"\x08\x07garbage"), Opt.OPT)
    assert info.value.stage is stage


def test_registry_accepts_builtins_and_plugins_only():
    assert check_spec("tvm") == "tvm"
    assert check_spec("my.module:Backend") == "my.module:Backend"
    for bad in ("nosuch", "a:b:c", ":x", "m:"):
        with pytest.raises(ValueError):
            check_spec(bad)


def test_tvm_returns_constant_int64_outputs_as_arrays():
    # Relax turns int64 values computed from initializers alone into shape values.
    c = helper.make_tensor("c", TensorProto.INT64, [3], [4, -5, 6])
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["c", "c"], ["a"]),
            helper.make_node("Concat", ["c", "a"], ["n"], axis=0),
            helper.make_node("Relu", ["x"], ["r"]),
        ],
        "shape_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, [6]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [2]),
        ],
        [c],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    backend = load_backend("tvm")
    out = backend.run(backend.compile(backend.load(model.SerializeToString()), Opt.OPT), {"x": np.ones(2, np.float32)})
    assert out["n"].dtype == np.int64
    np.testing.assert_array_equal(out["n"], [4, -5, 6, 8, -10, 12])


_LOAD_LIBRARIES_CHILD = """
import json, sys
from nnsmith_cov.backends.tvm import TvmBackend

def mapped():
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if line.rstrip().endswith(".so") and "/libtvm_" in line})

TvmBackend.load_libraries()
alone, package = mapped(), "tvm" in sys.modules
import tvm.relax
print(json.dumps({"alone": alone, "package": package, "after": mapped(), "op": tvm.relax.op.add.__name__}))
"""


def test_tvm_loads_its_libraries_alone_where_its_package_then_finds_them():
    """`load_libraries` (run on the binary collector's followed thread) maps the runtime and the
    compiler without importing `tvm`, and the package's own import afterwards uses those: the
    same files, not a second copy of the compiler beside the followed one."""
    pytest.importorskip("tvm")
    out = subprocess.run([sys.executable, "-c", _LOAD_LIBRARIES_CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["package"] and got["op"] == "add"
    for lib in ("libtvm_runtime.so", "libtvm_compiler.so"):
        alone, after = ([p for p in got[k] if p.endswith("/" + lib)] for k in ("alone", "after"))
        assert len(alone) == 1 and after == alone, lib


def test_tvm_compiles_its_module_printed_and_parsed_back():
    """The round trip gives back the imported module (constants lifted for the trip and bound
    again), prints no metadata the parser could not read, and compiles to the same outputs."""
    import tvm

    from nnsmith_cov.backends.tvm import _lift_constants

    backend = load_backend("tvm")
    model = backend.load(_model())
    lifted, values = _lift_constants(model.mod)
    assert len(values) >= 2 and "metadata" not in lifted.script()  # w and b at least
    back = backend.roundtrip(model)
    assert back.mod is not model.mod
    tvm.ir.assert_structural_equal(back.mod, model.mod, map_free_vars=True)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 4 - 1
    out = backend.run(backend.compile(back, Opt.OPT), {"x": x})
    for k, v in _expected(x).items():
        np.testing.assert_allclose(out[k], v, rtol=1e-5, atol=1e-6)


def test_the_worker_times_a_round_trip_only_where_the_backend_has_one():
    from nnsmith_cov.campaign.protocol import encode_arrays
    from nnsmith_cov.campaign.worker import Worker

    worker = Worker(["ort", "tvm"], emit=lambda _: None)
    x = np.ones((2, 4), np.float32)
    steps = {}
    for name in ("ort", "tvm"):
        for trip in (False, True):
            msg = {"backend": name, "opt": "opt", "onnx": _model(), "inputs": encode_arrays({"x": x})}
            reply = worker.run(msg | {"roundtrip": trip}, covered=False)
            assert reply["kind"] == "outputs", reply.get("error")
            steps[name, trip] = set(reply["ms"])
    assert steps["tvm", True] == {"import", "roundtrip", "compile", "execute"}
    assert steps["tvm", False] == steps["ort", True] == steps["ort", False] == {"import", "compile", "execute"}


def test_a_parse_that_is_not_the_printed_module_is_a_roundtrip_error(monkeypatch):
    import tvm

    backend = load_backend("tvm")
    model = backend.load(_model())
    monkeypatch.setattr(tvm.script, "from_source", lambda text: tvm.IRModule())
    with pytest.raises(BackendError) as info:
        backend.roundtrip(model)
    assert info.value.stage is Stage.ROUNDTRIP
