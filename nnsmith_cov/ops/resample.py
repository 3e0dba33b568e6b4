"""Resizing, rearranging and sampling: Interpolate, pixel (un)shuffle, SpaceToDepth, GridSample, AffineGrid."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import ALL, FLOATS, DType
from nnsmith_cov.abstract.layout import RankChanging, mixed_ranks
from nnsmith_cov.abstract.op import AttrKind, Attrs, OpSpec, Slot, same
from nnsmith_cov.abstract.op_facts import Elements, Monotone
from nnsmith_cov.abstract.symbols import context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor, Dim
from nnsmith_cov.abstract.window import Layer, multiple, spatial
from nnsmith_cov.ops.onnx_node import as_node
from nnsmith_cov.ops.resize_node import resize_by_scales

SIZE, PAD = AttrKind.SIZE, AttrKind.PAD

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

    elements = Elements.SOME
    monotone = Monotone.RISING
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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

    elements = Elements.ALL
    monotone = Monotone.MOVES
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


OPS = (Interpolate, PixelShuffle, PixelUnshuffle, SpaceToDepth, GridSample, AffineGrid)
