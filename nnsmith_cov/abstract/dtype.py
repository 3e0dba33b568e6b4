"""Tensor element types and their names in torch, numpy and ONNX."""

from __future__ import annotations

import enum

import numpy as np
import onnx
import torch


class DType(enum.Enum):
    """An element type; the value is the short name used in GraphIR JSON."""

    float16 = "f16"
    float32 = "f32"
    float64 = "f64"
    int8 = "i8"
    uint8 = "u8"
    int32 = "i32"
    int64 = "i64"
    bool = "bool"

    @property
    def torch(self) -> torch.dtype:
        return _TORCH[self]

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.name)

    @property
    def onnx(self) -> int:
        return _ONNX[self]

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @classmethod
    def from_short(cls, short: str) -> DType:
        return cls(short)

    @classmethod
    def from_torch(cls, dt: torch.dtype) -> DType:
        return _FROM_TORCH[dt]

    @classmethod
    def from_onnx(cls, elem_type: int) -> DType:
        return _FROM_ONNX[elem_type]

    def __repr__(self) -> str:
        return self.value


_TORCH = {
    DType.float16: torch.float16,
    DType.float32: torch.float32,
    DType.float64: torch.float64,
    DType.int8: torch.int8,
    DType.uint8: torch.uint8,
    DType.int32: torch.int32,
    DType.int64: torch.int64,
    DType.bool: torch.bool,
}
_FROM_TORCH = {v: k for k, v in _TORCH.items()}

_ONNX = {
    DType.float16: onnx.TensorProto.FLOAT16,
    DType.float32: onnx.TensorProto.FLOAT,
    DType.float64: onnx.TensorProto.DOUBLE,
    DType.int8: onnx.TensorProto.INT8,
    DType.uint8: onnx.TensorProto.UINT8,
    DType.int32: onnx.TensorProto.INT32,
    DType.int64: onnx.TensorProto.INT64,
    DType.bool: onnx.TensorProto.BOOL,
}
_FROM_ONNX = {v: k for k, v in _ONNX.items()}

FLOATS: tuple[DType, ...] = (DType.float16, DType.float32, DType.float64)
INTS: tuple[DType, ...] = (DType.int8, DType.uint8, DType.int32, DType.int64)
SIGNED_INTS: tuple[DType, ...] = (DType.int8, DType.int32, DType.int64)
NUMERIC: tuple[DType, ...] = FLOATS + INTS
ALL: tuple[DType, ...] = NUMERIC + (DType.bool,)
