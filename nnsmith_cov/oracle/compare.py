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


def _masks(
    e: np.ndarray, a: np.ndarray, rtol: float, atol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(NaN positions differ, Inf positions or signs differ, finite values beyond tolerance, |a - e|)
    for numeric arrays of one shape; each later mask is meaningful where the earlier ones agree."""
    # Float64 (complex128 for complex) so that integer differences cannot overflow.
    wide = np.complex128 if e.dtype.kind == "c" else np.float64
    ew, aw = e.astype(wide), a.astype(wide)
    nan = np.isnan(ew) != np.isnan(aw)
    # NaNs agree here; infinities must sit at the same places with the same sign.
    e_inf, a_inf = np.isinf(ew), np.isinf(aw)
    inf = (e_inf | a_inf) & ~((e_inf & a_inf) & (ew == aw))
    finite = np.isfinite(ew)
    with np.errstate(over="ignore", invalid="ignore"):  # huge finite values may overflow to inf: still a diff
        diff = np.where(finite, np.abs(aw - ew), 0.0)
        value = diff > atol + rtol * np.abs(np.where(finite, ew, 0.0))
    return nan, inf, value, diff


def bad_elements(e: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """Where `a` disagrees with `e` (NaN or Inf placement, or a value beyond tolerance), as a
    boolean array of their shape; ValueError unless both are numeric arrays of one shape."""
    e, a = np.asarray(e), np.asarray(a)
    if e.shape != a.shape or e.dtype.kind not in "biufc" or a.dtype.kind not in "biufc":
        raise ValueError(f"cannot compare {e.dtype}{list(e.shape)} with {a.dtype}{list(a.shape)} element-wise")
    nan, inf, value, _ = _masks(e, a, rtol, atol)
    return nan | inf | value


def _compare_one(name: str, e: np.ndarray, a: np.ndarray, rtol: float, atol: float) -> Mismatch | None:
    if e.shape != a.shape:
        return Mismatch(name, "shape", f"expected shape {e.shape}, got {a.shape}")
    if e.dtype != a.dtype:
        return Mismatch(name, "dtype", f"expected dtype {e.dtype}, got {a.dtype}")
    if e.dtype.kind not in "biufc":  # strings, objects: only exact equality makes sense
        bad = e != a
        return Mismatch(name, "value", _where(bad, e, a, "values")) if bad.any() else None
    nan, inf, bad, diff = _masks(e, a, rtol, atol)
    if nan.any():
        return Mismatch(name, "nan", _where(nan, e, a, "NaN positions"))
    if inf.any():
        return Mismatch(name, "inf", _where(inf, e, a, "Inf positions or signs"))
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


def tolerance_for(
    dtype: np.dtype, rtol: float, atol: float, per_dtype: Mapping[str, tuple[float, float]] | None = None
) -> tuple[float, float]:
    """The (rtol, atol) an output of `dtype` is compared with."""
    return (per_dtype or {}).get(np.dtype(dtype).name, (rtol, atol))


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
        r, a = tolerance_for(e.dtype, rtol, atol, per_dtype)
        m = _compare_one(name, e, np.asarray(actual[name]), r, a)
        if m is not None:
            out.append(m)
    out.extend(Mismatch(n, "extra", "output not in the reference") for n in actual if n not in expected)
    return out
