"""Concrete Slice, PadConstant and Reshape instructions: how baselines make shapes fit.

Attributes are written the way the specs in `ops/shape.py` name them, so the
materializer and the exporter treat these instructions like generated ones.
"""

from __future__ import annotations

import math

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.baselines.net import Net

MAX_SLICE_AXES = 3  # the Slice spec takes at most three axes per instruction


def slice_to(net: Net, v: int, shape: tuple[int, ...], draw: ChoiceSource) -> int:
    """`v` cut down to `shape` (no dim larger than v's) by Slice instructions, at drawn offsets."""
    t = net.types[v]
    axes = [d for d in range(t.rank) if shape[d] < t.shape[d]]
    for k in range(0, len(axes), MAX_SLICE_AXES):
        chunk = axes[k : k + MAX_SLICE_AXES]
        attrs: dict = {"axes": chunk, "start_from": ["front"] * len(chunk), "end_from": ["front"] * len(chunk)}
        attrs["steps"] = [1] * len(chunk)
        cur = list(net.types[v].shape)
        for j, ax in enumerate(chunk):
            start = draw.integer("glue.slice_start", 0, cur[ax] - shape[ax])
            attrs[f"start{j}"], attrs[f"end{j}"] = start, start + shape[ax]
            cur[ax] = shape[ax]
        v = net.add("Slice", attrs, [v], [TensorType(tuple(cur), t.dtype)]).outputs[0]
    return v


def pad_to(net: Net, v: int, shape: tuple[int, ...], draw: ChoiceSource) -> int:
    """`v` grown to `shape` (no dim smaller than v's) by one PadConstant with zeros."""
    t = net.types[v]
    grow = [d for d in range(t.rank) if shape[d] > t.shape[d]]
    if not grow:
        return v
    k = t.rank - min(grow)  # PadConstant pads the k trailing dims
    attrs: dict = {"k": k, "value": 0}
    for i in range(k):
        d = t.rank - 1 - i
        extra = shape[d] - t.shape[d]
        left = draw.integer("glue.pad_left", 0, extra) if extra else 0
        attrs[f"l{i}"], attrs[f"r{i}"] = left, extra - left
    out = tuple(max(a, b) for a, b in zip(t.shape, shape))
    return net.add("PadConstant", attrs, [v], [TensorType(out, t.dtype)]).outputs[0]


def reshape_to_rank(net: Net, v: int, rank: int) -> int:
    """`v` with the same elements at `rank`: leading 1s added, or the leading dims merged."""
    t = net.types[v]
    if rank >= t.rank:
        shape = (1,) * (rank - t.rank) + t.shape
    elif rank == 0:
        if t.nelement() != 1:
            raise ValueError("only a one-element tensor reshapes to rank 0")
        shape = ()
    else:
        cut = t.rank - rank + 1
        shape = (math.prod(t.shape[:cut]), *t.shape[cut:])
    attrs: dict = {"rank": rank, "groups": [[t.rank, rank]] if t.rank and rank else [], "infer": None}
    if t.rank and rank > 1:
        attrs.update({f"s{i}": d for i, d in enumerate(shape)})
    return net.add("Reshape", attrs, [v], [TensorType(shape, t.dtype)]).outputs[0]
