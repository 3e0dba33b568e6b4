"""TensorRT 10 on the GPU: builder optimization level 3 (the default) vs level 0."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnsmith_cov.backends.base import Opt, Stage, import_problem, io_spec, module_version, staged


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:  # cuda-python < 12.8 has only the old layout (removed in 13)
        from cuda import cudart
    return cudart


def _err_name(cudart: Any, err: Any) -> str:
    name = cudart.cudaGetErrorName(err)[1]  # (err, bytes) like every cuda-python call
    return name.decode() if isinstance(name, bytes) else str(name)


def _check(result: tuple) -> Any:
    """cuda-python returns (err, *values): raise on a non-success err, else the value."""
    cudart = _cudart()
    err, *rest = result
    if err != cudart.cudaError_t.cudaSuccess:
        raise RuntimeError(f"CUDA error {_err_name(cudart, err)}")
    return rest[0] if rest else None


@functools.cache
def _logger() -> Any:
    import tensorrt as trt

    # One logger per process: TensorRT warns when builders and runtimes get different ones.
    return trt.Logger(trt.Logger.ERROR)


class TensorrtBackend:
    name = "trt"
    native_module = "libnvinfer*"

    def unavailable(self) -> str | None:
        problem = import_problem("tensorrt")
        if problem:
            return problem
        try:
            cudart = _cudart()
        except Exception as e:
            return f"CUDA runtime bindings (cuda-python) are not importable ({type(e).__name__}: {e})"
        try:
            err, count = cudart.cudaGetDeviceCount()
            if err != cudart.cudaError_t.cudaSuccess:
                return f"no usable CUDA device ({_err_name(cudart, err)})"
            if count == 0:
                return "no CUDA device found"
        except Exception as e:
            return f"no usable CUDA device ({type(e).__name__}: {e})"
        return None

    def version(self) -> str:
        return module_version("tensorrt")

    def load(self, onnx_bytes: bytes) -> Any:
        import tensorrt as trt

        logger = _logger()
        with staged(Stage.IMPORT):
            builder = trt.Builder(logger)
            network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
            parser = trt.OnnxParser(network, logger)
            if not parser.parse(onnx_bytes):
                errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
                raise RuntimeError(f"ONNX parser failed: {errors or 'no error reported'}")
        # The parser holds weights the network points into: keep all three alive together.
        return _TrtNetwork(builder, network, parser, io_spec(onnx_bytes).outputs)

    def compile(self, model: Any, opt: Opt) -> Any:
        import tensorrt as trt

        logger = _logger()
        builder, network = model.builder, model.network
        with staged(Stage.COMPILE):
            config = builder.create_builder_config()
            # Level 0 is the least the builder does (fewest tactics and fusions searched): our O0.
            # OPT keeps the default level 3, which is what users ship with.
            if opt is Opt.O0:
                config.builder_optimization_level = 0
            plan = builder.build_serialized_network(network, config)
            if plan is None:
                raise RuntimeError("build_serialized_network returned None")
            runtime = trt.Runtime(logger)
            engine = runtime.deserialize_cuda_engine(plan)
            if engine is None:
                raise RuntimeError("deserialize_cuda_engine returned None")
            context = engine.create_execution_context()
            if context is None:
                raise RuntimeError("create_execution_context returned None")
        # The runtime must outlive the engine it deserialized: keep them together.
        return _TrtExe(runtime, engine, context, model.outputs)

    def run(self, exe: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorrt as trt

        with staged(Stage.EXECUTE):
            cudart = _cudart()
            engine, context = exe.engine, exe.context
            names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
            ins = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
            outs = [n for n in names if n not in ins]
            to_dev = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
            to_host = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
            ptrs: list[int] = []
            stream = _check(cudart.cudaStreamCreate())
            try:
                # np.array, not ascontiguousarray: the latter turns 0-d arrays into 1-d ones.
                host = {n: np.array(inputs[n], dtype=trt.nptype(engine.get_tensor_dtype(n)), order="C") for n in ins}
                for n, arr in host.items():
                    if not context.set_input_shape(n, arr.shape):
                        raise RuntimeError(f"set_input_shape({n!r}, {arr.shape}) rejected")
                for n in outs:  # shapes resolved from the inputs just set
                    shape = tuple(context.get_tensor_shape(n))
                    host[n] = np.empty(shape, dtype=trt.nptype(engine.get_tensor_dtype(n)))
                for n in names:
                    # At least one byte: an empty tensor still needs a non-null address.
                    ptrs.append(_check(cudart.cudaMalloc(max(host[n].nbytes, 1))))
                    if not context.set_tensor_address(n, ptrs[-1]):
                        raise RuntimeError(f"set_tensor_address({n!r}) rejected")
                for n, p in zip(names, ptrs):
                    if n in ins:
                        _check(cudart.cudaMemcpyAsync(p, host[n].ctypes.data, host[n].nbytes, to_dev, stream))
                if not context.execute_async_v3(int(stream)):
                    raise RuntimeError("execute_async_v3 returned False")
                for n, p in zip(names, ptrs):
                    if n in outs:
                        _check(cudart.cudaMemcpyAsync(host[n].ctypes.data, p, host[n].nbytes, to_host, stream))
                _check(cudart.cudaStreamSynchronize(stream))
            finally:  # best effort: a failed free must not hide the error being raised
                for p in ptrs:
                    cudart.cudaFree(p)
                cudart.cudaStreamDestroy(stream)
            missing = [n for n in exe.outputs if n not in outs]
            if missing:
                raise RuntimeError(f"engine lacks ONNX outputs {missing}")
            return {n: host[n] for n in exe.outputs}


@dataclass
class _TrtNetwork:
    builder: Any
    network: Any
    parser: Any
    outputs: tuple[str, ...]


@dataclass
class _TrtExe:
    runtime: Any
    engine: Any
    context: Any
    outputs: tuple[str, ...]
