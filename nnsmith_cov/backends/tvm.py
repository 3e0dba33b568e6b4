"""TVM (Relax) on LLVM: the CPU pipeline with graph-level optimizations vs a plain lowering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnsmith_cov.backends.base import Opt, Stage, import_problem, module_version, staged

# Graph-level rewrites applied before the CPU pipeline at OPT. Each is a pass a
# user can ask Relax for; together they reach most of relax/transform.
_OPT_PASSES = (
    "DecomposeOpsForInference",
    "CanonicalizeBindings",
    "EliminateCommonSubexpr",
    "FoldConstant",
    "RemoveRedundantReshape",
    "ReorderPermuteDimsAfterConcat",
    "AdjustMatmulOrder",
    "ExpandMatmulOfSum",
    "CombineParallelMatmul",
    "DeadCodeElimination",
)

# Why not relax_pipeline="zero": it legalizes and fuses but stops before the VM
# lowering passes, so relax.build cannot emit it. The generic "default" build
# pipeline legalizes and lowers without folding or fusing: that is our O0, with
# TIR vectorization, CSE and storage rewriting off as well.
_O0_CONFIG = {"tirx.disable_vectorize": True, "tirx.disable_cse_tir": True, "tirx.disable_storage_rewrite": True}


class TvmBackend:
    name = "tvm"
    # The compiler: Relax and TIR passes, arith, codegen, with LLVM and z3 linked in statically.
    # libtvm_runtime.so (the VM, tensors) and tvm_ffi's library hold no compiler code.
    native_module = "libtvm_compiler.so"

    def unavailable(self) -> str | None:
        return import_problem("tvm", "tvm.relax.frontend.onnx")

    def version(self) -> str:
        return module_version("tvm")

    @staticmethod
    def load_libraries() -> None:
        """libtvm_runtime and libtvm_compiler, searched for and loaded as `tvm.base` does (its
        search path, its load modes), without importing TVM's package: `import tvm` later finds
        them loaded. Under the binary collector the worker's followed import thread runs only
        this, and TVM's Python import, which Frida made about ten times slower than native, runs
        natively after (scripts/bench_coverage.py --collector binary --backend tvm)."""
        import importlib.util
        from pathlib import Path

        from tvm_ffi.libinfo import load_lib_ctypes

        spec = importlib.util.find_spec("tvm")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("tvm is not installed")
        # tvm/libinfo.py imports only os, pathlib and tvm_ffi: run it alone, not as part of `tvm`
        path = Path(next(iter(spec.submodule_search_locations))) / "libinfo.py"
        info_spec = importlib.util.spec_from_file_location("_nnsmith_cov_tvm_libinfo", path)
        if info_spec is None or info_spec.loader is None:
            raise ImportError(f"cannot read {path}")
        libinfo = importlib.util.module_from_spec(info_spec)
        info_spec.loader.exec_module(libinfo)
        where = libinfo.package_lib_paths()
        load_lib_ctypes("tvm", "tvm_runtime", "RTLD_GLOBAL", extra_lib_paths=where)
        load_lib_ctypes("tvm", "tvm_compiler", "RTLD_LOCAL", extra_lib_paths=where)

    def load(self, onnx_bytes: bytes) -> Any:
        import onnx
        from tvm.relax.frontend.onnx import from_onnx

        with staged(Stage.IMPORT):
            model = onnx.load_from_string(onnx_bytes)
            mod = from_onnx(model, keep_params_in_input=False)
        return _TvmModel(mod, [i.name for i in model.graph.input], [o.name for o in model.graph.output])

    def roundtrip(self, model: Any) -> Any:
        """The imported module printed as TVMScript and parsed back, which must give the same
        module; compiling the parsed one lets a parse that changes meaning show in the outputs.

        Tensor constants become parameters for the trip and are bound again after it: the
        printer writes them as `metadata[...]` references, which the parser reads only with the
        metadata section, and printing that section crashes TVM 0.27 (a segfault in ToJSONGraph).
        Scalars the printer writes as literals stay inline.
        """
        import tvm
        from tvm import relax

        with staged(Stage.ROUNDTRIP):
            lifted, params = _lift_constants(model.mod)
            parsed = tvm.script.from_source(lifted.script())
            tvm.ir.assert_structural_equal(lifted, parsed, map_free_vars=True)
            mod = relax.transform.BindParams("main", params)(parsed)
        return _TvmModel(mod, model.inputs, model.outputs)

    def compile(self, model: Any, opt: Opt) -> Any:
        import tvm
        from tvm import relax

        mod = model.mod
        target = tvm.target.Target("llvm")
        with staged(Stage.COMPILE):
            if opt is Opt.OPT:
                with tvm.transform.PassContext(opt_level=3):
                    mod = tvm.transform.Sequential([getattr(relax.transform, p)() for p in _OPT_PASSES])(mod)
                    pipeline = relax.backend.cpu_generic.get_default_pipeline(target)
                    ex = relax.build(mod, target=target, relax_pipeline=pipeline)
            else:
                with tvm.transform.PassContext(opt_level=0, config=_O0_CONFIG):
                    ex = relax.build(mod, target=target, relax_pipeline="default")
            vm = relax.VirtualMachine(ex, tvm.cpu())
        return _TvmExe(vm, model.inputs, model.outputs)

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tvm

        with staged(Stage.EXECUTE):
            # np.array, not ascontiguousarray: the latter turns 0-d arrays into 1-d ones.
            args = [tvm.runtime.tensor(np.array(inputs[n], order="C")) for n in exe.inputs if n in inputs]
            out = exe.vm["main"](*args)
            outs = [out] if hasattr(out, "numpy") else list(out)
            if len(outs) != len(exe.outputs):
                raise RuntimeError(f"{len(outs)} outputs returned, model declares {len(exe.outputs)}")
            return {n: _to_numpy(o) for n, o in zip(exe.outputs, outs)}


_LIFTED = "lifted_const"  # names of lifted constants: our models name their inputs i<v>


def _lift_constants(mod: Any) -> tuple[Any, dict[str, Any]]:
    """`mod` with main's tensor constants turned into extra parameters, and their values by name."""
    import tvm
    from tvm import relax

    lifted: list[tuple[Any, Any]] = []

    @relax.expr_functor.mutator
    class Lift(relax.PyExprMutator):
        def visit_generic_const_(self, op: Any) -> Any:
            if len(op.value.shape) == 0 and "metadata" not in op.script():
                return op  # a scalar the printer writes as a literal (not uint8, say)
            var = relax.Var(f"{_LIFTED}{len(lifted)}", op.ty)
            lifted.append((var, op.value))
            return var

    gv = mod.get_global_var("main")
    main = mod[gv]
    body = Lift(mod).visit_expr(main.body)
    params = [*main.params, *(v for v, _ in lifted)]
    funcs = dict(mod.functions.items())
    funcs[gv] = relax.Function(params, body, main.ret_ty, main.is_pure, main.attrs, main.span)
    values = {f"{_LIFTED}{k}": value for k, (_, value) in enumerate(lifted)}
    return tvm.IRModule(funcs, attrs=mod.attrs), values


def _to_numpy(out: Any) -> np.ndarray:
    # The Relax frontend turns int64 values computed from constants alone into shape
    # values (R.Shape); the VM then returns a Shape, whose entries are the tensor's.
    if hasattr(out, "numpy"):
        return np.asarray(out.numpy())
    return np.asarray(list(out), dtype=np.int64)


@dataclass
class _TvmModel:
    mod: Any  # tvm.IRModule
    inputs: list[str]
    outputs: list[str]


@dataclass
class _TvmExe:
    vm: Any  # relax.VirtualMachine
    inputs: list[str]
    outputs: list[str]
