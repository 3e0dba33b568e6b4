"""Reductions over drawn axes (sum, mean, max, min, prod, log-sum-exp, norms, sum of squares)
and arg-reductions (argmax, argmin)."""

from __future__ import annotations

import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.dtype import ALL, FLOATS, NUMERIC, DType
from nnsmith_cov.abstract.op import Attrs, into, same
from nnsmith_cov.abstract.op_facts import Elements, Monotone
from nnsmith_cov.abstract.reduce_meta import ArgReduce, Reduce
from nnsmith_cov.ops.onnx_node import as_node


class ReduceSum(Reduce):
    monotone = Monotone.RISING
    sigs = same(NUMERIC)  # dtype=x.dtype: torch would otherwise widen integer sums to int64

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.sum(x, dtype=x.dtype) if dims is None else torch.sum(x, dims, keepdim, dtype=x.dtype)


class ReduceMean(Reduce):
    monotone = Monotone.RISING
    sigs = same(FLOATS)

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.mean(x) if dims is None else torch.mean(x, dims, keepdim)


class ReduceMax(Reduce):
    elements = Elements.ONE_OF
    monotone = Monotone.MOVES
    sigs = same(ALL)
    min_opset_for = {DType.int8: 12, DType.uint8: 12, DType.bool: 20}

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.amax(x, () if dims is None else dims, keepdim)


class ReduceMin(Reduce):
    elements = Elements.ONE_OF
    monotone = Monotone.MOVES
    sigs = same(ALL)
    min_opset_for = ReduceMax.min_opset_for

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.amin(x, () if dims is None else dims, keepdim)


class ReduceProd(Reduce):
    """The product of all elements (rank-0 output).

    torch.prod(x, dim) is left out: when x is a weight, or made from weights by
    shape ops, the exporter declares ReduceProd's output as if every axis were
    reduced, and the ONNX model fails its own shape check (exporter defect).
    """

    vulnerable = True  # overflows (float16 in particular)
    sigs = same(NUMERIC)
    only_all = True

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.prod(x, dtype=x.dtype)

    @staticmethod
    def domain(a: Attrs, x: torch.Tensor) -> list[torch.Tensor]:
        # Every partial product must fit the dtype, whatever order torch multiplies in
        # (float16 products accumulate in float16): the factors larger than 1 in
        # magnitude, together, must fit. Integers wrap, never Inf.
        if not x.is_floating_point():
            return []
        return [num.le0(torch.log(x.double().abs() + num.EPS).clamp(min=0).sum() - num.log_max(x.dtype))]


class ReduceLogSumExp(Reduce):
    """torch.logsumexp: log of the sum of exp, computed around the maximum (never overflows)."""

    sigs = same(FLOATS)

    @staticmethod
    def reduce(x, dims, keepdim):
        if x.dim() == 0:
            return torch.logsumexp(x, ())  # the exporter's axes=[0] for a 0-d input is invalid ONNX
        return torch.logsumexp(x, tuple(range(x.dim())) if dims is None else dims, keepdim)


class _VectorNorm(Reduce):
    monotone = Monotone.MAGNITUDE
    sigs = same(FLOATS)
    ord: int

    @classmethod
    def reduce(cls, x, dims, keepdim):
        return torch.linalg.vector_norm(x, cls.ord, dims, keepdim)


class ReduceL1(_VectorNorm):
    ord = 1


class ReduceL2(_VectorNorm):
    ord = 2


class ReduceSumSquare(Reduce):
    """The sum of x * x, exported as ONNX ReduceSumSquare (no torch op lowers to it). ONNX takes
    no 8-bit integers for it; dtype=x.dtype stops torch widening int32 sums."""

    monotone = Monotone.MAGNITUDE
    sigs = same(FLOATS + (DType.int32, DType.int64))
    min_opset = 18  # axes as an input

    @staticmethod
    def reduce(x, dims, keepdim):
        axes = [] if dims is None else list(dims)
        fn = lambda t: (t * t).sum(dims if dims is not None else (), keepdim, dtype=t.dtype)
        return as_node(fn, "ReduceSumSquare", [x], [axes] if axes else [], {"keepdims_i": int(keepdim)})


class ArgMax(ArgReduce):
    sigs = into(NUMERIC, DType.int64)
    fn = staticmethod(torch.argmax)


class ArgMin(ArgReduce):
    sigs = into(NUMERIC, DType.int64)
    fn = staticmethod(torch.argmin)


OPS = (
    ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ArgMax, ArgMin,
    ReduceLogSumExp, ReduceL1, ReduceL2, ReduceSumSquare,
)  # fmt: skip
