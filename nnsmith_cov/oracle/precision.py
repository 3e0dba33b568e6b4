"""The precision-aware oracle: whether a numeric mismatch is a bug, rounding or a discontinuity.

PyTorch's outputs are themselves rounded (float16 most of all), so a backend that disagrees with
them may simply be the more accurate of the two. For a mismatch, the graph is re-run in float64
(`exact.py`) and each element beyond tolerance is judged:

- *discontinuity*: moving some discontinuous op's input (Round, Floor, comparisons, ArgMax
  ties, casts to integers...) within rounding changes this element beyond tolerance, and the
  backend's value lies within the range those moves produce;
- *precision*: the backend is as close as PyTorch to the float64 value rounded to the output's
  dtype (within one unit in the last place of that dtype);
- otherwise *bug*: the backend is farther from the exact value than PyTorch.

A finding is "bug" when any element is; "discontinuity" when every element is explained by a
flip; "precision" otherwise. `rule` names the deciding rule with its figures.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.oracle.compare import Mismatch, bad_elements
from nnsmith_cov.oracle.exact import ROUNDING_SLACK, Exact, NoExactReference, exact_reference

# Mismatch reasons a numeric verdict can speak to; shape, dtype, missing outputs stay bugs.
NUMERIC = ("value", "nan", "inf")
Tolerance = Callable[[np.dtype], tuple[float, float]]  # (rtol, atol) for an output dtype


@dataclass(frozen=True)
class Verdict:
    category: str  # "bug" | "precision" | "discontinuity" (see finding.CLASSES)
    rule: str  # the deciding rule and its figures


def _distance(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|v - x| in float64; 0 where both are the same NaN or infinity, inf where only one is finite."""
    v, x = v.astype(np.float64), x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(v - x)
    same = (np.isnan(v) & np.isnan(x)) | (np.isinf(v) & (v == x))
    return np.where(same, 0.0, np.where(np.isfinite(v) & np.isfinite(x), d, np.inf))


def _ulp(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """One unit in the last place of `dtype` at x (0 for integers and non-finite x)."""
    if np.dtype(dtype).kind != "f":
        return np.zeros(x.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        ulp = np.spacing(np.abs(x.astype(dtype))).astype(np.float64)
    return np.where(np.isfinite(ulp), ulp, 0.0)


@dataclass
class _Output:
    """One mismatching output's elements, judged."""

    name: str
    bad: int  # elements beyond tolerance
    flipped: int  # ... explained by a flip
    closer: int  # ... where the backend is as close to float64 as PyTorch
    worst: str  # the worst unexplained element, for the rule ("" when none)
    err_backend: float  # largest backend error from float64 on the bad elements
    err_torch: float  # largest PyTorch error from float64 on the same elements
    flip_ops: list[str]


def _judge_output(name: str, e: np.ndarray, a: np.ndarray, exact: Exact, tol: tuple[float, float]) -> _Output:
    rtol, atol = tol
    x = np.asarray(exact.outputs[name]).astype(np.float64)
    bad = bad_elements(e, a, rtol, atol)
    aw, ew = a.astype(np.float64), e.astype(np.float64)
    # Distances to the exact value rounded to the output's dtype: beyond its range that is inf.
    with np.errstate(over="ignore", invalid="ignore"):
        xr = x.astype(e.dtype).astype(np.float64) if e.dtype.kind == "f" else x
    eb, et = _distance(aw, xr), _distance(ew, xr)
    with np.errstate(invalid="ignore", over="ignore"):
        reach = atol + rtol * np.abs(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0))
    # Flips: the element changed beyond tolerance under some op's move, and the backend's value
    # lies within (tolerance of) the range spanned by the float64 value, PyTorch's and the flips.
    changed = np.zeros(x.shape, dtype=bool)
    lo, hi = np.fmin(x, ew), np.fmax(x, ew)
    ops: list[str] = []
    for flip in exact.flips:
        f = np.asarray(flip.outputs[name]).astype(np.float64)
        moved = _distance(f, x) > reach
        if (moved & bad).any() and flip.op not in ops:
            ops.append(flip.op)
        changed |= moved
        lo, hi = np.fmin(lo, f), np.fmax(hi, f)
    with np.errstate(invalid="ignore"):
        inside = (aw >= lo - reach) & (aw <= hi + reach)
    flipped = bad & changed & inside
    # As close as PyTorch: within one ulp of the output's dtype of PyTorch's own error.
    closer = bad & ~flipped & (np.isfinite(eb) | (eb == 0)) & (eb <= et + _ulp(x, e.dtype))
    unexplained = bad & ~flipped & ~closer
    worst = ""
    if unexplained.any():
        flat = int(np.argmax(np.where(unexplained, np.nan_to_num(eb - et, nan=np.inf), -np.inf).reshape(-1)))
        idx = tuple(int(i) for i in np.unravel_index(flat, x.shape))
        worst = (
            f"{name}{list(idx)}: float64 {x.reshape(-1)[flat]:.7g}, backend {aw.reshape(-1)[flat]:.7g} "
            f"(off {eb.reshape(-1)[flat]:.3g}), torch {ew.reshape(-1)[flat]:.7g} (off {et.reshape(-1)[flat]:.3g})"
        )
    on_bad = lambda d: float(d[bad].max()) if bad.any() else 0.0
    return _Output(name, int(bad.sum()), int(flipped.sum()), int(closer.sum()), worst, on_bad(eb), on_bad(et), ops)


def _verdict(outs: list[_Output], exact: Exact) -> Verdict:
    bad = sum(o.bad for o in outs)
    flipped = sum(o.flipped for o in outs)
    closer = sum(o.closer for o in outs)
    notes = ""
    if exact.own_dtype:
        notes += f"; at their own dtype: {', '.join(exact.own_dtype)}"
    if exact.cut:
        notes += "; flip trials cut by the time budget"
    ops = list(dict.fromkeys(op for o in outs for op in o.flip_ops))
    fewest = min((f.jumps for f in exact.flips if f.op in ops), default=0)
    err_b = max(o.err_backend for o in outs)
    err_t = max(o.err_torch for o in outs)
    unexplained = [o for o in outs if o.worst]
    if unexplained:
        first = unexplained[0]
        left = bad - flipped - closer
        return Verdict(
            "bug",
            f"exact: backend farther from float64 than torch on {left} of {bad} bad elements, e.g. "
            f"{first.worst}{notes}",
        )
    if flipped == bad:
        return Verdict(
            "discontinuity",
            f"discontinuity: all {bad} bad elements move when {' or '.join(ops)} jumps (at as few as "
            f"{fewest} of its elements) with its inputs moved within {ROUNDING_SLACK:g}x their rounding, "
            f"and the backend's values lie within what those jumps give{notes}",
        )
    also = f"; {flipped} more explained by a jump of {' or '.join(ops)}" if flipped else ""
    return Verdict(
        "precision",
        f"precision: backend as close to float64 as torch on {closer} of {bad} bad elements "
        f"(backend off by at most {err_b:.3g}, torch by {err_t:.3g}){also}{notes}",
    )


# The last test's re-run, per thread (a campaign's worker threads each judge their own tests):
# each backend, and each one's O0 run, judge the same test one after another.
_last = threading.local()


def _reference(graph: GraphIR, values: Mapping[str, np.ndarray], seed: int) -> Exact | NoExactReference:
    hit = getattr(_last, "entry", None)
    if hit is not None and hit[0] is graph and hit[1] is values and hit[2] == seed:
        return hit[3]
    try:
        found: Exact | NoExactReference = exact_reference(graph, values, seed)
    except NoExactReference as e:
        found = e
    except Exception as e:  # a fault of ours must not cost the finding: it stays a bug, the rule says why
        found = NoExactReference(f"{type(e).__name__}: {e}")
    _last.entry = (graph, values, seed, found)
    return found


def judge_precision(
    graph: GraphIR,
    values: Mapping[str, np.ndarray],
    oracle: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    mismatches: list[Mismatch],
    tolerance: Tolerance,
    seed: int = 0,
    exact: Exact | None = None,
) -> Verdict | None:
    """The class of a mismatch found by `compare_outputs`, from a float64 re-run of `graph`
    (`exact`, or computed here); None when a mismatch is not numeric (a shape, a dtype, an
    output missing), which no rounding explains."""
    if not mismatches or any(m.reason not in NUMERIC for m in mismatches):
        return None
    if exact is None:
        found = _reference(graph, values, seed)
        if isinstance(found, NoExactReference):
            return Verdict("bug", f"no exact reference: {found}")
        exact = found
    outs: list[_Output] = []
    for m in mismatches:
        e, a = np.asarray(oracle[m.name]), np.asarray(actual[m.name])
        if m.name not in exact.outputs or exact.outputs[m.name].shape != e.shape:
            return Verdict("bug", f"no exact reference: float64 re-run has no output {m.name} of shape {e.shape}")
        try:
            outs.append(_judge_output(m.name, e, a, exact, tolerance(e.dtype)))
        except Exception as err:  # as in `_reference`: the finding stays, a bug
            return Verdict("bug", f"no exact reference: judging {m.name}: {type(err).__name__}: {err}")
    return _verdict(outs, exact)
