"""Unary elementwise operators: math, activations, casts, clipping, tests for NaN/Inf (the
broadcasting binary ones: `ops.binary`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, INTS, SIGNED_INTS, DType
from nnsmith_cov.abstract.op import ANY_RANK, MAX_RANK, Attrs, Elementwise, OpSpec, Sig, Slot, into, same
from nnsmith_cov.abstract.op_facts import Domain, Monotone, ValueMap
from nnsmith_cov.abstract.tensor import AbsTensor
from nnsmith_cov.ops.onnx_node import as_node, integers

# -- unary -----------------------------------------------------------------------


class UnaryFloat(Elementwise):
    pointwise = True
    sigs = same(FLOATS)


class Relu(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.MOVES
    torch_fn = torch.relu
    proxy_fn = num.relu


class LeakyRelu(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = F.leaky_relu


class Gelu(UnaryFloat):
    value_map = ValueMap(dips=((-0.7517916, -0.1699702),))
    torch_fn = F.gelu


class Elu(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = F.elu


class Selu(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = F.selu


class HardSigmoid(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = F.hardsigmoid
    proxy_fn = num.hardsigmoid


class HardSwish(UnaryFloat):
    value_map = ValueMap(dips=((-1.5, -0.375),))
    torch_fn = F.hardswish
    proxy_fn = num.hardswish


class Softsign(UnaryFloat):
    inverse = staticmethod(lambda b: b / (1 - abs(b)) if abs(b) < 0.99 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = F.softsign


class Sigmoid(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = torch.sigmoid


class Tanh(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = torch.tanh


class Sin(UnaryFloat):
    value_map = ValueMap()
    torch_fn = torch.sin


class Cos(UnaryFloat):
    value_map = ValueMap()
    torch_fn = torch.cos


class Atan(UnaryFloat):
    inverse = staticmethod(lambda b: math.tan(b) if abs(b) < 1.5 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = torch.atan


class Erf(UnaryFloat):
    value_map = ValueMap()
    monotone = Monotone.RISING
    torch_fn = torch.erf


class Floor(UnaryFloat):
    value_map = ValueMap(whole=True)
    monotone = Monotone.MOVES
    torch_fn = torch.floor
    proxy_fn = num.floor


class Ceil(UnaryFloat):
    value_map = ValueMap(whole=True)
    monotone = Monotone.MOVES
    torch_fn = torch.ceil
    proxy_fn = num.ceil


class Round(UnaryFloat):
    value_map = ValueMap(whole=True)
    monotone = Monotone.MOVES
    torch_fn = torch.round
    proxy_fn = num.round


class Sign(UnaryFloat):
    value_map = ValueMap(whole=True)
    monotone = Monotone.MOVES
    torch_fn = torch.sign
    proxy_fn = num.sign


class Asin(UnaryFloat):
    inverse = staticmethod(lambda b: math.sin(b) if abs(b) <= math.pi / 2 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    input_domains = (Domain(-1.0, 1.0),)
    narrow_rank = 0
    vulnerable = True
    torch_fn = torch.asin
    domain = staticmethod(lambda a, x: [num.le0(x.abs() - 1)])


class Acos(UnaryFloat):
    inverse = staticmethod(lambda b: math.cos(b) if 0 <= b <= math.pi else None)
    value_map = ValueMap()
    monotone = Monotone.FALLING
    input_domains = (Domain(-1.0, 1.0),)
    narrow_rank = 0
    vulnerable = True
    torch_fn = torch.acos
    domain = staticmethod(lambda a, x: [num.le0(x.abs() - 1)])


class Exp(UnaryFloat):
    inverse = staticmethod(lambda b: math.log(b) if 1e-30 < b < 1e30 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    vulnerable = True
    torch_fn = torch.exp
    domain = staticmethod(lambda a, x: [num.le0(x - num.log_max(x.dtype))])


class Log(UnaryFloat):
    inverse = staticmethod(lambda b: math.exp(b) if abs(b) < 60 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    input_domains = (Domain(0.0, math.inf, lo_open=True),)
    narrow_rank = 1
    vulnerable = True
    torch_fn = torch.log
    domain = staticmethod(lambda a, x: [num.lt0(-x)])


class Log2(UnaryFloat):
    inverse = staticmethod(lambda b: 2.0**b if abs(b) < 60 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    input_domains = (Domain(0.0, math.inf, lo_open=True),)
    narrow_rank = 1
    vulnerable = True
    torch_fn = torch.log2
    domain = staticmethod(lambda a, x: [num.lt0(-x)])


class Sqrt(UnaryFloat):
    inverse = staticmethod(lambda b: b * b if b >= 0 else None)
    value_map = ValueMap()
    monotone = Monotone.RISING
    input_domains = (Domain(0.0, math.inf),)
    narrow_rank = 2
    vulnerable = True
    torch_fn = torch.sqrt
    domain = staticmethod(lambda a, x: [num.le0(-x)])


class Reciprocal(UnaryFloat):
    inverse = staticmethod(lambda b: 1 / b if b != 0 else None)
    # Pointwise, but the range analysis has never evaluated it on value sets: declaring it
    # would change which graphs the generator drops.
    pointwise = False
    input_domains = (Domain(-math.inf, math.inf, nonzero=True),)
    narrow_rank = 4
    vulnerable = True
    torch_fn = torch.reciprocal
    domain = staticmethod(lambda a, x: [num.lt0(num.tiny(x.dtype) - num.magnitude(x))])


class Softplus(UnaryFloat):
    monotone = Monotone.RISING
    torch_fn = F.softplus  # beta 1: one ONNX Softplus (other betas scale around it)


class Mish(UnaryFloat):
    """The exporter decomposes F.mish into Softplus, Tanh and Mul: exported as ONNX Mish."""

    value_map = ValueMap(F.mish, dips=((-1.192431, -0.3088435),))
    min_opset = 18

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return as_node(F.mish, "Mish", [x])


class Asinh(UnaryFloat):
    """Exported as ONNX Asinh, for which the exporter has no symbolic."""

    monotone = Monotone.RISING

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return as_node(torch.asinh, "Asinh", [x])


class Celu(Elementwise):
    pointwise = True
    monotone = Monotone.RISING
    # ONNX Celu takes float32 only: the exporter casts float64 around it but makes an
    # invalid model of float16. (TVM has no Celu converter; its probe drops it there.)
    sigs = same((DType.float32, DType.float64))
    min_opset = 12
    _ALPHAS = (0.5, 1.0, 2.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["alpha"] = draw.choice("celu.alpha", self._ALPHAS)

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return F.celu(x, a.alpha)

    @staticmethod
    def forward_proxy(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return num.rising(lambda t: F.celu(t, a.alpha))(x)  # its slope underflows far below 0


class ThresholdedRelu(Elementwise):
    """x where x > alpha, else 0 (F.threshold); exported as ONNX ThresholdedRelu, since the
    exporter refuses a non-zero threshold."""

    pointwise = True
    monotone = Monotone.RISING
    sigs = same(FLOATS)
    _ALPHAS = (-0.5, 0.0, 0.5, 1.0, 2.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["alpha"] = draw.choice("thresholded_relu.alpha", self._ALPHAS)

    @classmethod
    def monotone_for(cls, a: Attrs) -> Monotone:
        # Below a negative threshold it lifts x to 0: rising only for a threshold >= 0.
        return cls.monotone if a.alpha >= 0 else Monotone.NONE

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return as_node(lambda t: F.threshold(t, a.alpha, 0.0), "ThresholdedRelu", [x], attrs={"alpha_f": a.alpha})

    @staticmethod
    def forward_proxy(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        # ReLU's proxy: slope ALPHA below the threshold, where the true derivative is 0.
        step = num.proxy(lambda t: F.threshold(t, a.alpha, 0.0), lambda t: torch.where(t > a.alpha, 1.0, num.ALPHA))
        return step(x)


class Shrink(Elementwise):
    """F.hardshrink or F.softshrink: 0 within [-lambd, lambd]; outside, x or x moved towards 0
    by lambd. The exporter decomposes both into Where; exported as ONNX Shrink (bias 0 or lambd)."""

    pointwise = True
    monotone = Monotone.RISING
    sigs = same(FLOATS)
    _LAMBDS = (0.25, 0.5, 1.0, 2.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params.update(lambd=draw.choice("shrink.lambd", self._LAMBDS), soft=draw.coin("shrink.soft"))

    @staticmethod
    def shrink(a: Attrs) -> Callable[[torch.Tensor], torch.Tensor]:
        fn = F.softshrink if a.soft else F.hardshrink
        return lambda t: fn(t, a.lambd)

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        attrs = {"lambd_f": a.lambd, "bias_f": a.lambd if a.soft else 0.0}
        return as_node(cls.shrink(a), "Shrink", [x], attrs=attrs)

    @classmethod
    def forward_proxy(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        # Slope ALPHA within [-lambd, lambd], where both shrinks are flat at 0.
        return num.proxy(cls.shrink(a), lambda t: torch.where(t.abs() > a.lambd, 1.0, num.ALPHA))(x)


class IsNaN(Elementwise):
    pointwise = True
    sigs = into(FLOATS, DType.bool)
    torch_fn = torch.isnan


class IsInf(Elementwise):
    pointwise = True
    sigs = into(FLOATS, DType.bool)
    torch_fn = torch.isinf


class Abs(Elementwise):
    inverse = staticmethod(lambda b: 0.0 if b == 0 else None)  # one-to-one at 0 only
    pointwise = True
    value_map = ValueMap()
    sigs = same(FLOATS + SIGNED_INTS)
    torch_fn = torch.abs
    proxy_fn = num.absolute


class Neg(Elementwise):
    inverse = staticmethod(lambda b: -b)
    pointwise = True
    value_map = ValueMap()
    monotone = Monotone.FALLING
    sigs = same(FLOATS + SIGNED_INTS)
    torch_fn = torch.neg


class Not(Elementwise):
    pointwise = True
    sigs = same([DType.bool])
    torch_fn = torch.logical_not


class BitwiseNot(Elementwise):
    """Exported as ONNX BitwiseNot: the exporter takes bitwise_not of booleans only."""

    pointwise = True
    sigs = same(INTS)
    min_opset = 18

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return as_node(torch.bitwise_not, "BitwiseNot", integers(x))


class Clip(Elementwise):
    """Clip to [lo, hi]; bounds drawn from a small grid so they stay readable.

    ONNX forms (the draw "clip.form"), each what torch.clamp exports as: "both" (Clip with
    min and max), "min" (clamp(min=): max left out) and "max" (clamp(max=): min given as
    an empty input name). Graphs stored before the form was drawn are "both".
    """

    pointwise = True
    monotone = Monotone.MOVES
    sigs = same(FLOATS)
    _BOUNDS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
    FORMS = ("both", "min", "max")
    FORM_DRAW = "clip.form"  # the label the form is drawn under: the scheduler's "form" arms

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        lo, hi = sorted(draw.sample("clip.bounds", self._BOUNDS, 2))
        form = draw.choice(self.FORM_DRAW, self.FORMS)
        self.params.update(lo=lo if form != "max" else None, hi=hi if form != "min" else None, form=form)

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=a.lo, max=a.hi)

    @staticmethod
    def forward_proxy(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        inf = float("inf")
        return num.clamp(x, -inf if a.lo is None else a.lo, inf if a.hi is None else a.hi)


class _Cast(Elementwise):
    """Casts from floats are vulnerable: out-of-range values overflow a narrower
    float to Inf and make a float-to-int conversion undefined."""

    pointwise = True
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
        if not cls.target.is_float:
            # Defined where trunc(x) is representable: min - 1 < x < max + 1. (|x| <= max would
            # take 2**63 for int64: float(2**63 - 1) rounds up to it.)
            info = torch.iinfo(cls.target.torch)
            return [num.lt0(x.double() - float(info.max + 1)), num.lt0(float(info.min - 1) - x.double())]
        return [num.le0(x.double().abs() - num.abs_max(cls.target.torch))]


def _cast(target: DType) -> type[_Cast]:
    name = "Cast" + target.name.capitalize().replace("Float", "F").replace("Int", "I").replace("Uint", "U")
    return type(name, (_Cast,), {"target": target, "sigs": into([d for d in ALL if d != target], target)})


CASTS = tuple(_cast(d) for d in (DType.float16, DType.float32, DType.float64, DType.int32, DType.int64, DType.bool))


def _exact_cast(src: DType, dst: DType) -> bool:
    """Conversions that are defined and finite for every value (the Cast specs also take the
    others, and are vulnerable for them): to or from bool, integer to integer (wrapping),
    float into a wider float, and integer into a float whose range holds the integer's
    (not int32 or int64 into float16)."""
    if DType.bool in (src, dst) or not (src.is_float or dst.is_float):
        return True
    if src.is_float:
        return dst.is_float and FLOATS.index(dst) > FLOATS.index(src)
    return dst is not DType.float16 or src in (DType.int8, DType.uint8)


class TypeAs(OpSpec):
    """x.to(like.dtype), torch's type_as: exported as ONNX CastLike (the exporter emits Cast).
    Only the conversions that cannot overflow: this spec is not vulnerable. (Not named
    CastLike: names starting with Cast are the Cast specs to the range analysis.)"""

    sigs: list[Sig] = [((s, d), (d,)) for s in ALL for d in ALL if s is not d and _exact_cast(s, d)]
    in_ranks = (ANY_RANK, ANY_RANK)
    min_opset = 15

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [out_rank, draw.integer("type_as.like_rank", 0, MAX_RANK)]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[0].shape), x[1].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        # The dtype is the GraphIR's: the value search may hand a float shadow as `like`.
        return as_node(lambda t, _: t.to(a.out_types[0].dtype.torch), "CastLike", [x, like])


OPS = (
    Relu,
    LeakyRelu,
    Gelu,
    Elu,
    Selu,
    HardSigmoid,
    HardSwish,
    Softsign,
    Sigmoid,
    Tanh,
    Sin,
    Cos,
    Atan,
    Erf,
    Floor,
    Ceil,
    Round,
    Sign,
    Asin,
    Acos,
    Exp,
    Log,
    Log2,
    Sqrt,
    Reciprocal,
    Abs,
    Neg,
    Not,
    Clip,
    *CASTS,
    Softplus,
    Mish,
    Asinh,
    Celu,
    ThresholdedRelu,
    Shrink,
    IsNaN,
    IsInf,
    BitwiseNot,
    TypeAs,
)
