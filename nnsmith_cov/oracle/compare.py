"""Compare a compiler's outputs with the reference outputs, one symptom per output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Mismatch:
    """How one output disagrees with its reference."""

    name: str  # output name
    reason: str  # "missing", "extra", "shape", "dtype", "nan", "inf" or "value"
    detail: str  # one line for humans


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _fmt(x: np.generic) -> str:
    v = x.item()
    return f"{v:.7g}" if isinstance(v, float) else str(v)


def _where(bad: np.ndarray, e: np.ndarray, a: np.ndarray, what: str) -> str:
    # Count and first offender, read from the original arrays so dtypes print as given.
    flat = int(np.flatnonzero(bad)[0])
    idx = _index(flat, e.shape)
    return (
        f"{what} differ at {int(bad.sum())} of {bad.size} elements, first at {idx}: "
        f"expected {_fmt(e.reshape(-1)[flat])}, got {_fmt(a.reshape(-1)[flat])}"
    )


def _compare_one(name: str, e: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> Mismatch | None:
    if e.shape != a.shape:
        return Mismatch(name, "shape", f"expected shape {e.shape}, got {a.shape}")
    if e.dtype != a.dtype:
        return Mismatch(name, "dtype", f"expected dtype {e.dtype}, got {a.dtype}")
    if e.dtype.kind not in "biufc":  # strings, objects: only exact equality makes sense
        bad = e != a
        return Mismatch(name, "value", _where(bad, e, a, "values")) if bad.any() else None
    # Float64 (complex128 for complex) so that integer differences cannot overflow.
    wide = np.complex128 if e.dtype.kind == "c" else np.float64
    ew, aw = e.astype(wide), a.astype(wide)
    bad = np.isnan(ew) != np.isnan(aw)
    if bad.any():
        return Mismatch(name, "nan", _where(bad, e, a, "NaN positions"))
    # NaNs agree here; infinities must sit at the same places with the same sign.
    e_inf, a_inf = np.isinf(ew), np.isinf(aw)
    bad = (e_inf | a_inf) & ~((e_inf & a_inf) & (ew == aw))
    if bad.any():
        return Mismatch(name, "inf", _where(bad, e, a, "Inf positions or signs"))
    finite = np.isfinite(ew)
    with np.errstate(over="ignore", invalid="ignore"):  # huge finite values may overflow to inf: still a diff
        diff = np.where(finite, np.abs(aw - ew), 0.0)
        bad = diff > atol + rtol * np.abs(np.where(finite, ew, 0.0))
    if not bad.any():
        return None
    # Report the worst element among those beyond tolerance, not one that a large |e| excuses.
    flat = int(np.argmax(np.where(bad, diff, -1.0).reshape(-1)))
    return Mismatch(
        name,
        "value",
        f"max abs diff {diff.reshape(-1)[flat]:.4g} at {_index(flat, e.shape)}: "
        f"expected {_fmt(e.reshape(-1)[flat])}, got {_fmt(a.reshape(-1)[flat])}; "
        f"{int(bad.sum())} of {bad.size} elements beyond rtol={rtol:g} atol={atol:g}",
    )


def compare_outputs(
    expected: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    rtol: float = 1e-2,
    atol: float = 1e-3,
    per_dtype: Mapping[str, tuple[float, float]] | None = None,
) -> list[Mismatch]:
    """Mismatches between `actual` and `expected`, in `expected`'s order, then extras; [] means agreement.

    `per_dtype` maps a dtype name ("float16") to its own (rtol, atol): half precision
    accumulates rounding a tolerance made for float32 would call a bug.
    """
    tolerances = [(rtol, atol), *(per_dtype or {}).values()]
    if any(r < 0 or a < 0 for r, a in tolerances):
        raise ValueError(f"tolerances must be non-negative, got {tolerances}")
    out: list[Mismatch] = []
    for name, e in expected.items():
        if name not in actual:
            out.append(Mismatch(name, "missing", "no such output from the backend"))
            continue
        e = np.asarray(e)
        r, a = (per_dtype or {}).get(e.dtype.name, (rtol, atol))
        m = _compare_one(name, e, np.asarray(actual[name]), r, a)
        if m is not None:
            out.append(m)
    out.extend(Mismatch(n, "extra", "output not in the reference") for n in actual if n not in expected)
    return out
