"""A fixed model for checking that a collector does not change the numbers it observes.

A collector that rewrites machine code (Frida's Stalker) can corrupt a computation:
on AVX-512 hosts Stalker's context switch loses the upper halves of zmm registers,
and ORT then returns wrong outputs that the oracle would file as compiler bugs. A
worker measuring with such a collector runs this model natively and under the
collector at start, and refuses to work unless every output is bit-identical.
The model exercises the kernels most exposed to wide vector code: a convolution,
a matrix product, a softmax and a reduction, at sizes that fill several registers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def fixed_model() -> tuple[bytes, dict[str, np.ndarray]]:
    """(ONNX bytes, inputs) of the check model; the same on every call."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(20240417)  # fixed: the check must be the same everywhere
    w_conv = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w_mat = rng.standard_normal((8 * 14 * 14, 37)).astype(np.float32) * 0.05
    bias = rng.standard_normal(37).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w_conv"], ["c"], pads=[0, 0, 0, 0]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w_mat", "bias"], ["g"]),
        helper.make_node("Softmax", ["g"], ["s"], axis=1),
        helper.make_node("MatMul", ["y", "y"], ["m"]),
        helper.make_node("ReduceSum", ["m"], ["t"], keepdims=1),
        helper.make_node("Tanh", ["t"], ["u"]),
    ]
    graph = helper.make_graph(
        nodes,
        "nncov_self_check",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 16, 16]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [33, 33]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [4, 37]),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 1]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [33, 33]),
        ],
        [numpy_helper.from_array(a, n) for a, n in ((w_conv, "w_conv"), (w_mat, "w_mat"), (bias, "bias"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    inputs = {
        "x": rng.standard_normal((4, 3, 16, 16)).astype(np.float32),
        "y": rng.standard_normal((33, 33)).astype(np.float32),
    }
    return onnx.shape_inference.infer_shapes(model).SerializeToString(), inputs


def compare_runs(native: Mapping[str, np.ndarray], measured: Sequence[Mapping[str, np.ndarray]]) -> str | None:
    """None when every measured run equals the native one bit for bit, else what differs (one line)."""
    for k, outs in enumerate(measured):
        for name, want in native.items():
            got = outs.get(name)
            if got is None or got.shape != want.shape or got.dtype != want.dtype:
                return f"run {k + 1} under the collector: output {name} missing or of another shape/dtype"
            if got.tobytes() != want.tobytes():
                worst = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                return (
                    f"run {k + 1} under the collector changed output {name} (max abs diff {worst:.3g}): "
                    "refusing to measure"
                )
    return None
