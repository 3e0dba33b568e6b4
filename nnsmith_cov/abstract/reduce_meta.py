"""Meta-classes for reductions: over a set of axes (Reduce) or one axis to an index (ArgReduce)."""

from __future__ import annotations

from typing import ClassVar

import torch

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.layout import RankChanging
from nnsmith_cov.abstract.op import ANY_RANK, MAX_RANK, Attrs, Slot
from nnsmith_cov.abstract.tensor import AbsTensor, Dim


def _reduced_shape(shape: list[Dim], axes: list[int] | None, keepdim: bool) -> list[Dim]:
    if axes is None:  # every axis
        return [1] * len(shape) if keepdim else []
    if keepdim:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes]


class Reduce(RankChanging):
    """Reduce a drawn set of axes, keeping them as size 1 or dropping them.

    params: `axes` (sorted list; None = all axes, called without `dim`, which
    is the only form for rank 0) and `keepdim`. Subclasses give `reduce(x,
    dims, keepdim)` with dims a tuple or None.
    """

    in_ranks = (ANY_RANK,)
    only_all: ClassVar[bool] = False  # only the full reduction without `dim` (rank-0 output)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        if self.only_all and out_rank:
            return None
        return [draw.integer("reduce.in_rank", out_rank, MAX_RANK)]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n = ins[0][1]
        want = self.out_rank
        if n == 0 or self.only_all:
            # torch accepts dim=0 on a 0-d tensor, but the TorchScript exporter
            # then emits axes=[0] for a rank-0 input, which ONNX rejects; so
            # rank 0 reduces without a dim.
            self.params.update(axes=None, keepdim=False)
            return
        if want is None:
            keepdim = draw.coin("reduce.keepdim")
            k = draw.integer("reduce.n_axes", 1, n)
        elif want == n:
            keepdim, k = True, draw.integer("reduce.n_axes", 1, n)
        else:
            keepdim, k = False, n - want
        axes = sorted(draw.sample("reduce.axes", range(n), k))
        if k == n and not keepdim and draw.coin("reduce.no_dim"):
            axes = None
        self.params.update(axes=axes, keepdim=keepdim)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        dt = self.out_dtypes([x[0].dtype])[0]
        return [AbsTensor(_reduced_shape(x[0].shape, self.params["axes"], self.params["keepdim"]), dt)]

    @staticmethod
    def reduce(x: torch.Tensor, dims: tuple[int, ...] | None, keepdim: bool) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        return cls.reduce(x, None if a.axes is None else tuple(a.axes), a.keepdim)


class ArgReduce(RankChanging):
    """Index of the extreme value along one axis (int64), or over the flattened tensor.

    params: `axis` (None = flattened, output rank 0) and `keepdim`.
    """

    in_ranks = (ANY_RANK,)
    fn: ClassVar = staticmethod(torch.argmax)

    def in_ranks_for(self, draw: ChoiceSource, out_rank: int) -> list[int] | None:
        if out_rank == 0:
            return [draw.integer("arg.in_rank", 0, 1)]
        return [out_rank + draw.integer("arg.keepdim", 0, 1) if out_rank < MAX_RANK else out_rank]

    def setup(self, draw: ChoiceSource, ins: list[Slot]) -> None:
        n, want = ins[0][1], self.out_rank
        if n == 0:
            # No dim for rank 0 (the exporter mishandles dim=0 on a 0-d input, as
            # for Reduce); flattening argmax of a tensor of rank > 0 is kept for
            # the output-rank-0 case and drawn in forward insertion.
            self.params.update(axis=None, keepdim=False)
            return
        if want is None:
            flat = draw.coin("arg.flat", 0.15)
            keepdim = draw.coin("arg.keepdim")
        else:
            flat, keepdim = want == 0 and n == 1 and draw.coin("arg.flat"), want == n
        axis = None if flat else draw.integer("arg.axis", 0, n - 1)
        self.params.update(axis=axis, keepdim=keepdim and not flat)

    def type_transfer(self, x: list[AbsTensor]) -> list[AbsTensor]:
        axis, keep = self.params["axis"], self.params["keepdim"]
        shape = [] if axis is None else _reduced_shape(x[0].shape, [axis], keep)
        return [AbsTensor(shape, self.out_dtypes([x[0].dtype])[0])]

    @classmethod
    def forward(cls, a: Attrs, x: torch.Tensor) -> torch.Tensor:
        if a.axis is None:
            return cls.fn(x)
        return cls.fn(x, a.axis, a.keepdim)
