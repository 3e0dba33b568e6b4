"""Convolutions and transposed convolutions (1-d and 2-d)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import FLOATS
from nnsmith_cov.abstract.op import AttrKind, Attrs, Slot, same
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.abstract.window import Window, multiple, spatial

SIZE, PAD = AttrKind.SIZE, AttrKind.PAD

# -- convolution -------------------------------------------------------------------


class _Conv(Window):
    """x [N, C, *L], weight [O, C/groups, *k], bias [O].

    ONNX forms (the draw "conv.form"): "bias", one Conv (or ConvTranspose) with its
    optional B input; "add", the bias left out of it and added after, broadcast over
    the spatial dims (a bias-free layer with a learned shift, as real models write it:
    Conv with two inputs, then Reshape and Add, which ORT's Conv-Add fusion folds back).
    Graphs stored before the form was drawn are "bias".
    """

    slow_in_f16 = True
    sigs = same(FLOATS, 3)
    param_inputs = (1, 2)
    export_static_dims = {1: 2}  # the exporter reads the kernel size from the weight
    attrs = {"groups": SIZE}
    per_dim = {"stride": SIZE, "padding": PAD, "dilation": SIZE}
    FORMS = ("bias", "add")
    FORM_DRAW = "conv.form"  # the label the form is drawn under: the scheduler's "form" arms

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        super().setup(draw, ins)
        self.params["form"] = draw.choice(self.FORM_DRAW, self.FORMS)

    @classmethod
    def biased(cls, a: Attrs, conv: Callable[[torch.Tensor | None], torch.Tensor], b: torch.Tensor) -> torch.Tensor:
        """`conv(bias)` in the instance's form: the bias passed in, or added after."""
        if a.get("form") == "add":
            return conv(None) + b.reshape(-1, *[1] * cls.ndim)
        return conv(b)

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if "ndim" in cls.__dict__:
            cls.in_ranks = ((cls.ndim + 2,), (cls.ndim + 2,), (1,))

    def extent(self, x: list[AbsTensor], i: int) -> Dim:
        return self.at("dilation", i) * (x[1].shape[2 + i] - 1) + 1

    def channels_out(self, x: list[AbsTensor]) -> Dim:
        return x[1].shape[0]

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        (_, c, *_), (o, cg, *_), (b,) = (t.shape for t in x)
        # PyTorch's float16 CPU convolution segfaults on a size-1 kernel with
        # dilation > 1 (with stride > 1 and padding > 0); dilation means nothing
        # for such a kernel, so it stays 1 there.
        plain = [z3.Or(x[1].shape[2 + i] > 1, self.at("dilation", i) == 1) for i in range(self.ndim)]
        return (
            super().requires(x)
            + plain
            + [c == cg * self.groups, multiple(self, "per_group", o, self.groups)[1], b == o]
        )

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        n = cls.ndim
        s, p, d = (spatial(a, k, n) for k in ("stride", "padding", "dilation"))
        return cls.biased(a, lambda bias: cls.torch_fn(x, w, bias, s, p, d, a.groups), b)


class Conv1d(_Conv):
    ndim = 1
    torch_fn = F.conv1d


class Conv2d(_Conv):
    ndim = 2
    torch_fn = F.conv2d


class _ConvTranspose(_Conv):
    """x [N, C, *L], weight [C, O/groups, *k], bias [O]; output_padding < stride."""

    per_dim = {"stride": SIZE, "padding": PAD, "output_padding": PAD, "dilation": SIZE}

    def channels_out(self, x: list[AbsTensor]) -> Dim:
        return x[1].shape[1] * self.groups

    def out_size(self, x: list[AbsTensor], i: int) -> Dim:
        s, p, op = self.at("stride", i), self.at("padding", i), self.at("output_padding", i)
        return (x[0].shape[2 + i] - 1) * s - 2 * p + self.extent(x, i) + op

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        (_, c, *_), (ci, *_), (b,) = (t.shape for t in x)
        cons = [c == ci, multiple(self, "per_group", c, self.groups)[1], b == self.channels_out(x)]
        for i in range(self.ndim):
            op = self.at("output_padding", i)
            # PyTorch also takes output_padding < dilation; ONNXRuntime and TVM both reject
            # output_padding >= stride, so such models would only ever report that rejection.
            cons.append(op < self.at("stride", i))
            # The uncropped result is out + 2 * padding long: keep it within 3 * out.
            cons.append(self.at("padding", i) <= self.out_size(x, i))
        return cons

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        n = cls.ndim
        s, p, op, d = (spatial(a, k, n) for k in ("stride", "padding", "output_padding", "dilation"))
        return cls.biased(a, lambda bias: cls.torch_fn(x, w, bias, s, p, op, a.groups, d), b)


class ConvTranspose1d(_ConvTranspose):
    ndim = 1
    torch_fn = F.conv_transpose1d


class ConvTranspose2d(_ConvTranspose):
    ndim = 2
    torch_fn = F.conv_transpose2d


OPS = (Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d)
