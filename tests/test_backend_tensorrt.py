"""The TensorRT backend: reports why it cannot run, and runs a tiny model where it can."""

from __future__ import annotations

import enum
import sys
import types

import numpy as np
import pytest

from nnsmith_cov.backends.base import Opt
from nnsmith_cov.backends.tensorrt import TensorrtBackend


def _add_model() -> bytes:
    import onnx
    from onnx import TensorProto, helper

    shape = [2, 3]
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_unavailable_is_one_line_or_none() -> None:
    reason = TensorrtBackend().unavailable()  # must not raise, whatever the machine
    if reason is None:
        pytest.skip("TensorRT and a CUDA device are available here")
    assert isinstance(reason, str) and reason.strip()
    assert "\n" not in reason


class _Err(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorNoDevice = 100


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, get_count: object) -> None:
    """A stand-in tensorrt and cuda.bindings.runtime, to reach the device checks without a GPU."""
    runtime = types.SimpleNamespace(
        cudaError_t=_Err,
        cudaGetDeviceCount=get_count,
        cudaGetErrorName=lambda err: (_Err.cudaSuccess, _Err(err).name.encode()),
    )
    bindings = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
    monkeypatch.setitem(sys.modules, "cuda", types.SimpleNamespace(bindings=bindings))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime)


def _raise() -> tuple:
    raise OSError("libcudart.so: cannot open shared object file")


@pytest.mark.parametrize(
    ("get_count", "expected"),
    [
        (lambda: (_Err.cudaErrorNoDevice, 0), "cudaErrorNoDevice"),
        (lambda: (_Err.cudaSuccess, 0), "no CUDA device"),
        (_raise, "libcudart.so"),
        (lambda: (_Err.cudaSuccess, 1), None),
    ],
)
def test_unavailable_device_checks(monkeypatch: pytest.MonkeyPatch, get_count: object, expected: str | None) -> None:
    _fake_cuda(monkeypatch, get_count)
    reason = TensorrtBackend().unavailable()
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason and "\n" not in reason


@pytest.mark.parametrize("opt", list(Opt))
def test_add_runs(opt: Opt) -> None:
    backend = TensorrtBackend()
    reason = backend.unavailable()
    if reason is not None:
        pytest.skip(reason)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    out = backend.run(backend.compile(backend.load(_add_model()), opt), {"a": a, "b": b})
    assert set(out) == {"c"}
    assert out["c"].shape == (2, 3) and out["c"].dtype == np.float32
    np.testing.assert_allclose(out["c"], a + b, rtol=1e-6, atol=1e-6)


def test_check_raises_with_the_error_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnsmith_cov.backends.tensorrt import _check

    _fake_cuda(monkeypatch, lambda: (_Err.cudaSuccess, 1))
    assert _check((_Err.cudaSuccess, 1234)) == 1234
    assert _check((_Err.cudaSuccess,)) is None
    with pytest.raises(RuntimeError, match="cudaErrorNoDevice"):
        _check((_Err.cudaErrorNoDevice, 0))
