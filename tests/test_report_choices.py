"""nnsmith_cov/report/choices.py: a kept test's choices as kind=value labels."""

from __future__ import annotations

import pytest

from nnsmith_cov.report.choices import choice_labels, parse_choice, size_label


def test_choice_labels_read_ops_opset_dtypes_size_and_export_off_a_record():
    gen = {"ops": ["Add"] * 12 + ["Relu"], "opset": 20, "dynamic": True, "roundtrip": False}
    graph = {"values": [{"dtype": "f32"}, {"dtype": "i8"}, {"dtype": "f32"}]}
    assert choice_labels(gen, graph) == {
        "op": {"op=Add", "op=Relu"},
        "opset": {"opset=20"},
        "dtype": {"dtype=f32", "dtype=i8"},
        "size": {"size=13-17"},
        "dynamic": {"dynamic=True"},
        "roundtrip": {"roundtrip=False"},
    }


def test_a_record_without_a_kind_has_no_label_of_it():
    # a baseline's record: no export choices, no graph dict; a malformed one: not even ops
    assert choice_labels({"ops": ["Add"]}, None) == {
        "op": {"op=Add"},
        "opset": frozenset(),
        "dtype": frozenset(),
        "size": {"size=<=7"},
        "dynamic": frozenset(),
        "roundtrip": frozenset(),
    }
    assert all(not labels for labels in choice_labels(None, {"values": "x"}).values())


def test_size_buckets_follow_the_schedulers_sizes():
    assert [size_label(n) for n in (1, 5, 7, 8, 10, 12, 13, 15, 17, 18, 20, 40)] == (
        ["<=7"] * 3 + ["8-12"] * 3 + ["13-17"] * 3 + [">=18"] * 3
    )


def test_a_choice_on_the_command_line_is_kind_equals_value():
    assert parse_choice("opset=20") == "opset=20" and parse_choice("size=>=18") == "size=>=18"
    for bad in ("opset", "opset=", "colour=red", "=20"):
        with pytest.raises(ValueError, match="KIND=VALUE"):
            parse_choice(bad)
