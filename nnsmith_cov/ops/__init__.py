"""The operator specification library: the op set is this explicit tuple."""

from __future__ import annotations

from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.ops import (
    binary,
    conv,
    elementwise,
    index,
    linalg,
    norm,
    pool,
    quantize,
    reduce,
    resample,
    shape,
    slicing,
)

# The generator draws ops by their index in ALL_OPS, so this order is part of what a seed
# means: the elementwise, neural-network and layout families are listed one by one in the order they
# have always had, whichever module holds each.
e, b = elementwise, binary
_ELEMENTWISE = (
    e.Relu, e.LeakyRelu, e.Gelu, e.Elu, e.Selu, e.HardSigmoid, e.HardSwish, e.Softsign, e.Sigmoid, e.Tanh,
    e.Sin, e.Cos, e.Atan, e.Erf, e.Floor, e.Ceil, e.Round, e.Sign, e.Asin, e.Acos, e.Exp, e.Log, e.Log2, e.Sqrt,
    e.Reciprocal, e.Abs, e.Neg, e.Not, e.Clip, *e.CASTS,
    b.Add, b.Sub, b.Mul, b.Div, b.Pow, b.Max, b.Min, b.Equal, b.Greater, b.Less, b.And, b.Or, b.Xor, b.Where,
    e.Softplus, e.Mish, e.Asinh, e.Celu, e.ThresholdedRelu, e.Shrink, e.IsNaN, e.IsInf, e.BitwiseNot, e.TypeAs,
    b.GreaterEqual, b.LessEqual, b.BitwiseAnd, b.BitwiseOr, b.BitwiseXor, b.BitShift,
)  # fmt: skip
del e, b
_NN = (
    conv.Conv1d, conv.Conv2d, conv.ConvTranspose1d, conv.ConvTranspose2d,
    pool.MaxPool1d, pool.MaxPool2d, pool.AvgPool1d, pool.AvgPool2d, pool.AdaptiveAvgPool2d, pool.AdaptiveMaxPool2d,
    norm.BatchNorm, norm.InstanceNorm, norm.LayerNorm, norm.PReLU,
    norm.Softmax, norm.LogSoftmax, linalg.Linear, linalg.MatMul, linalg.Addmm,
    resample.Interpolate, resample.PixelShuffle, resample.PixelUnshuffle,
    pool.LpPool2d, pool.GlobalMaxPool, pool.GlobalLpPool, norm.LocalResponseNorm, linalg.Einsum,
    resample.SpaceToDepth, resample.GridSample, resample.AffineGrid,
)  # fmt: skip
_LAYOUT = (
    shape.Reshape, shape.Flatten, shape.Transpose, shape.Permute, shape.Squeeze, shape.Unsqueeze, shape.Expand,
    *slicing.OPS,
    shape.Tile, shape.Tril, shape.Triu, shape.CumSum, shape.TopK, shape.Flip, shape.Roll,
)  # fmt: skip
ALL_OPS: tuple[type[OpSpec], ...] = (*_ELEMENTWISE, *_NN, *_LAYOUT, *reduce.OPS, *index.OPS, *quantize.OPS)
# Each family module lists its ops in OPS: together they are the library, each op once.
MODULES = (elementwise, binary, conv, pool, norm, linalg, resample, shape, slicing, reduce, index, quantize)
assert sorted(id(op) for m in MODULES for op in m.OPS) == sorted(map(id, ALL_OPS)), "ALL_OPS lists each family op once"


_BY_NAME = {op.name(): op for op in ALL_OPS}
assert len(_BY_NAME) == len(ALL_OPS), "operator names must be unique"


def op_by_name(name: str) -> type[OpSpec]:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}") from None


def is_op(name: str) -> bool:
    return name in _BY_NAME


def select_ops(names: list[str] | None) -> tuple[type[OpSpec], ...]:
    """Ops by name (case-insensitive); None means all. Unknown names raise ValueError."""
    if not names:
        return ALL_OPS
    lower = {n.lower(): op for n, op in _BY_NAME.items()}
    unknown = [n for n in names if n.lower() not in lower]
    if unknown:
        raise ValueError(f"unknown operator(s): {', '.join(unknown)}")
    return tuple(dict.fromkeys(lower[n.lower()] for n in names))
