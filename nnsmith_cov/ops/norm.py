"""Normalization (batch, instance, layer, local response), PReLU's per-channel slope, and softmax."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import FLOATS, DType
from nnsmith_cov.abstract.op import NONSCALAR, AttrKind, Attrs, Elementwise, Slot, same
from nnsmith_cov.abstract.op_facts import Domain
from nnsmith_cov.abstract.tensor import AbsTensor
from nnsmith_cov.abstract.window import Layer, any_of
from nnsmith_cov.ops.onnx_node import as_node

SIZE, PAD = AttrKind.SIZE, AttrKind.PAD

# -- normalization -----------------------------------------------------------------


class _ChannelNorm(Layer):
    """x [N, C, ...] with per-channel parameter inputs of shape [C]; `n_params` of them."""

    n_params: ClassVar[int]

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if "n_params" in cls.__dict__:
            cls.sigs = same(FLOATS, 1 + cls.n_params)
            cls.param_inputs = tuple(range(1, 1 + cls.n_params))
            cls.in_ranks = (cls.in_ranks[0],) + ((1,),) * cls.n_params

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [t.shape[0] == x[0].shape[1] for t in x[1:]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[0].shape), x[0].dtype)]


BN_EPS = 1e-5


class BatchNorm(_ChannelNorm):
    """Inference-mode batch norm (1d/2d/3d): running mean, running var, weight, bias."""

    input_domains = (None, None, Domain(-BN_EPS, math.inf, lo_open=True))  # running variance + eps > 0
    vulnerable = True  # NaN where the running variance + eps is negative
    in_ranks = ((2, 3, 4, 5),)
    n_params = 4

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, mean, var, w, b) -> torch.Tensor:
        # Running statistics are buffers, not trainable: the exporter refuses them with requires_grad.
        return F.batch_norm(x, mean.detach(), var.detach(), w, b, training=False, eps=BN_EPS)

    @staticmethod
    def domain(a: Attrs, x: torch.Tensor, mean, var, w, b) -> list[torch.Tensor]:
        return [num.lt0(-(var + BN_EPS))]

    @staticmethod
    def _with_statistics_grad(a: Attrs, x: torch.Tensor, mean, var, w, b) -> torch.Tensor:
        """`forward` with its true derivative in the running mean and variance, which it
        detaches only for the exporter: the value search moves them."""
        out = BatchNorm.forward(a, x, mean, var, w, b)
        if not (mean.requires_grad or var.requires_grad):
            return out
        shape = [1, -1] + [1] * (x.dim() - 2)
        mean, var, w, b = (t.reshape(shape) for t in (mean, var, w, b))
        return num.attach(out, (x - mean) / torch.sqrt(var + BN_EPS) * w + b)

    search_forward = _with_statistics_grad


class InstanceNorm(_ChannelNorm):
    """Per-sample, per-channel statistics with affine weight and bias; needs > 1 spatial element."""

    in_ranks = ((3, 4, 5),)
    n_params = 2

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return super().requires(x) + [any_of([d > 1 for d in x[0].shape[2:]])]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, w, b) -> torch.Tensor:
        return F.instance_norm(x, weight=w, bias=b)


class PReLU(_ChannelNorm):
    """Slope [1] or [C]."""

    in_ranks = ((2, 3, 4, 5),)
    n_params = 1

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [z3.Or(x[1].shape[0] == 1, x[1].shape[0] == x[0].shape[1])]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.prelu(x, w)


class LayerNorm(Layer):
    """Over the last k dims; weight and bias have those k dims (k is their rank).

    Forward insertion draws each parameter's rank on its own, so unequal
    ranks are rejected here (a k drawn in `setup` cannot reach them).
    """

    sigs = same(FLOATS, 3)
    in_ranks = (NONSCALAR, (1, 2, 3), (1, 2, 3))
    param_inputs = (1, 2)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        if out_rank < 1:
            return None
        k = draw.integer("layernorm.k", 1, min(out_rank, 3))
        return [out_rank, k, k]

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        k = x[1].rank
        if x[2].rank != k or k > x[0].rank:
            return [False]  # the solver rejects a literal False without a check
        tail = x[0].shape[x[0].rank - k :]
        return [a == b for a, b in zip(tail, x[1].shape)] + [a == b for a, b in zip(tail, x[2].shape)]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(list(x[0].shape), x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # The shape from the GraphIR, not from `w`: with symbolic input dims the exporter
        # traces w.shape into Shape/Gather nodes, and layer_norm needs it constant.
        return F.layer_norm(x, tuple(a.in_types[1].shape), w, b)


class LocalResponseNorm(Elementwise):
    """F.local_response_norm across channels of [N, C, H, W]: x / (bias + alpha / size * sum of
    x^2 over the size channels around)^beta; exported as ONNX LRN (the exporter decomposes it).
    Odd sizes only: for even ones torch's window and ONNX's are one channel apart. float32
    only: torch has no float16 kernel for it on CPU, the backends no float64 one."""

    sigs = same([DType.float32])
    in_ranks = ((4,),)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params.update(
            size=draw.choice("lrn.size", (1, 3, 5)),
            alpha=draw.choice("lrn.alpha", (1e-4, 1e-2, 0.5)),
            beta=draw.choice("lrn.beta", (0.5, 0.75, 1.0)),
            bias=draw.choice("lrn.bias", (1.0, 2.0)),  # >= 1: the base stays positive
        )

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        attrs = {"size_i": a.size, "alpha_f": a.alpha, "beta_f": a.beta, "bias_f": a.bias}
        return as_node(lambda t: F.local_response_norm(t, a.size, a.alpha, a.beta, a.bias), "LRN", [x], attrs=attrs)


# -- softmax -----------------------------------------------------------------------


class Softmax(Elementwise):
    sigs = same(FLOATS)
    in_ranks = (NONSCALAR,)
    torch_fn = F.softmax

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["dim"] = draw.integer("softmax.dim", 0, ins[0][1] - 1)

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return cls.torch_fn(x, a.dim)


class LogSoftmax(Softmax):
    torch_fn = F.log_softmax


OPS = (BatchNorm, InstanceNorm, LayerNorm, PReLU, Softmax, LogSoftmax, LocalResponseNorm)
# Not in the library, though a spec of it agreed with torch and ONNX on its own:
# - GroupNorm is exported as Reshape/InstanceNormalization/Reshape with
#   shapes the exporter no longer knows statically, and a later Conv (kernel
#   computed from it) or adaptive pool then fails to export ("input size not
#   accessible"): an exporter limitation that would flood the findings.
