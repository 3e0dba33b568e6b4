"""Fake quantization: round to a quantized grid and back (ONNX QuantizeLinear + DequantizeLinear).

torch's fake-quantize kernels and ONNX's float scale take float32 only. The exporter
accepts the quantized ranges 0..255 (uint8), -128..127 (int8) and 0..127 (uint8 and a
Clip); the zero point lies in the range. It refuses 0..127 below opset 13, so that range is
written by `_Clipped` at every opset: the exporter's own nodes where ONNX's Clip takes
uint8 (12 on), and below that a float Clip after the dequantization (the same values: the
bounds lie on the grid).
"""

from __future__ import annotations

from typing import Any

import torch

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import NONSCALAR, Attrs, Elementwise, Slot, same
from nnsmith_cov.abstract.op_facts import Monotone

# Powers of two: torch multiplies by 1 / scale where ONNX divides by scale, which rounds
# differently (a whole quantum apart at a tie) unless the scale is a power of two.
_SCALES = (2.0**-6, 2.0**-4, 2.0**-2, 0.5, 1.0)
_RANGES = ((0, 255), (-128, 127), (0, 127))


class _Clipped(torch.autograd.Function):
    """fake_quantize_per_tensor_affine over 0..127, in an export: QuantizeLinear to uint8,
    the clip to 127, DequantizeLinear."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float, zero: int) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(x, scale, zero, 0, 127)

    @staticmethod
    def symbolic(g: Any, x: Any, scale: float, zero: int) -> Any:
        s = g.op("Constant", value_t=torch.tensor(scale, dtype=torch.float32))
        z = g.op("Constant", value_t=torch.tensor(zero, dtype=torch.uint8))
        q = g.op("QuantizeLinear", x, s, z)
        if g.opset >= 12:  # as the exporter writes it from 13
            none = g.op("prim::Constant")
            none.setType(torch._C.OptionalType.ofTensor())
            q = g.op("Clip", q, none, g.op("Constant", value_t=torch.tensor(127, dtype=torch.uint8)))
            return g.op("DequantizeLinear", q, s, z)
        top = g.op("Constant", value_t=torch.tensor((127 - zero) * scale, dtype=torch.float32))
        low = g.op("Constant", value_t=torch.tensor(-zero * scale, dtype=torch.float32))
        return g.op("Clip", g.op("DequantizeLinear", q, s, z), low, top)


class FakeQuantize(Elementwise):
    """torch.fake_quantize_per_tensor_affine with a drawn scale, range and zero point."""

    pointwise = True
    monotone = Monotone.RISING
    sigs = same([DType.float32])

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        lo, hi = draw.choice("fake_quant.range", _RANGES)
        self.params.update(
            scale=draw.choice("fake_quant.scale", _SCALES), lo=lo, hi=hi, zero=draw.integer("fake_quant.zero", lo, hi)
        )

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        if (a.lo, a.hi) == (0, 127) and torch.onnx.is_in_onnx_export():
            return _Clipped.apply(x, a.scale, a.zero)
        return torch.fake_quantize_per_tensor_affine(x, a.scale, a.zero, a.lo, a.hi)

    @classmethod
    def forward_proxy(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        # torch's gradient is 1 on the grid's range and 0 where it saturates: ALPHA there.
        return num.rising(lambda t: cls.forward(a, t))(x)


class FakeQuantizePerChannel(FakeQuantize):
    """torch.fake_quantize_per_channel_affine along a drawn axis (ONNX's `axis` attribute).

    The axis' length is symbolic when drawing, so channel c's scale and zero point are
    derived from the drawn ones: scale * 2 ** (c % 3), zero + 37 * c wrapped into the range.
    """

    # Each channel rises, but by its own map: the range analysis takes it apart (`per_channel`).
    pointwise = False
    monotone = Monotone.NONE
    in_ranks = (NONSCALAR,)
    min_opset = 13

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        super().setup(draw, ins)
        self.params["axis"] = draw.integer("fake_quant.axis", 0, ins[0][1] - 1)

    @staticmethod
    def channels(a: Attrs) -> list[tuple[float, int]]:
        """Each channel's scale and zero point."""
        n = a.in_types[0].shape[a.axis]
        return [(a.scale * 2 ** (c % 3), a.lo + (a.zero - a.lo + 37 * c) % (a.hi - a.lo + 1)) for c in range(n)]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        # Plain lists, so the export holds them as constants.
        scale, zero = zip(*cls.channels(a)) if x.shape[a.axis] else ((), ())
        scale, zero = torch.tensor(scale, dtype=torch.float32), torch.tensor(zero, dtype=torch.int32)
        return torch.fake_quantize_per_channel_affine(x, scale, zero, a.axis, a.lo, a.hi)


OPS = (FakeQuantize, FakeQuantizePerChannel)
