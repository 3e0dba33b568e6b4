"""Broadcasting elementwise operators: arithmetic, comparisons, logic, bitwise, Where."""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, INTS, NUMERIC, DType
from nnsmith_cov.abstract.op import ANY_RANK, Attrs, Broadcast, Slot, into, same
from nnsmith_cov.abstract.op_facts import Domain, Monotone
from nnsmith_cov.ops.onnx_node import as_node, integers

# ONNX's own schemas, not the exporter's: below these opsets the exporter wraps such
# integers in Casts only where it still knows the operand's dtype (after a Concat, or with
# symbolic dims, it does not) and otherwise writes a node ONNX refuses.
_SMALL_INT_ARITH = {DType.int8: 14, DType.uint8: 14}  # Add, Sub, Mul take int8/uint8 from 14
_INT_MAX_MIN = {d: 12 for d in INTS}  # Max, Min take integers from 12


class Add(Broadcast):
    monotone = Monotone.RISING
    sigs = same(NUMERIC, 2)
    torch_fn = torch.add
    min_opset_for = _SMALL_INT_ARITH


class Sub(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.sub
    min_opset_for = _SMALL_INT_ARITH


class Mul(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.mul
    min_opset_for = _SMALL_INT_ARITH


class Div(Broadcast):
    input_domains = (None, Domain(-math.inf, math.inf, nonzero=True))
    narrow_rank = 4
    vulnerable = True
    sigs = same(FLOATS, 2)
    torch_fn = torch.div

    @staticmethod
    def domain(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        # |y| away from 0, and log|x| - log|y| small enough for the quotient to fit.
        return [num.lt0(num.tiny(y.dtype) - num.magnitude(y)), num.le0(num.log_ratio(x, y) - num.log_max(x.dtype))]


class Pow(Broadcast):
    narrow_rank = 3
    vulnerable = True
    sigs = same(FLOATS, 2)
    torch_fn = torch.pow

    @staticmethod
    def domain(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        # x > 0 (fractional exponents), and y * log(x) bounded (the log, not the power, so the loss stays finite).
        return [num.lt0(-x), num.le0(y.double() * torch.log(x.double()) - num.log_max(x.dtype))]


class Max(Broadcast):
    monotone = Monotone.MOVES
    sigs = same(NUMERIC, 2)
    torch_fn = torch.maximum
    min_opset_for = _INT_MAX_MIN


class Min(Broadcast):
    monotone = Monotone.MOVES
    sigs = same(NUMERIC, 2)
    torch_fn = torch.minimum
    min_opset_for = _INT_MAX_MIN


class Equal(Broadcast):
    sigs = into(ALL, DType.bool, 2)
    torch_fn = torch.eq


class Greater(Broadcast):
    sigs = into(NUMERIC, DType.bool, 2)
    torch_fn = torch.gt


class Less(Broadcast):
    sigs = into(NUMERIC, DType.bool, 2)
    torch_fn = torch.lt


class GreaterEqual(Broadcast):
    sigs = into(NUMERIC, DType.bool, 2)
    torch_fn = torch.ge


class LessEqual(Broadcast):
    sigs = into(NUMERIC, DType.bool, 2)
    torch_fn = torch.le


class And(Broadcast):
    sigs = same([DType.bool], 2)
    torch_fn = torch.logical_and


class Or(Broadcast):
    sigs = same([DType.bool], 2)
    torch_fn = torch.logical_or


class Xor(Broadcast):
    sigs = same([DType.bool], 2)
    torch_fn = torch.logical_xor


class BitwiseAnd(Broadcast):
    sigs = same(INTS, 2)
    min_opset = 18  # below, the exporter takes bitwise_and of booleans only

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.bitwise_and(*integers(x, y))


class _BitwiseNode(Broadcast):
    """`torch_fn` exported as the ONNX node `onnx_op`: the exporter takes it of booleans only."""

    sigs = same(INTS, 2)
    min_opset = 18
    onnx_op: ClassVar[str]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return as_node(cls.torch_fn, cls.onnx_op, integers(x, y))


class BitwiseOr(_BitwiseNode):
    torch_fn, onnx_op = torch.bitwise_or, "BitwiseOr"


class BitwiseXor(_BitwiseNode):
    torch_fn, onnx_op = torch.bitwise_xor, "BitwiseXor"


class BitShift(Broadcast):
    """x << (y % 8) or x >> (y % 8) on uint8 (ONNX BitShift; the exporter lowers other integer
    shifts to Pow and Mul/Div). Shifts are wrapped below the width, where every backend agrees."""

    pointwise = False  # (as Reciprocal, in ops.elementwise)
    sigs = same([DType.uint8], 2)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["left"] = draw.coin("bitshift.left")

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = integers(x, y)
        shift = torch.bitwise_left_shift if a.left else torch.bitwise_right_shift
        return shift(x, torch.remainder(y, 8))


class Where(Broadcast):
    """where(cond, x, y) with 3-way broadcasting."""

    in_ranks = (ANY_RANK, ANY_RANK, ANY_RANK)
    sigs = [((DType.bool, d, d), (d,)) for d in ALL]
    torch_fn = torch.where


OPS = (
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Equal,
    Greater,
    Less,
    And,
    Or,
    Xor,
    Where,
    GreaterEqual,
    LessEqual,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    BitShift,
)
