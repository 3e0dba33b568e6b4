"""Output comparison: agreement, and one symptom of the right kind per disagreeing output."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nnsmith_cov.oracle.compare import Mismatch, compare_outputs


def _one(expected, actual, **tol) -> Mismatch:
    ms = compare_outputs({"o": expected}, {"o": actual}, **tol)
    assert len(ms) == 1, ms
    assert ms[0].name == "o"
    return ms[0]


@given(
    hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
    )
)
def test_equal_arrays_agree(x):
    # Copies, so NaNs and infinities in the same places must agree too.
    assert compare_outputs({"a": x, "b": x}, {"b": x.copy(), "a": x.copy()}) == []


def test_perturbation_beyond_tolerance_is_value_mismatch_at_its_index():
    e = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = e.copy()
    a[1, 2] += 0.5
    a[2, 3] += 0.2  # also beyond tolerance (0.001 + 0.01 * 11), but smaller
    m = _one(e, a)
    assert m.reason == "value"
    assert "at (1, 2)" in m.detail
    assert "expected 6, got 6.5" in m.detail
    assert "2 of 12 elements" in m.detail
    assert "\n" not in m.detail


def test_reported_element_is_the_worst_beyond_tolerance():
    e = np.array([1000.0, 1.0])
    a = np.array([1005.0, 1.5])  # the 5.0 difference is within 0.001 + 0.01 * 1000
    m = _one(e, a)
    assert m.detail.startswith("max abs diff 0.5 at (1,): expected 1, got 1.5; 1 of 2 elements")


def test_within_tolerance_agrees():
    e = np.array([1.0, 100.0, 0.0], dtype=np.float64)
    a = e + np.array([0.009, 0.9, 0.0009])  # atol + rtol * |e| is 0.011, 1.001, 0.001
    assert compare_outputs({"o": e}, {"o": a}) == []
    assert _one(e, a, rtol=1e-3, atol=1e-4).reason == "value"


def test_shape_and_dtype_differences():
    m = _one(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert m.reason == "shape" and "(2, 3)" in m.detail and "(3, 2)" in m.detail
    m = _one(np.zeros(3, np.float32), np.zeros(3, np.float64))
    assert m.reason == "dtype" and "float32" in m.detail and "float64" in m.detail
    # Shape is checked first: only one mismatch per output.
    assert _one(np.zeros(2, np.int32), np.zeros(3, np.float32)).reason == "shape"


def test_nan_where_finite_expected():
    e = np.array([1.0, 2.0, 3.0], np.float32)
    a = np.array([1.0, np.nan, 3.0], np.float32)
    m = _one(e, a)
    assert m.reason == "nan"
    assert "1 of 3" in m.detail and "(1,)" in m.detail
    assert _one(a, e).reason == "nan"  # a NaN the backend lost is as wrong


def test_same_nan_positions_agree():
    e = np.array([[np.nan, 1.0], [2.0, np.nan]], np.float64)
    assert compare_outputs({"o": e}, {"o": e + 1e-6}) == []


def test_inf_sign_and_position():
    e = np.array([np.inf, 1.0], np.float32)
    assert _one(e, np.array([-np.inf, 1.0], np.float32)).reason == "inf"
    assert _one(e, np.array([1e30, 1.0], np.float32)).reason == "inf"
    assert _one(np.array([1.0, 2.0]), np.array([1.0, np.inf])).reason == "inf"
    assert compare_outputs({"o": e}, {"o": e.copy()}) == []


def test_missing_and_extra_outputs_in_order():
    x = np.ones(2, np.float32)
    ms = compare_outputs({"a": x, "b": x, "c": x}, {"c": x, "z": x, "a": x + 1})
    assert [(m.name, m.reason) for m in ms] == [("a", "value"), ("b", "missing"), ("z", "extra")]


def test_int_and_bool_arrays():
    e = np.array([1, 2, 3], np.int64)
    assert _one(e, np.array([1, 2, 4], np.int64)).reason == "value"
    # Extreme int64 values must not overflow the difference.
    big = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64)
    m = _one(big, big[::-1].copy())
    assert m.reason == "value" and "(0,)" in m.detail
    b = np.array([True, False, True])
    m = _one(b, np.array([True, True, True]))
    assert m.reason == "value" and "(1,)" in m.detail and "expected False, got True" in m.detail
    assert compare_outputs({"o": b}, {"o": b.copy()}) == []


def test_zero_dim_arrays():
    e = np.array(2.0, np.float32)
    assert compare_outputs({"o": e}, {"o": np.array(2.0, np.float32)}) == []
    m = _one(e, np.array(3.0, np.float32))
    assert m.reason == "value" and "at ()" in m.detail
    assert _one(e, np.array(np.nan, np.float32)).reason == "nan"
    assert _one(e, np.array([2.0], np.float32)).reason == "shape"


def test_empty_arrays_agree():
    assert compare_outputs({"o": np.zeros((0, 3), np.float32)}, {"o": np.zeros((0, 3), np.float32)}) == []


@pytest.mark.parametrize("tol", [{"rtol": -1e-3}, {"atol": -1e-9}])
def test_negative_tolerance_raises(tol):
    with pytest.raises(ValueError):
        compare_outputs({}, {}, **tol)


@given(
    hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=5), elements=st.floats(-1e6, 1e6)),
    st.data(),
)
def test_agrees_exactly_when_numpy_isclose_does(x, data):
    noise = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(-1.0, 1.0)))
    y = x + noise
    ms = compare_outputs({"o": x}, {"o": y})
    assert (ms == []) == bool(np.isclose(y, x, rtol=1e-2, atol=1e-3).all())


def test_float16_outputs_get_their_own_tolerance():
    e = {"h": np.array([1.0, 2.0], np.float16), "f": np.array([1.0, 2.0], np.float32)}
    a = {"h": np.array([1.03, 2.0], np.float16), "f": np.array([1.03, 2.0], np.float32)}
    found = compare_outputs(e, a, 1e-2, 1e-3, per_dtype={"float16": (5e-2, 1e-2)})
    assert [m.name for m in found] == ["f"]
    assert [m.name for m in compare_outputs(e, a, 1e-2, 1e-3)] == ["h", "f"]
    with pytest.raises(ValueError):
        compare_outputs(e, a, per_dtype={"float16": (-1.0, 0.0)})
