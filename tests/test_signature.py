"""Dedup signatures: headline extraction and normalization of instance-specific detail."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from nnsmith_cov.oracle.signature import (
    death_signature,
    error_signature,
    headline,
    mismatch_signature,
    normalize,
    same_signature,
    short_id,
)

PY_TRACEBACK = """\
Traceback (most recent call last):
  File "/work/main/nnsmith_cov/backends/tvm.py", line 88, in compile
    lib = relay.build(mod, target="llvm", params=params)
          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3/site-packages/tvm/relay/build_module.py", line 364, in build
    graph_json, runtime_mod, params = bld_mod.build(
                                      ~~~~~~~~~~~~~^
ValueError: operands could not be broadcast together with shapes (3,4) (5,)
"""

TVM_MESSAGE = """\
Traceback (most recent call last):
  File "/work/main/nnsmith_cov/backends/tvm.py", line 91, in run
    module.run()
  File "/usr/lib/python3/site-packages/tvm/_ffi/_ctypes/packed_func.py", line 239, in __call__
    raise_last_ffi_error()
tvm.error.InternalError: Traceback (most recent call last):
  4: TVMFuncCall
  3: tvm::runtime::GraphExecutor::Run()
  2: tvm::runtime::GraphExecutor::SetInputZeroCopy(int, DLTensor*)
  1: tvm::runtime::NDArray::CopyFromTo(DLTensor const*, DLTensor*, void*)
  0: tvm::runtime::NDArray::CopyToBytes(DLTensor const*, void*, unsigned long)
  File "/project/src/runtime/ndarray.cc", line 284
InternalError: Check failed: (ptr->ndim == ndim) is false: Mismatched ndim for v12: 3 vs 2 at 0x7f3a9c00d2e0
"""

ORT_MESSAGE = (
    "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Atan(7) node with name '/Atan_3'"
)


def test_headline_picks_exception_line_from_python_traceback():
    assert headline(PY_TRACEBACK) == "ValueError: operands could not be broadcast together with shapes (3,4) (5,)"


def test_headline_picks_exception_line_after_cpp_backtrace():
    assert headline(TVM_MESSAGE).startswith("InternalError: Check failed: (ptr->ndim == ndim) is false:")


def test_headline_of_chained_exceptions_is_the_last_raised():
    msg = (
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    g()\nKeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "a.py", line 3, in h\n    f()\n'
        "RuntimeError: compile failed\n"
    )
    assert headline(msg) == "RuntimeError: compile failed"


def test_headline_without_traceback_is_first_nonempty_line():
    assert headline("\n\n  " + ORT_MESSAGE + "\nmore detail\n") == ORT_MESSAGE
    assert headline("onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL") == (
        "onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL"
    )
    assert headline("") == ""
    assert headline("\n   \n") == ""


def test_headline_and_signature_are_capped_after_normalizing():
    assert len(headline("E" * 5000)) == 1200
    # Numbers of different lengths must not shift the cut: both messages share one signature.
    a = "x" * 280 + " size 7 but got 9 tail"
    b = "x" * 280 + " size 70000 but got 912345 tail"
    assert error_signature("ort", "execute", "opt", "E", a) == error_signature("ort", "execute", "opt", "E", b)


def test_ort_message_normalizes():
    assert normalize(ORT_MESSAGE) == (
        "[ONNXRuntimeError] : N : NOT_IMPLEMENTED : Could not find an implementation for Atan(S) node with name '/Atan'"
    )


def test_instances_of_one_bug_share_a_signature():
    a = (
        "Check failed: (ptr->ndim == ndim) is false: Mismatched ndim for i12 (shape (1, 2, 3)) at 0x7f3a9c00d2e0 "
        "in alloc5 / lv12 / gv3, node '/Conv_3/Add_output_0', w3 -> o7, v45 [4,5] scale -1.5e-3 ndarray.cc:284"
    )
    b = (
        "Check failed: (ptr->ndim == ndim) is false: Mismatched ndim for i3 (shape (7, 20, 1)) at 0x55d1c0ffee00 "
        "in alloc12 / lv1 / gv40, node '/Conv_11/Add_output_2', w0 -> o99, v1 [12,3] scale 2.0E+4 ndarray.cc:1532"
    )
    assert normalize(a) == normalize(b)
    assert error_signature("tvm", "execute", "O3", "InternalError", TVM_MESSAGE) == error_signature(
        "tvm", "execute", "O3", "InternalError", TVM_MESSAGE.replace("v12: 3 vs 2", "v7: 4 vs 1").replace("284", "9")
    )


def test_different_operator_or_error_kind_do_not_share():
    assert normalize(ORT_MESSAGE) != normalize(ORT_MESSAGE.replace("Atan", "Acos"))
    assert normalize("TypeError: bad shape (1, 2)") != normalize("ValueError: bad shape (1, 2)")
    assert normalize("unsupported Conv2d") != normalize("unsupported Conv3d")


def test_dtype_and_op_names_survive():
    text = "cannot cast float32 to int64 (uint8, float16, bfloat16, int8) in Conv2d / conv1d / MaxPool3d"
    assert normalize(text) == text
    assert normalize("T.Tensor((3, 4), dtype='float32')") == "T.Tensor((S), dtype='float32')"
    assert normalize("opset 20") == "opset N"


def test_whitespace_is_collapsed():
    assert normalize("  a \t\n  b  ") == "a b"


@given(st.text())
def test_normalize_is_idempotent(s):
    once = normalize(s)
    assert normalize(once) == once


@given(st.text(alphabet="0123456789x-._/ ()[],:eE+iwovlgalc#N", max_size=40))
def test_normalize_is_idempotent_on_number_heavy_text(s):
    once = normalize(s)
    assert normalize(once) == once


def test_composed_signatures():
    assert error_signature("ort", "compile", "O1", "Fail", ORT_MESSAGE).startswith(
        "ort/compile/O1: Fail: [ONNXRuntimeError] : N : NOT_IMPLEMENTED"
    )
    assert death_signature("tvm", "compile", "O3", "SIGSEGV") == "tvm/compile/O3: SIGSEGV"
    assert (
        mismatch_signature("tvm", "O3", "value", ["Conv", "Relu", "Add"])
        == "tvm/execute/O3: inconsistent value near Conv<-Relu<-Add"
    )


def test_short_id():
    sid = short_id("tvm/compile/O3: SIGSEGV")
    assert re.fullmatch(r"[0-9a-f]{12}", sid)
    assert sid == short_id("tvm/compile/O3: SIGSEGV") != short_id("tvm/compile/O2: SIGSEGV")


def test_shapes_of_any_rank_are_one_token():
    a = "R.Tensor((), dtype='float16') vs lv"
    b = "R.Tensor((2, 3, 4), dtype='float16') vs lv7"
    assert normalize(a) == normalize(b) == "R.Tensor((S), dtype='float16') vs lv#"
    assert normalize("R.Tensor((2,), dtype='float16')") != normalize("R.Tensor((2,), dtype='float64')")


# Real messages of PyTorch's exporter (campaign bundles): one cause each, differing only in the
# instance the exporter stopped at (value names, dims, strides, source lines).
ADAPTIVE_AVG = (
    "Unsupported: ONNX export of operator adaptive_avg_pool2d, input size not "
    "accessible. Please feel free to request support or submit a pull request on PyTorch GitHub: "
    "https://github.com/pytorch/pytorch/issues  [Caused by the value 'x.3 defined in (%x.3 : Half(6, 48, 10, *, "
    "strides=[10560, 220, 22, 1], requires_grad=0, device=cpu) = onnx::Concat[axis=3](%32, %60), scope: "
    "nnsmith_cov.materialize.torch_module.GraphModule:: # /work/main/nnsmith_cov/ops/shape.py:299:0\n    )' (type "
    "'Tensor') in the TorchScript graph."
)
ADAPTIVE_AVG_2 = (
    "Unsupported: ONNX export of operator adaptive_avg_pool2d, input size not "
    "accessible. Please feel free to request support or submit a pull request on PyTorch GitHub: "
    "https://github.com/pytorch/pytorch/issues  [Caused by the value 'x defined in (%x : Float(*, *, *, *, "
    'strides=[975, 195, 3, 1], requires_grad=0, device=cpu) = onnx::DepthToSpace[blocksize=1, mode="CRD"](%3), '
    "scope: nnsmith_cov.materialize.torch_module.GraphModule:: # /work/main/nnsmith_cov/ops/nn.py:720:0\n    )'"
)
GATHER = (
    "Failed to export a node '%26 : Long(device=cpu) = onnx::Gather[axis=0](%23, %25), scope: "
    "nnsmith_cov.materialize.torch_module.GraphModule:: # /work/main/nnsmith_cov/ops/nn.py:430:0"
)


def _torch(message: str) -> str:
    return error_signature("torch", "export", "-", "SymbolicValueError", message)


def test_one_exporter_refusal_is_one_signature_whatever_value_it_names():
    assert _torch(ADAPTIVE_AVG) == _torch(ADAPTIVE_AVG_2)
    assert "Caused by" not in _torch(ADAPTIVE_AVG) and "adaptive_avg_pool2d" in _torch(ADAPTIVE_AVG)
    assert _torch(ADAPTIVE_AVG) != _torch(ADAPTIVE_AVG.replace("adaptive_avg_pool2d", "adaptive_max_pool2d"))


def test_two_paths_in_one_error_text_give_one_signature():
    a = (
        "RuntimeError: in /work/main/.venv/lib/python3.11/site-packages/tvm/relax/frontend/onnx/onnx_frontend.py:1532 "
        "called from /project/src/relax/transform/legalize_ops.cc:284: bad axis for Gather"
    )
    b = (
        "RuntimeError: in /home/ci/venv/lib/python3.12/site-packages/tvm/relax/frontend/onnx/onnx_frontend.py:1544 "
        "called from src/relax/transform/legalize_ops.cc:291: bad axis for Gather"
    )
    assert normalize(a) == normalize(b) == "RuntimeError: in <src> called from <src>: bad axis for Gather"
    assert _torch(GATHER) == _torch(GATHER.replace("%26", "%7").replace("nn.py:430:0", "shape.py:12:4"))
    assert normalize("File utils.py(1108) failed") != normalize("File utils.py(1108) refused")


def test_ir_and_onnx_value_names_are_abstracted_op_types_are_not():
    a = "Input %onnx::Reshape_12 of node Reshape_3 has shape (2, 3); %x5 = nn.conv2d(%lv1)"
    b = "Input %onnx::Reshape_7 of node Reshape_3 has shape (4,); %x12 = nn.conv2d(%lv)"
    assert normalize(a) == normalize(b)
    assert (
        normalize("onnx::Reshape_12 failed") == normalize("onnx::Reshape_3 failed") != normalize("onnx::Slice_3 failed")
    )
    assert normalize("node with name 'Conv_3'") == normalize("node with name 'Conv_11'") == "node with name 'Conv'"
    assert normalize("Half(2, *, 3, strides=[6, 3, 1], requires_grad=0, device=cpu)") == "Half(T)"
    assert normalize("Half(2, 3)") != normalize("Float(2, 3)")


def test_a_signature_recorded_before_the_normalization_changed_still_matches():
    # as SIGNATURE_VERSION 1 wrote it: values and strides kept, the source path kept
    old = (
        "torch/export/-: SymbolicValueError: Failed to export a node '%N : Long(device=cpu) = onnx::Gather[axis=N]"
        "(%N, %N), scope: nnsmith_cov.materialize.torch_module.GraphModule:: # /work/main/nnsmith_cov/ops/nn.py:N:N"
    )
    assert same_signature(old, _torch(GATHER))
    assert not same_signature(old, _torch(GATHER.replace("Gather", "Scatter")))
    assert same_signature("tvm/compile/O3: SIGSEGV", "tvm/compile/O3: SIGSEGV")
    assert not same_signature("tvm/compile/O3: SIGSEGV", "tvm/compile/O0: SIGSEGV")


def test_tvm_symbolic_text_of_one_cause_gives_one_signature():
    # One importer defect, printed with each graph's own symbolic dims, bounds and tensor types.
    dims = [
        "Cannot broadcast symbolic dimensions T.min(T.int64(7), i0_d2) and T.min(T.int64(3), T.min(T.int64(9), i0_d2))",
        "Cannot broadcast symbolic dimensions T.min(T.int64(2), i1_d0) and i1_d0",
    ]
    assert len({error_signature("tvm", "import", "opt", "ValueError", m) for m in dims}) == 1
    types = [
        'R.subtract(R.const(1.0, "float32"), lv6) uses datatype T.float32 on the LHS (Type of '
        'R.Tensor((3, 4), dtype="float32")), and datatype T.float16 on the RHS '
        '(Type of R.Tensor(dtype="float16", ndim=2)).',
        'R.subtract(R.const(2.0, "float32"), lv2) uses datatype T.float32 on the LHS (Type of '
        'R.Tensor((), dtype="float32")), and datatype T.float16 on the RHS '
        '(Type of R.Tensor((1, 5, 6), dtype="float16")).',
    ]
    assert len({error_signature("tvm", "import", "opt", "TypeError", m) for m in types}) == 1
    # The element types and the Relax op stay: they tell causes apart.
    other = types[0].replace('dtype="float16"', 'dtype="float64"').replace("T.float16", "T.float64")
    assert error_signature("tvm", "import", "opt", "TypeError", other) != error_signature(
        "tvm", "import", "opt", "TypeError", types[0]
    )
    assert error_signature("tvm", "import", "opt", "TypeError", types[0].replace("subtract", "multiply")) != (
        error_signature("tvm", "import", "opt", "TypeError", types[0])
    )


# -- defects: one backend check, whatever operands it prints ---------------------------------

BINARY = (
    "tvm/import/opt: TypeError: Binary operators must have the same datatype for both operands. However, "
    'R.subtract(R.const(1.0, "float32"), {}) uses datatype T.float32 on the LHS'
)


def test_a_check_printing_other_operands_is_one_defect():
    from nnsmith_cov.oracle.signature import defect

    assert defect(BINARY.format("lv3")) == defect(BINARY.format("i0")) == defect(BINARY.format("gv"))
    assert (
        defect(BINARY.format("lv3")) == "tvm: TypeError: Binary operators must have the same datatype for both operands"
    )
    # ... whichever of our stages reached it, and never across backends
    assert defect(BINARY.format("lv3").replace("/import/", "/compile/")) == defect(BINARY.format("lv3"))
    assert defect(BINARY.format("lv3").replace("tvm/", "ort/")) != defect(BINARY.format("lv3"))


def test_inverse_trig_intrinsics_are_one_missing_lowering_but_other_intrinsics_are_not():
    from nnsmith_cov.oracle.signature import defect

    def missing(name: str) -> str:
        return defect(
            f'tvm/compile/opt: InternalError: unknown intrinsic ir.Op(span=None, ty=ir.Type(span=None), name="{name}", '
            'description="", arguments=(), attrs_type_key="", num_inputs=1, support_level=10)'
        )

    assert missing("tirx.acos") == missing("tirx.asinh") == missing("tirx.atan") == missing("tirx.asin")
    assert missing("tirx.acos") == "tvm: InternalError: unknown intrinsic tirx.<inverse-trig>"
    assert missing("tirx.erf") != missing("tirx.acos") and missing("tirx.sinh") != missing("tirx.asinh")


def test_symbolic_expressions_and_prim_expr_classes_fold():
    from nnsmith_cov.oracle.signature import defect

    head = "tvm/import/opt: ValueError: Cannot broadcast symbolic dimension {} with non-1 constant 5: runtime value"
    assert defect(head.format("i0_d0")) == defect(head.format("i0_d0 * i1_d2 * T.int64(4)"))
    attr = "tvm/import/opt: AttributeError: '{}' object has no attribute 'value'"
    assert defect(attr.format("Var")) == defect(attr.format("FloorDiv")) == defect(attr.format("Min"))
    assert defect(attr.format("ShapeType")) != defect(attr.format("Var"))  # not a TIR expression
    bool_min = "tvm/compile/opt: InternalError: Cannot decide {}_value for typeT.bool"
    assert defect(bool_min.format("min")) == defect(bool_min.format("max"))
    # Two different checks of one helper stay two.
    both = "tvm/import/opt: ValueError: Cannot broadcast symbolic dimensions i1_d3 and i0_d3 - both are symbolic"
    assert defect(both) != defect(head.format("i0_d0"))


def test_python_errors_and_deaths_are_generic_backend_checks_are_not():
    from nnsmith_cov.oracle.signature import is_generic

    assert is_generic("tvm/import/opt: TypeError: 'NoneType' object is not iterable")
    assert is_generic("tvm/import/opt: AttributeError: 'Var' object has no attribute 'value'")
    assert is_generic("tvm/compile/opt: SIGSEGV") and is_generic("tvm/compile/opt: timeout")
    assert not is_generic(BINARY.format("lv3"))
    assert not is_generic("tvm/compile/opt: InternalError: Check failed: (x) is false: 'NoneType' here")
