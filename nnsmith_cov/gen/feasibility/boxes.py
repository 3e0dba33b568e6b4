"""Per-element bounds ("boxes"): started where elements are the same in every execution,
run through ops monotone in each input, and what they tell of a value's range."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op_facts import Monotone
from nnsmith_cov.gen.feasibility.elementwise import UNARY, unary_map
from nnsmith_cov.gen.feasibility.facts import Infeasible, Range, point, stored
from nnsmith_cov.gen.feasibility.layout import triangle
from nnsmith_cov.gen.feasibility.values import MAX_VALUES, of_values
from nnsmith_cov.gen.graph_ir import Inst
from nnsmith_cov.ops import ALL_OPS, op_by_name

# How each op moves with its inputs (the specs' `monotone`): non-decreasing in every input,
# element by element, it gives the output's lower bounds run on the inputs' lower bounds,
# its upper bounds on their upper bounds. Those that only move, pick or zero elements
# (`_MOVES`) are exact in any dtype; reductions of magnitudes run on the bounds of |x|.
# (Ops whose attributes decide, as ThresholdedRelu's, are asked by `monotone_for`.)
_MOVES = frozenset(op.name() for op in ALL_OPS if op.monotone is Monotone.MOVES)
_OF_MAGNITUDE = frozenset(op.name() for op in ALL_OPS if op.monotone is Monotone.MAGNITUDE)
# Non-monotone unary maps (but Abs, which has its own rule first): exact where an element
# is known (lo == hi), else bounded by the op's range only.
_POINTWISE_OTHER = frozenset(n for n in UNARY if op_by_name(n).monotone is Monotone.NONE)
# Ops whose output holds elements the same in every execution (padding, a zeroed triangle):
# boxes start there and are followed while they say more than the value's range.
_BOX_SOURCES = {"PadConstant", "Tril", "Triu"}
_SCATTERS = {"ScatterValue", "ScatterAdd", "ScatterReduce"}
Box = tuple[torch.Tensor, torch.Tensor]


def _box(t, r: Range, dt: torch.dtype) -> Box:
    """The per-element bounds of a value of type t in dt: its box, or where it is known
    only by its range, that range everywhere. (A bound rounded to dt still bounds the
    values dt holds; one beyond dt's range becomes an infinity.)"""
    if r.box is not None:
        return r.box[0].to(dt), r.box[1].to(dt)
    lo, hi = (torch.tensor(b, dtype=torch.float64).to(dt).expand(t.shape) for b in (r.lo, r.hi))
    return lo, hi


def _clean(lo: torch.Tensor, hi: torch.Tensor) -> Box:
    """Bounds with NaN (0 * inf, inf - inf) read as no bound."""
    # (nan_to_num would also turn infinities into the dtype's largest values)
    return lo.nan_to_num(nan=-math.inf, posinf=math.inf), hi.nan_to_num(nan=math.inf, neginf=-math.inf)


def _magnitude(lo: torch.Tensor, hi: torch.Tensor) -> Box:
    """Per-element bounds of |x| for x in [lo, hi]."""
    return torch.where(lo >= 0, lo, torch.where(hi <= 0, -hi, torch.zeros_like(lo))), torch.maximum(lo.abs(), hi.abs())


def _exact_dtype(t) -> torch.dtype:
    """The dtype ops that only move elements run in on t's bounds, exactly and fast:
    float16's slow CPU kernels (Tril takes milliseconds) in float32, integers in float64
    (exact below 2**53)."""
    return torch.float32 if t.dtype is DType.float16 else (t.dtype.torch if t.dtype.is_float else torch.float64)


def _writes_for_certain(a) -> bool:
    """Whether a scatter writes every element it reaches in every execution: positions
    wrap into the axis (`positions`), so along an axis of size 1 every index is 0."""
    t, index = a["in_types"][:2]
    return t.shape[a.axis] == 1 and index.shape[a.axis] > 0


def _scatter_box(a, x: Range) -> Box | None:
    """A scatter writes only where the coordinates off its axis lie within the index's
    shape: elsewhere x's bounds hold. A ScatterValue widens them where it writes to take its
    value; the scatters of a source leave them to the output's range."""
    t, index = a["in_types"][:2]
    if t.dtype is DType.bool:
        return None
    dt = _exact_dtype(t)
    lo, hi = (b.clone() for b in _box(t, x, dt))
    reach = tuple(slice(None) if d == a.axis else slice(0, n) for d, n in enumerate(index.shape))
    if "value" in a:
        value = op_by_name("ScatterValue").written(a, t.dtype)
        if _writes_for_certain(a):
            lo[reach], hi[reach] = value, value
        else:
            lo[reach], hi[reach] = lo[reach].clamp(max=value), hi[reach].clamp(min=value)
    else:
        lo[reach], hi[reach] = -math.inf, math.inf
    return lo, hi


def _pick_box(name: str, a, x: Range) -> Box | None:
    """A GatherElements or IndexSelect along an axis of size 1: positions wrap into the
    axis, so every pick is its one element, a broadcast of x (off the axis a
    GatherElements reads the index's extent of x). None along a longer axis."""
    t, out = a["in_types"][0], tuple(a["out_types"][0].shape)
    if t.shape[a.axis] != 1:
        return None
    dt = _exact_dtype(t)
    lo, hi = _box(t, x, dt)
    if name == "GatherElements":
        keep = tuple(slice(None) if d == a.axis else slice(0, n) for d, n in enumerate(out))
        lo, hi = lo[keep], hi[keep]
    return lo.expand(out), hi.expand(out)


def _monotone_cast(name: str, a) -> bool:
    """A cast into a float: it keeps the order of values (False < True). (Integer to
    integer wraps; a float out of an integer's range has no defined integer.)"""
    return name.startswith("Cast") and a["out_types"][0].dtype.is_float


def _triangle_of(name: str, a, x: torch.Tensor) -> torch.Tensor:
    return triangle(name, a.diagonal, x)


def _box_of(inst: Inst, a, ins: list[Range]) -> list[Box] | None:
    """Per-element bounds of the outputs of `inst`, from its inputs' boxes (or ranges)."""
    name = inst.op
    if name in _SCATTERS:
        box = _scatter_box(a, ins[0])
        return None if box is None else [box]
    if name in ("GatherElements", "IndexSelect"):
        box = _pick_box(name, a, ins[0])
        return None if box is None else [box]
    if name == "Interpolate" and a.mode == "bicubic":
        return None
    types = a["in_types"]
    cast = _monotone_cast(name, a)
    exact = name in _MOVES or name == "BitwiseAnd" or cast
    # Booleans ride as 0 and 1 through moves (the outputs are read back as booleans below)
    # and through casts into floats.
    bools = name in _MOVES and all(t.dtype is DType.bool for t in (*types, *a["out_types"]))
    numbers = all(t.dtype is not DType.bool for t in types)
    if not all(t.dtype.is_float for t in types) and not (exact and (numbers or bools or cast)):
        return None
    boxes = []
    for t, r in zip(types, ins):
        # Moves are exact in any dtype; a cast takes integer bounds as the float64 they are
        # stored in (int64's 2**63 has no int64).
        dt = _exact_dtype(t) if exact else t.dtype.torch
        boxes.append(_box(t, r, dt))
    spec = op_by_name(name)
    fwd = spec.forward
    if name in ("Tril", "Triu"):
        fwd = functools.partial(_triangle_of, name)
    dom = unary_map(name)[2] if name in UNARY else None
    trend = spec.monotone_for(a)
    try:
        with torch.no_grad():
            if trend in (Monotone.MOVES, Monotone.RISING) or cast:
                if dom is not None:  # valid executions keep the input in the domain
                    boxes = [(lo.clamp(dom[0], dom[1]), hi.clamp(dom[0], dom[1])) for lo, hi in boxes]
                los, his = fwd(a, *(lo for lo, _ in boxes)), fwd(a, *(hi for _, hi in boxes))
            elif trend is Monotone.FALLING:
                ((lo, hi),) = boxes
                if dom is not None:
                    lo, hi = lo.clamp(dom[0], dom[1]), hi.clamp(dom[0], dom[1])
                los, his = fwd(a, hi), fwd(a, lo)
            elif name == "Abs":
                los, his = _magnitude(*boxes[0])
            elif name in _OF_MAGNITUDE:
                mag_lo, mag_hi = _magnitude(*boxes[0])
                los, his = fwd(a, mag_lo), fwd(a, mag_hi)
            elif name == "ReduceProd" and all(bool((lo >= 0).all()) for lo, _ in boxes):
                ((lo, hi),) = boxes  # a product of non-negative factors grows with each
                los, his = fwd(a, lo), fwd(a, hi)
            elif name in _POINTWISE_OTHER:
                ((lo, hi),) = boxes
                y, known = fwd(a, lo), lo == hi
                los = torch.where(known, y, torch.full_like(y, -math.inf))
                his = torch.where(known, y, torch.full_like(y, math.inf))
            elif name == "BitwiseAnd":  # 0 & y is 0; elsewhere nothing beyond the value's range
                (x_lo, x_hi), (y_lo, y_hi) = boxes
                zero = (x_lo == 0) & (x_hi == 0) | (y_lo == 0) & (y_hi == 0)
                los = torch.full(zero.shape, -math.inf, dtype=torch.float64).masked_fill(zero, 0)
                his = torch.full(zero.shape, math.inf, dtype=torch.float64).masked_fill(zero, 0)
            elif name == "Sub":
                (p_lo, p_hi), (q_lo, q_hi) = boxes
                los, his = fwd(a, p_lo, q_hi), fwd(a, p_hi, q_lo)
            elif name in ("Mul", "PReLU"):
                # Bilinear in its two inputs (PReLU: max(0, x) + w * min(0, x)): its extremes
                # over a box are at the corners.
                (x_lo, x_hi), (w_lo, w_hi) = boxes
                if name == "PReLU":
                    base = (torch.relu(x_lo), torch.relu(x_hi))
                    x_lo, x_hi = x_lo.clamp(max=0), x_hi.clamp(max=0)
                corners = [fwd(a, x, w) for x in (x_lo, x_hi) for w in (w_lo, w_hi)]
                corners = [c.nan_to_num(nan=math.nan) for c in corners]
                los = torch.stack(torch.broadcast_tensors(*corners)).amin(0)
                his = torch.stack(torch.broadcast_tensors(*corners)).amax(0)
                if any(bool(c.isnan().any()) for c in corners):  # 0 * inf: no bound there ...
                    nan = torch.stack(torch.broadcast_tensors(*[c.isnan() for c in corners])).any(0)
                    # ... unless a factor is 0 in every execution: valid ones have finite values.
                    zero = (x_lo == 0) & (x_hi == 0)
                    if name == "Mul":  # (PReLU's slope goes by channel: it does not broadcast)
                        zero = zero | (w_lo == 0) & (w_hi == 0)
                    los, his = los.masked_fill(nan, -math.inf), his.masked_fill(nan, math.inf)
                    los, his = los.masked_fill(zero, 0), his.masked_fill(zero, 0)
                if name == "PReLU":
                    los, his = los + base[0], his + base[1]
            else:
                return None
    except (RuntimeError, IndexError, ValueError, TypeError):
        return None
    los = list(los) if isinstance(los, tuple | list) else [los]
    his = list(his) if isinstance(his, tuple | list) else [his]
    out = []
    for lo, hi, t in zip(los, his, a["out_types"]):
        lo, hi = _clean(lo, hi)
        if t.dtype is DType.bool:  # any number but 0 reads as True (a padding value of 2)
            lo, hi = ((lo > 0) | (hi < 0)).double(), ((lo != 0) | (hi != 0)).double()
        out.append((lo, hi))
    return out


def boxes(inst: Inst, a, ins: list[Range], outs: list[Range]) -> list[Range]:
    """`outs` sharpened by per-element bounds, where some input has a box or the op makes
    one. What a box tells: the output's bounds are the boxes' extremes; some element is at
    most the least upper bound (and at least the greatest lower bound); elements whose two
    bounds meet hold that value in every execution (an Inf there means every execution
    has one)."""
    outs = [replace(r, box=None) if r.box is not None else r for r in outs]  # only the op's own
    # A Concat of a known part (a zeroed triangle, folded away to its value) and others
    # starts a box too.
    concat_known = inst.op.startswith("Concat") and any(point(r) for r in ins) and not all(point(r) for r in ins)
    written = inst.op == "ScatterValue" and _writes_for_certain(a)
    if not (inst.op in _BOX_SOURCES or concat_known or written or any(r.box is not None for r in ins)):
        return outs
    got = _box_of(inst, a, ins)
    if got is None:
        return outs
    src = next((x.src for x in ins if x.src), "") or inst.op
    boxed = []
    for r, (lo, hi), t in zip(outs, got, a["out_types"]):
        if tuple(lo.shape) != tuple(t.shape) or tuple(hi.shape) != tuple(t.shape):
            boxed.append(r)  # bounds broadcast past the value: they say nothing of its elements
            continue
        # The value's range bounds every element too.
        if r.lo > -math.inf or r.hi < math.inf:  # (in float64: a bound beyond float16's range)
            lo, hi = lo.double().clamp(min=r.lo).to(lo.dtype), hi.double().clamp(max=r.hi).to(hi.dtype)
        known = lo == hi
        lo_min, lo_max = (float(c) for c in torch.aminmax(lo))
        hi_min, hi_max = (float(c) for c in torch.aminmax(hi))
        if lo_max == math.inf or hi_min == -math.inf:
            raise Infeasible(f"{inst.op} <- {src}: Inf in every execution")
        store = (stored(lo), stored(hi))
        if bool(known.all()):  # every element known: the values there are, and where each is
            taken = torch.unique(lo.double())
            if len(taken) > MAX_VALUES:
                boxed.append(r)
                continue
            found = [float(c) for c in taken]  # each taken by some element
            known_values = of_values(found, r.src or src, frozenset(found))
            boxed.append(replace(known_values, box=store) if len(taken) > 1 else known_values)
            continue
        if lo_min == lo_max and hi_min == hi_max and lo_min < hi_min:  # the same bounds everywhere: no box
            boxed.append(replace(r, lo=max(r.lo, lo_min), hi=min(r.hi, hi_max)))
            continue
        forced = r.forced
        if bool(known.any()):
            k_lo, k_hi = (float(c) for c in torch.aminmax(lo[known]))
            forced = forced | {k_lo, k_hi}
        boxed.append(
            replace(
                r,
                lo=max(r.lo, lo_min),
                hi=min(r.hi, hi_max),
                forced=forced,
                below=min(r.below, hi_min),
                above=max(r.above, lo_max),
                box=store,
                src=r.src or src,
            )
        )
    return boxed
