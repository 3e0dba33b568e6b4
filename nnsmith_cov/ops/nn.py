"""Neural-network layers: convolution, pooling, normalization, softmax, linear algebra, resizing, sampling."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, DType
from nnsmith_cov.abstract.layout import RankChanging, mixed_ranks
from nnsmith_cov.abstract.op import MAX_RANK, NONSCALAR, AttrKind, Attrs, Elementwise, OpSpec, Slot, same
from nnsmith_cov.abstract.symbols import context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.abstract.window import Layer, Window, any_of, multiple, spatial
from nnsmith_cov.ops.onnx_node import as_node
from nnsmith_cov.ops.resize_node import resize_by_scales

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

    sigs = same(FLOATS, 3)
    param_inputs = (1, 2)
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


# -- pooling -----------------------------------------------------------------------


class _Pool(Window):
    """kernel, stride, padding <= kernel / 2 (PyTorch's rule); ceil_mode drawn."""

    sigs = same(FLOATS)
    per_dim = {"kernel": SIZE, "stride": SIZE, "padding": PAD}

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if "ndim" in cls.__dict__:
            cls.in_ranks = ((cls.ndim + 2,),)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["ceil"] = draw.coin("pool.ceil_mode", 0.3)

    def extent(self, x: list[AbsTensor], i: int) -> Dim:
        return self.at("kernel", i)

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return super().requires(x) + [2 * self.at("padding", i) <= self.at("kernel", i) for i in range(self.ndim)]


class _MaxPool(_Pool):
    per_dim = {**_Pool.per_dim, "dilation": SIZE}

    def extent(self, x: list[AbsTensor], i: int) -> Dim:
        return self.at("dilation", i) * (self.at("kernel", i) - 1) + 1

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        k, s, p, d = (spatial(a, n, cls.ndim) for n in ("kernel", "stride", "padding", "dilation"))
        return cls.torch_fn(x, k, s, p, d, ceil_mode=a.ceil)


class MaxPool1d(_MaxPool):
    ndim = 1
    torch_fn = F.max_pool1d


class MaxPool2d(_MaxPool):
    ndim = 2
    torch_fn = F.max_pool2d


class _AvgPool(_Pool):
    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        super().setup(draw, ins)
        self.params["count_pad"] = draw.coin("avgpool.count_include_pad")

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        k, s, p = (spatial(a, n, cls.ndim) for n in ("kernel", "stride", "padding"))
        return cls.torch_fn(x, k, s, p, ceil_mode=a.ceil, count_include_pad=a.count_pad)


class AvgPool1d(_AvgPool):
    ndim = 1
    torch_fn = F.avg_pool1d


class AvgPool2d(_AvgPool):
    ndim = 2
    torch_fn = F.avg_pool2d


class _AdaptivePool2d(Layer):
    """To an output size that divides the input: the exporter lowers only that case (to a fixed pool)."""

    sigs = same(FLOATS)
    in_ranks = ((4,),)
    attrs = {"out_h": SIZE, "out_w": SIZE}

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        h, w = x[0].shape[2:]
        return [multiple(self, "kh", h, self.out_h)[1], multiple(self, "kw", w, self.out_w)[1]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:2], self.out_h, self.out_w], x[0].dtype)]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return cls.torch_fn(x, (a.out_h, a.out_w))


class AdaptiveAvgPool2d(_AdaptivePool2d):
    torch_fn = F.adaptive_avg_pool2d


class AdaptiveMaxPool2d(_AdaptivePool2d):
    torch_fn = F.adaptive_max_pool2d


def _root(s: torch.Tensor, p: int) -> torch.Tensor:
    """s ** (1 / p) for s >= 0, whose derivative at 0 (a window of zeros) is 0, not Inf."""
    if p == 1:
        return s
    pos = s > 0
    return torch.where(pos, torch.where(pos, s, 1).pow(1.0 / p), 0)


BOX_SUM_GAIN = 16  # `window_sums` takes prefix sums where windows hold this many times the input


def _pooled(hw: tuple[int, int], k: tuple[int, int], s: tuple[int, int], pad: tuple[int, int]) -> tuple[int, int]:
    """The number of windows along each of the two dims."""
    return tuple((n + 2 * p - kd) // sd + 1 for n, kd, sd, p in zip(hw, k, s, pad))  # type: ignore[return-value]


def prefix_sums_pay(hw: tuple[int, int], k: tuple[int, int], s: tuple[int, int], pad: tuple[int, int]) -> bool:
    """Whether the windows over an hw input hold BOX_SUM_GAIN times its padded size."""
    n_h, n_w = _pooled(hw, k, s, pad)
    return n_h * n_w * k[0] * k[1] >= BOX_SUM_GAIN * (hw[0] + 2 * pad[0]) * (hw[1] + 2 * pad[1])


def window_sums(
    t: torch.Tensor, k: tuple[int, int], s: tuple[int, int], pad: tuple[int, int], prefix: bool | None = None
) -> torch.Tensor:
    """Sums over the k windows of `t`'s last two dims at strides s, with zero padding.

    PyTorch's CPU average pool adds each window's elements one by one: a 22 x 84 window
    at stride 1 x 2 over a 30 x 94 input costs 25 ms. Where the windows together hold
    many times the input (`prefix_sums_pay`, or as `prefix` says), each sum is the
    difference of two prefix sums along each dim, in float64, so the difference loses
    nothing a float32 or float16 result keeps."""
    hw = (t.shape[-2], t.shape[-1])
    if prefix is None:
        prefix = prefix_sums_pay(hw, k, s, pad)
    # (In an export only the LpPool node counts, and TorchScript's peephole pass fails on
    # some traces of the prefix sums.)
    if not prefix or torch.onnx.is_in_onnx_export():
        return F.avg_pool2d(t, k, s, pad, divisor_override=1)
    (n_h, n_w), (kh, kw), (sh, sw) = _pooled(hw, k, s, pad), k, s
    c = F.pad(t.double(), (pad[1], pad[1], pad[0], pad[0]))
    c = F.pad(c.cumsum(-1), (1, 0))  # column j: the sum of the row before j
    span = (n_w - 1) * sw + 1
    c = c[..., kw : kw + span : sw] - c[..., 0:span:sw]  # each row's window sums
    c = F.pad(c.cumsum(-2), (0, 0, 1, 0))  # row i: the sum of the rows before i
    span = (n_h - 1) * sh + 1
    return (c[..., kh : kh + span : sh, :] - c[..., 0:span:sh, :]).to(t.dtype)


class LpPool2d(_Pool):
    """(sum of |x|^p over each window)^(1/p), p in 1..3, zero padding; exported as ONNX LpPool
    (torch's F.lp_pool2d is avg_pool2d arithmetic and takes no padding). No ceil_mode: TVM
    rebuilds LpPool as an average pool times the kernel size, the sum only for windows that
    lie within the padding."""

    ndim = 2

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["p"] = draw.choice("lp_pool.p", (1, 2, 3))

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        k, s, pad = (spatial(a, n, 2) for n in ("kernel", "stride", "padding"))
        attrs = {"p_i": a.p, "kernel_shape_i": list(k), "strides_i": list(s), "pads_i": list(pad) * 2}
        return as_node(lambda t: _root(window_sums(t.abs().pow(a.p), k, s, pad), a.p), "LpPool", [x], attrs=attrs)


class _GlobalPool(Layer):
    """x [N, C, *S] -> [N, C, 1, ...]: one window over all spatial dims."""

    sigs = same(FLOATS)
    in_ranks = ((3, 4, 5),)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:2]] + [1] * (x[0].rank - 2), x[0].dtype)]


class GlobalMaxPool(_GlobalPool):
    """Exported as ONNX GlobalMaxPool: the exporter makes a MaxPool of an adaptive max pool
    to size 1 whenever the input size is known."""

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(2, x.dim()))
        return as_node(lambda t: t.amax(dims, keepdim=True), "GlobalMaxPool", [x])


class GlobalLpPool(_GlobalPool):
    """(sum of |x|^p over all spatial positions)^(1/p), p in 1..3 (ONNX GlobalLpPool)."""

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["p"] = draw.choice("lp_pool.p", (1, 2, 3))

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(2, x.dim()))
        fn = lambda t: _root(t.abs().pow(a.p).sum(dims, keepdim=True), a.p)
        return as_node(fn, "GlobalLpPool", [x], attrs={"p_i": a.p})


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
        return F.layer_norm(x, tuple(w.shape), w, b)


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


# -- linear algebra ----------------------------------------------------------------


class Linear(Layer):
    """x [..., in] @ W[out, in]^T + b[out].

    ONNX forms: "linear", F.linear (one Gemm for a 2-d x, else MatMul on the transposed
    weight and Add); for a 2-d x only, the draw "linear.form" may pick "matmul_add", the
    same written out as `x @ W.T + b` as hand-written MLP blocks do (Transpose, MatMul and
    Add, which ORT fuses into a Gemm itself). At other ranks both are the same ONNX, so
    nothing is drawn. Graphs stored before the form was drawn are "linear".
    """

    sigs = same(FLOATS, 3)
    in_ranks = (NONSCALAR, (2,), (1,))
    param_inputs = (1, 2)
    FORMS = ("linear", "matmul_add")
    FORM_DRAW = "linear.form"  # the label the form is drawn under: the scheduler's "form" arms

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params["form"] = draw.choice(self.FORM_DRAW, self.FORMS) if ins[0][1] == 2 else "linear"

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [x[0].shape[-1] == x[1].shape[1], x[2].shape[0] == x[1].shape[0]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:-1], x[1].shape[0]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.get("form") == "matmul_add":
            return torch.matmul(x, w.t()) + b
        return F.linear(x, w, b)


class MatMul(OpSpec):
    """torch.matmul: dot, matrix-vector either side, and batched products with broadcast leading dims."""

    sigs = same(FLOATS + (DType.int32, DType.int64), 2)
    in_ranks = (NONSCALAR, NONSCALAR)
    torch_fn = torch.matmul

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        cases = [(1, 1)] if out_rank == 0 else []
        if 1 <= out_rank < 5:  # matrix-vector products drop one dim
            cases += [(out_rank + 1, 1), (1, out_rank + 1)]
        if out_rank >= 2:
            cases += [(out_rank, r) for r in range(2, out_rank + 1)] + [(r, out_rank) for r in range(2, out_rank)]
        return list(draw.choice("matmul.ranks", cases))

    @staticmethod
    def _mats(x: list[AbsTensor]) -> tuple[list[Dim], list[Dim]]:
        a, b = (list(t.shape) for t in x)
        return ([1, *a] if len(a) == 1 else a), (b + [1] if len(b) == 1 else b)

    def _batch(self, x: list[AbsTensor]) -> tuple[list[z3.ArithRef], list[z3.BoolRef]]:
        a, b = self._mats(x)
        n = max(len(a), len(b)) - 2
        out, cons = [], []
        for pos in range(n):
            o = int_sym(f"{self!r}.batch{pos}")
            dims = [m[pos - (n - (len(m) - 2))] for m in (a, b) if pos >= n - (len(m) - 2)]
            cons += [z3.Or(d == o, d == 1) for d in dims] + [z3.Or([d == o for d in dims])]
            out.append(o)
        return out, cons

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        a, b = self._mats(x)
        return [a[-1] == b[-2]] + self._batch(x)[1]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        a, b = self._mats(x)
        shape = self._batch(x)[0] + ([a[-2]] if x[0].rank > 1 else []) + ([b[-1]] if x[1].rank > 1 else [])
        return [AbsTensor(shape, x[0].dtype)]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, y)


class Addmm(OpSpec):
    """beta * c + alpha * (a @ b) on matrices, c broadcast to the product: exported as ONNX Gemm."""

    sigs = same(FLOATS, 3)
    in_ranks = ((0, 1, 2), (2,), (2,))
    param_inputs = (2,)  # B as a weight, as Gemm layers have it
    _SCALES = (1.0, 0.5, 2.0, -1.0)

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        self.params.update(alpha=draw.choice("addmm.alpha", self._SCALES), beta=draw.choice("addmm.beta", self._SCALES))

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [draw.integer("addmm.c_rank", 0, 2), 2, 2] if out_rank == 2 else None

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        c, (m, k), (k2, n) = x[0].shape, x[1].shape, x[2].shape
        out = [m, n][2 - len(c) :]
        return [k == k2] + [any_of([d == 1, d == o]) for d, o in zip(c, out)]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([x[1].shape[0], x[2].shape[1]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.addmm(c, x, y, beta=a.beta, alpha=a.alpha)


class Einsum(OpSpec):
    """torch.einsum on two operands with drawn subscripts: each axis of the second operand
    shares a label with an axis of the first (same size) or has its own; each label is kept
    in the output, in a drawn order, or summed over. Labels are numbers in `a`, `b`, `out`."""

    # No bool kernel; smaller integers are summed into int64 on the way (a dtype change or,
    # feeding the result into bmm, a torch error).
    sigs = same(FLOATS + (DType.int64,), 2)
    in_ranks = (NONSCALAR, NONSCALAR)
    min_opset = 12

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        ra = draw.integer("einsum.rank_a", 1, MAX_RANK)
        return [ra, draw.integer("einsum.rank_b", max(1, out_rank - ra), MAX_RANK)]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        ra, rb = ins[0][1], ins[1][1]
        # Backward, enough labels must stay distinct to make the output rank.
        most = min(ra, rb) if self.out_rank is None else min(ra, rb, ra + rb - self.out_rank)
        k = draw.integer("einsum.shared", 0, most)
        b: list[int | None] = [None] * rb
        shared = draw.sample("einsum.shared_a", range(ra), k)
        for label, pos in zip(shared, draw.sample("einsum.shared_b", range(rb), k)):
            b[pos] = label
        fresh = iter(range(ra, ra + rb))
        labels = ra + rb - k
        n_out = self.out_rank if self.out_rank is not None else draw.integer("einsum.n_out", 0, min(labels, MAX_RANK))
        self.params.update(
            a=list(range(ra)),
            b=[next(fresh) if label is None else label for label in b],
            out=draw.sample("einsum.out", range(labels), n_out),
        )

    def _sizes(self, x: list[AbsTensor]) -> dict[int, Dim]:
        sizes = dict(zip(self.params["a"], x[0].shape))
        for label, d in zip(self.params["b"], x[1].shape):
            sizes.setdefault(label, d)
        return sizes

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        sizes = self._sizes(x)
        return [d == sizes[label] for label, d in zip(self.params["b"], x[1].shape) if label < x[0].rank]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        sizes = self._sizes(x)
        return [AbsTensor([sizes[label] for label in self.params["out"]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        letters = "abcdefghij"
        sub = lambda labels: "".join(letters[i] for i in labels)
        return torch.einsum(f"{sub(a.a)},{sub(a.b)}->{sub(a.out)}", x, y)


# -- resizing and rearrangement ------------------------------------------------------


class Interpolate(Layer):
    """F.interpolate; the mode is drawn among those valid for the rank.

    ONNX forms (the draw "interp.form"), both written by real PyTorch exports:
    - "sizes": `size=` given: Resize with its `sizes` input (roi and scales left out);
    - "scales": `scale_factor=` given (one factor per spatial dim from _SCALES): Resize with
      its `scales` input, output dims floor(d * factor), and coordinates mapped through the
      factor rather than the size ratio (where align_corners is off). Written as the
      exporter writes it (same attributes, roi left out from opset 13) but with the scales
      one constant, as a default export's constant folding leaves them: unfolded, they are a
      Concat ONNX shape inference cannot read, and every shape after the Resize is lost.
    Graphs stored before the form was drawn are the "sizes" form.
    """

    sigs = same(FLOATS)
    in_ranks = ((3, 4, 5),)
    _MODES = {3: ("nearest", "linear"), 4: ("nearest", "bilinear", "bicubic"), 5: ("nearest", "trilinear")}
    FORMS = ("sizes", "scales")
    FORM_DRAW = "interp.form"  # the label the form is drawn under: the scheduler's "form" arms
    # (numerator, denominator): exact in binary, and 1/factor rounds up in float32, so
    # PyTorch's nearest source index (dst * (1/factor), floored) agrees with ONNX's dst / factor.
    _SCALES = ((1, 2), (3, 4), (3, 2), (2, 1), (3, 1))

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        rank = ins[0][1]
        mode = draw.choice("interp.mode", self._MODES[rank])
        self.params["mode"] = mode
        if mode != "nearest":
            self.params["align_corners"] = draw.coin("interp.align_corners")
        form = draw.choice(self.FORM_DRAW, self.FORMS)
        self.params["form"] = form
        if form == "scales":
            self.params["scales"] = [list(draw.choice("interp.scale", self._SCALES)) for _ in range(rank - 2)]
        else:
            for i in range(rank - 2):
                self.new_attr(f"size{i}", SIZE)

    def _out(self, x: AbsTensor) -> list[Dim]:
        if self.params.get("form") != "scales":
            return [self.sym[f"size{i}"] for i in range(x.rank - 2)]
        # floor(d * n / m): Z3's integer division floors for the positive dims here
        return [
            (d * n) // m if isinstance(d, int) else (d * n / m if m > 1 else d * n)
            for d, (n, m) in zip(x.shape[2:], self.params["scales"])
        ]

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        # a factor below 1 must leave each dim at least 1 long
        return [z3.BoolVal(d >= 1, context()) if isinstance(d, int) else d >= 1 for d in self._out(x[0])]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:2], *self._out(x[0])], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        align = a.get("align_corners")
        if a.get("form") == "scales":
            factors = tuple(n / m for n, m in a.scales)

            def fn(t: torch.Tensor) -> torch.Tensor:
                return F.interpolate(t, scale_factor=factors, mode=a.mode, align_corners=align)

            return resize_by_scales(x, fn, factors, a.mode, align)
        size = spatial(a, "size", x.dim() - 2)
        return F.interpolate(x, size=size, mode=a.mode, align_corners=align)


class PixelShuffle(Layer):
    """[N, C*r*r, H, W] -> [N, C, H*r, W*r] (ONNX DepthToSpace)."""

    sigs = same(FLOATS)
    in_ranks = ((4,),)
    attrs = {"factor": SIZE}

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [x[0].shape[1] == int_sym(f"{self!r}.c") * self.factor * self.factor]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        n, _, h, w = x[0].shape
        return [AbsTensor([n, int_sym(f"{self!r}.c"), h * self.factor, w * self.factor], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return F.pixel_shuffle(x, a.factor)


class PixelUnshuffle(Layer):
    """[N, C, H*r, W*r] -> [N, C*r*r, H, W]."""

    sigs = same(FLOATS)
    in_ranks = ((4,),)
    attrs = {"factor": SIZE}

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        return [multiple(self, f"out{i}", d, self.factor)[1] for i, d in enumerate(x[0].shape[2:])]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        n, c, h, w = x[0].shape
        r = self.factor
        return [AbsTensor([n, c * r * r, multiple(self, "out0", h, r)[0], multiple(self, "out1", w, r)[0]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return F.pixel_unshuffle(x, a.factor)


class SpaceToDepth(PixelUnshuffle):
    """[N, C, H*r, W*r] -> [N, r*r*C, H, W] with the offset in the block outermost in the
    channels (ONNX SpaceToDepth; PixelUnshuffle puts it innermost and exports as
    Reshape/Transpose)."""

    sigs = same(ALL)

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = a.in_types[0].shape
        r = a.factor

        def blocks(t: torch.Tensor) -> torch.Tensor:
            t = t.reshape(n, c, h // r, r, w // r, r).permute(0, 3, 5, 1, 2, 4)
            return t.reshape(n, r * r * c, h // r, w // r)

        return as_node(blocks, "SpaceToDepth", [x], attrs={"blocksize_i": r})


# -- sampling ------------------------------------------------------------------------------


class GridSample(OpSpec):
    """F.grid_sample: x [N, C, *S] read at grid [N, *S_out, k] (k = len(S), coordinates in
    [-1, 1] span x) -> [N, C, *S_out]; mode, padding mode and align_corners drawn (bicubic
    is 2-D only). Not float16: TVM returns float32 for it (every such graph would be one
    more finding of that), and ORT's float16 results differ from torch's by up to 1e-2."""

    sigs = same((DType.float32, DType.float64), 2)
    in_ranks = ((4, 5), (4, 5))
    min_opset = 20  # 16 would do for 2-D grids, but the exporter writes 3-D ones from 20 only

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [out_rank, out_rank] if out_rank in (4, 5) else None

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        modes = ("bilinear", "nearest", "bicubic") if ins[0][1] == 4 else ("bilinear", "nearest")
        self.params.update(
            mode=draw.choice("grid_sample.mode", modes),
            padding=draw.choice("grid_sample.padding", ("zeros", "border", "reflection")),
            align_corners=draw.coin("grid_sample.align_corners"),
        )

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        if mixed_ranks(x):
            return [False]
        return [x[1].shape[0] == x[0].shape[0], x[1].shape[-1] == x[0].rank - 2]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:2], *x[1].shape[1:-1]], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, a.mode, a.padding, a.align_corners)


class AffineGrid(RankChanging):
    """F.affine_grid: theta [N, 2, 3] -> sampling grid [N, H, W, 2], or [N, 3, 4] ->
    [N, D, H, W, 3], of symbolic sizes (ONNX AffineGrid). Not float16: the exporter fails
    on it ("tensor_cpu" not implemented for 'Half')."""

    sigs = same((DType.float32, DType.float64))
    in_ranks = ((3,),)
    min_opset = 20

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        return [3] if out_rank in (4, 5) else None

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        k = self.out_rank - 2 if self.out_rank is not None else draw.choice("affine_grid.dims", (2, 3))
        for i in range(k):
            self.new_attr(f"size{i}", SIZE)
        self.params.update(k=k, align_corners=draw.coin("affine_grid.align_corners"))

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        k = self.params["k"]
        # With align_corners a size-1 grid has no corners to align: torch and ORT place its
        # point differently, TVM refuses it.
        wide = [self.sym[f"size{i}"] > 1 for i in range(k)] if self.params["align_corners"] else []
        return [x[0].shape[1] == k, x[0].shape[2] == k + 1, *wide]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        k = self.params["k"]
        return [AbsTensor([x[0].shape[0], *(self.sym[f"size{i}"] for i in range(k)), k], x[0].dtype)]

    @staticmethod
    def forward(a: Attrs, theta: torch.Tensor) -> torch.Tensor:
        size = [a.in_types[0].shape[0], 1, *spatial(a, "size", a.k)]  # the channel count is not used
        return F.affine_grid(theta, size, a.align_corners)


OPS = (
    Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d,
    MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveAvgPool2d, AdaptiveMaxPool2d,
    BatchNorm, InstanceNorm, LayerNorm, PReLU,
    Softmax, LogSoftmax, Linear, MatMul, Addmm,
    Interpolate, PixelShuffle, PixelUnshuffle,
    LpPool2d, GlobalMaxPool, GlobalLpPool, LocalResponseNorm, Einsum, SpaceToDepth, GridSample, AffineGrid,
)  # fmt: skip
# Not in the library, though a spec of it agreed with torch and ONNX on its own:
# - GroupNorm is exported as Reshape/InstanceNormalization/Reshape with
#   shapes the exporter no longer knows statically, and a later Conv (kernel
#   computed from it) or adaptive pool then fails to export ("input size not
#   accessible"): an exporter limitation that would flood the findings.
