"""F.interpolate(scale_factor=) exported as the one Resize node PyTorch's exporter means.

Left to itself the TorchScript exporter builds the `scales` input as a Concat of constants,
which a default export (constant folding on) folds into one tensor but ours (folding off, so
weight-only subgraphs survive) keeps: ONNX shape inference cannot read such scales, and every
shape after the Resize would be unknown. This writes the node a folded export holds: the
exporter's attributes, roi left out from opset 13 (an empty tensor before, where it is a
required input), and the scales one constant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def resize_attrs(mode: str, align: bool | None) -> dict[str, Any]:
    """The attributes PyTorch's exporter gives the Resize of F.interpolate(scale_factor=),
    in the exporter's suffixed names."""
    onnx_mode = {"nearest": "nearest", "bicubic": "cubic"}.get(mode, "linear")
    coords = "asymmetric" if mode == "nearest" else ("align_corners" if align else "half_pixel")
    return {
        "mode_s": onnx_mode,
        "coordinate_transformation_mode_s": coords,
        "cubic_coeff_a_f": -0.75,
        "nearest_mode_s": "floor",
    }


class _ResizeScales(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fn: Callable, factors: tuple[float, ...], attrs: dict) -> torch.Tensor:
        return fn(x)

    @staticmethod
    def symbolic(g: Any, x: Any, fn: Callable, factors: tuple[float, ...], attrs: dict) -> Any:
        if g.opset < 13:
            roi = g.op("Constant", value_t=torch.tensor([], dtype=torch.float32))
        else:  # an absent optional input: a None constant, written as the empty name
            roi = g.op("prim::Constant")
            roi.setType(torch._C.OptionalType.ofTensor())
        scales = g.op("Constant", value_t=torch.tensor([1.0, 1.0, *factors], dtype=torch.float32))
        return g.op("Resize", x, roi, scales, **attrs)


def resize_by_scales(
    x: torch.Tensor,
    fn: Callable[[torch.Tensor], torch.Tensor],
    factors: tuple[float, ...],
    mode: str,
    align: bool | None,
) -> torch.Tensor:
    """`fn(x)` (an F.interpolate with `factors` per spatial dim) in torch, with autograd for
    the value search; in an export, one Resize with constant scales (1, 1, *factors)."""
    if not torch.onnx.is_in_onnx_export():
        return fn(x)
    return _ResizeScales.apply(x, fn, factors, resize_attrs(mode, align))
