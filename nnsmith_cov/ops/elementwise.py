"""Elementwise operators: unary math, casts, clipping, broadcasting binary ops, Where."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, NUMERIC, SIGNED_INTS, DType
from nnsmith_cov.abstract.op import ANY_RANK, Attrs, Broadcast, Elementwise, Slot, into, same

# -- unary -----------------------------------------------------------------------


class UnaryFloat(Elementwise):
    sigs = same(FLOATS)


class Relu(UnaryFloat):
    torch_fn = torch.relu
    proxy_fn = num.relu


class LeakyRelu(UnaryFloat):
    torch_fn = F.leaky_relu


class Gelu(UnaryFloat):
    torch_fn = F.gelu


class Elu(UnaryFloat):
    torch_fn = F.elu


class Selu(UnaryFloat):
    torch_fn = F.selu


class HardSigmoid(UnaryFloat):
    torch_fn = F.hardsigmoid
    proxy_fn = num.hardsigmoid


class HardSwish(UnaryFloat):
    torch_fn = F.hardswish
    proxy_fn = num.hardswish


class Softsign(UnaryFloat):
    torch_fn = F.softsign


class Sigmoid(UnaryFloat):
    torch_fn = torch.sigmoid


class Tanh(UnaryFloat):
    torch_fn = torch.tanh


class Sin(UnaryFloat):
    torch_fn = torch.sin


class Cos(UnaryFloat):
    torch_fn = torch.cos


class Atan(UnaryFloat):
    torch_fn = torch.atan


class Erf(UnaryFloat):
    torch_fn = torch.erf


class Floor(UnaryFloat):
    torch_fn = torch.floor
    proxy_fn = num.floor


class Ceil(UnaryFloat):
    torch_fn = torch.ceil
    proxy_fn = num.ceil


class Round(UnaryFloat):
    torch_fn = torch.round
    proxy_fn = num.round


class Sign(UnaryFloat):
    torch_fn = torch.sign
    proxy_fn = num.sign


class Asin(UnaryFloat):
    vulnerable = True
    torch_fn = torch.asin
    domain = staticmethod(lambda a, x: [num.le0(x.abs() - 1)])


class Acos(UnaryFloat):
    vulnerable = True
    torch_fn = torch.acos
    domain = staticmethod(lambda a, x: [num.le0(x.abs() - 1)])


class Exp(UnaryFloat):
    vulnerable = True
    torch_fn = torch.exp
    domain = staticmethod(lambda a, x: [num.le0(x - num.log_max(x.dtype))])


class Log(UnaryFloat):
    vulnerable = True
    torch_fn = torch.log
    domain = staticmethod(lambda a, x: [num.lt0(-x)])


class Log2(UnaryFloat):
    vulnerable = True
    torch_fn = torch.log2
    domain = staticmethod(lambda a, x: [num.lt0(-x)])


class Sqrt(UnaryFloat):
    vulnerable = True
    torch_fn = torch.sqrt
    domain = staticmethod(lambda a, x: [num.le0(-x)])


class Reciprocal(UnaryFloat):
    vulnerable = True
    torch_fn = torch.reciprocal
    domain = staticmethod(lambda a, x: [num.lt0(num.tiny(x.dtype) - num.magnitude(x))])


class Abs(Elementwise):
    sigs = same(FLOATS + SIGNED_INTS)
    torch_fn = torch.abs


class Neg(Elementwise):
    sigs = same(FLOATS + SIGNED_INTS)
    torch_fn = torch.neg


class Not(Elementwise):
    sigs = same([DType.bool])
    torch_fn = torch.logical_not


class Clip(Elementwise):
    """Clip to [lo, hi]; bounds drawn from a small grid so they stay readable."""

    sigs = same(FLOATS)
    _BOUNDS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        lo, hi = sorted(draw.sample("clip.bounds", self._BOUNDS, 2))
        self.params.update(lo=lo, hi=hi)

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, a.lo, a.hi)

    @staticmethod
    def forward_proxy(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return num.clamp(x, a.lo, a.hi)


class _Cast(Elementwise):
    """Casts from floats are vulnerable: out-of-range values overflow a narrower
    float to Inf and make a float-to-int conversion undefined."""

    vulnerable = True
    target: DType

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return x.to(cls.target.torch)

    @classmethod
    def domain(cls, a: Attrs, x: torch.Tensor) -> list[torch.Tensor]:
        # Integers overflow float16 too (int32 70000 -> Inf); integer to integer wraps, never NaN.
        if cls.target is DType.bool or not (x.is_floating_point() or cls.target.is_float):
            return []
        return [num.le0(x.double().abs() - num.abs_max(cls.target.torch))]


def _cast(target: DType) -> type[_Cast]:
    name = "Cast" + target.name.capitalize().replace("Float", "F").replace("Int", "I").replace("Uint", "U")
    return type(name, (_Cast,), {"target": target, "sigs": into([d for d in ALL if d != target], target)})


CASTS = tuple(_cast(d) for d in (DType.float16, DType.float32, DType.float64, DType.int32, DType.int64, DType.bool))

# -- binary (broadcasting) -----------------------------------------------------------


class Add(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.add


class Sub(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.sub


class Mul(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.mul


class Div(Broadcast):
    vulnerable = True
    sigs = same(FLOATS, 2)
    torch_fn = torch.div

    @staticmethod
    def domain(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        # |y| away from 0, and log|x| - log|y| small enough for the quotient to fit.
        return [num.lt0(num.tiny(y.dtype) - num.magnitude(y)), num.le0(num.log_ratio(x, y) - num.log_max(x.dtype))]


class Pow(Broadcast):
    vulnerable = True
    sigs = same(FLOATS, 2)
    torch_fn = torch.pow

    @staticmethod
    def domain(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        # x > 0 (fractional exponents), and y * log(x) bounded (the log, not the power, so the loss stays finite).
        return [num.lt0(-x), num.le0(y.double() * torch.log(x.double()) - num.log_max(x.dtype))]


class Max(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.maximum


class Min(Broadcast):
    sigs = same(NUMERIC, 2)
    torch_fn = torch.minimum


class Equal(Broadcast):
    sigs = into(ALL, DType.bool, 2)
    torch_fn = torch.eq


class Greater(Broadcast):
    sigs = into(NUMERIC, DType.bool, 2)
    torch_fn = torch.gt


class Less(Broadcast):
    sigs = into(NUMERIC, DType.bool, 2)
    torch_fn = torch.lt


class And(Broadcast):
    sigs = same([DType.bool], 2)
    torch_fn = torch.logical_and


class Or(Broadcast):
    sigs = same([DType.bool], 2)
    torch_fn = torch.logical_or


class Xor(Broadcast):
    sigs = same([DType.bool], 2)
    torch_fn = torch.logical_xor


class Where(Broadcast):
    """where(cond, x, y) with 3-way broadcasting."""

    in_ranks = (ANY_RANK, ANY_RANK, ANY_RANK)
    sigs = [((DType.bool, d, d), (d,)) for d in ALL]
    torch_fn = torch.where


OPS = (
    Relu, LeakyRelu, Gelu, Elu, Selu, HardSigmoid, HardSwish, Softsign, Sigmoid, Tanh,
    Sin, Cos, Atan, Erf, Floor, Ceil, Round, Sign, Asin, Acos, Exp, Log, Log2, Sqrt,
    Reciprocal, Abs, Neg, Not, Clip, *CASTS,
    Add, Sub, Mul, Div, Pow, Max, Min, Equal, Greater, Less, And, Or, Xor, Where,
)  # fmt: skip
