"""Reductions over drawn axes (sum, mean, max, min, prod) and arg-reductions (argmax, argmin)."""

from __future__ import annotations

import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.dtype import ALL, FLOATS, NUMERIC, DType
from nnsmith_cov.abstract.op import Attrs, into, same
from nnsmith_cov.abstract.reduce_meta import ArgReduce, Reduce


class ReduceSum(Reduce):
    sigs = same(NUMERIC)  # dtype=x.dtype: torch would otherwise widen integer sums to int64

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.sum(x, dtype=x.dtype) if dims is None else torch.sum(x, dims, keepdim, dtype=x.dtype)


class ReduceMean(Reduce):
    sigs = same(FLOATS)

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.mean(x) if dims is None else torch.mean(x, dims, keepdim)


class ReduceMax(Reduce):
    sigs = same(ALL)

    @staticmethod
    def reduce(x, dims, keepdim):
        return torch.amax(x, () if dims is None else dims, keepdim)


class ReduceMin(Reduce):
    sigs = same(ALL)

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


class ArgMax(ArgReduce):
    sigs = into(NUMERIC, DType.int64)
    fn = staticmethod(torch.argmax)


class ArgMin(ArgReduce):
    sigs = into(NUMERIC, DType.int64)
    fn = staticmethod(torch.argmin)


OPS = (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ArgMax, ArgMin)
