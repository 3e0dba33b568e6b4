"""ONNX models from other tools: checked, and given random inputs of their declared types."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_INPUT_ELEMS = 1 << 24  # a declared input beyond this is a broken model, not a test


@dataclass
class ForeignModel:
    """A model with no GraphIR and no oracle: only crashes of the systems under test tell."""

    onnx: bytes
    inputs: dict[str, np.ndarray]  # keyed by the model's own input names
    dims: dict[str, int]  # the value each symbolic dimension was given


def read_foreign(data: bytes, seed: int, sym_dim: int) -> ForeignModel:
    """Parse and check `data`, then draw its inputs from `seed`; ValueError (one line) if broken."""
    import onnx
    from onnx import helper

    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # protobuf raises its own DecodeError, and others on garbage
        raise ValueError(f"not an ONNX model ({type(e).__name__}: {_first(e)})") from None
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as e:
        raise ValueError(f"invalid ONNX model ({_first(e)})") from None
    init = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    dims: dict[str, int] = {}
    inputs: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in init:
            continue
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            raise ValueError(f"input {value.name!r} is a {kind or 'untyped value'}, not a tensor")
        tensor = value.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"input {value.name!r} has element type {tensor.elem_type}, not drawable") from None
        if not tensor.HasField("shape"):
            raise ValueError(f"input {value.name!r} declares no shape")
        shape = []
        for d in tensor.shape.dim:
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            else:  # symbolic or unknown: every occurrence of one name gets the same small value
                shape.append(dims.setdefault(d.dim_param or f"?{value.name}", sym_dim))
        if int(np.prod(shape, dtype=np.int64)) > MAX_INPUT_ELEMS:
            raise ValueError(f"input {value.name!r} of shape {shape} is too large to draw")
        inputs[value.name] = draw(rng, dtype, tuple(shape), value.name)
    return ForeignModel(data, inputs, dims)


def draw(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Random values of one input: standard normal floats, small non-negative integers (they
    are often indices or sizes), fair booleans."""
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 4, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise ValueError(f"input {name!r} has dtype {dtype}, not drawable")


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__
