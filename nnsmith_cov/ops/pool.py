"""Pooling: max, average, adaptive, Lp and global pools, and the window sums LpPool is built on."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import FLOATS
from nnsmith_cov.abstract.op import AttrKind, Attrs, Slot, same
from nnsmith_cov.abstract.op_facts import Elements, Monotone
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.abstract.window import Layer, Window, multiple, spatial
from nnsmith_cov.ops.onnx_node import as_node

SIZE, PAD = AttrKind.SIZE, AttrKind.PAD

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
    elements = Elements.ONE_OF
    monotone = Monotone.MOVES
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
    monotone = Monotone.RISING

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
    export_static_dims = {0: 2}  # the exporter derives the fixed window from H and W

    def requires(self, x: list[AbsTensor]) -> list[z3.BoolRef]:
        h, w = x[0].shape[2:]
        return [multiple(self, "kh", h, self.out_h)[1], multiple(self, "kw", w, self.out_w)[1]]

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor([*x[0].shape[:2], self.out_h, self.out_w], x[0].dtype)]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return cls.torch_fn(x, (a.out_h, a.out_w))


class AdaptiveAvgPool2d(_AdaptivePool2d):
    monotone = Monotone.RISING
    torch_fn = F.adaptive_avg_pool2d


class AdaptiveMaxPool2d(_AdaptivePool2d):
    elements = Elements.ONE_OF
    monotone = Monotone.MOVES
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

    elements = Elements.ONE_OF
    monotone = Monotone.MOVES

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


OPS = (
    MaxPool1d,
    MaxPool2d,
    AvgPool1d,
    AvgPool2d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    LpPool2d,
    GlobalMaxPool,
    GlobalLpPool,
)
