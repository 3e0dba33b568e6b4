"""GraphIR: JSON round trip, stable hash, text form, and rejection of malformed input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnsmith_cov.gen.generator import generate
from nnsmith_cov.gen.graph_ir import GraphIR, GraphIRError
from nnsmith_cov.ops import is_op


@pytest.fixture(scope="module")
def graphs():
    from nnsmith_cov.gen.generator import GenConfig
    from nnsmith_cov.ops import ALL_OPS

    return [generate(GenConfig(nodes=10, ops=ALL_OPS), s).graph for s in range(15)]


def test_json_round_trip_is_exact(graphs):
    for g in graphs:
        back = GraphIR.loads(g.dumps(), is_op)
        assert back == g
        assert back.dumps() == g.dumps()
        assert back.content_hash() == g.content_hash()


def test_hash_changes_with_content(graphs):
    g = graphs[0]
    obj = g.to_json()
    obj["values"][0]["shape"] = [d + 1 for d in obj["values"][0]["shape"]] or [2]
    assert GraphIR.from_json(obj).content_hash() != g.content_hash()


def test_text_form_lists_every_instruction(graphs):
    g = graphs[0]
    text = g.text()
    assert text.startswith(f"# GraphIR {g.content_hash()}")
    for inst in g.insts:
        assert f"= {inst.op}(" in text
    assert text.rstrip().endswith(", ".join(f"v{v}" for v in g.outputs))


def test_no_pickle_in_the_format(graphs):
    # The on-disk form is plain JSON: numbers, strings, lists, dicts.
    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, list):
            return all(plain(v) for v in x)
        return isinstance(x, (int, float, str, bool)) or x is None

    for g in graphs:
        assert plain(json.loads(g.dumps()))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda o: o.update(schema=99), "schema"),
        (lambda o: o["insts"][0].update(op="NoSuchOp"), "unknown op"),
        (lambda o: o["insts"][0].update(inputs=[10_000]), "before definition"),
        (lambda o: o["insts"][-1].update(outputs=[o["inputs"][0]]), "defined twice"),
        (lambda o: o["values"].append({"shape": [1], "dtype": "f32"}), "never defined"),
        (lambda o: o["values"][0].update(shape=[-1]), "bad shape"),
        (lambda o: o["values"][0].update(dtype="f128"), "malformed"),
        (lambda o: o.pop("insts"), "malformed"),
    ],
)
def test_malformed_graphs_rejected(graphs, mutate, message):
    obj = json.loads(graphs[1].dumps())
    mutate(obj)
    with pytest.raises(GraphIRError, match=message):
        GraphIR.from_json(obj, is_op)


def test_not_json_rejected():
    with pytest.raises(GraphIRError, match="not valid JSON"):
        GraphIR.loads("{not json")


def test_deep_nesting_is_refused_without_recursing():
    with pytest.raises(GraphIRError, match="nested too deep"):
        GraphIR.loads("[" * 200_000 + "]" * 200_000)
    deep: list = []
    for _ in range(500):  # below the interpreter's limit, above the reader's bound
        deep = [deep]
    with pytest.raises(GraphIRError, match="nested deeper than"):
        GraphIR.from_json({"schema": 2, "values": deep})


@pytest.mark.parametrize(
    "value, message",
    [(10**400, "64-bit range"), (2**63, "64-bit range"), (-(2**63) - 1, "64-bit range"),
     (float("nan"), "non-finite"), ([1.0, float("-inf")], "non-finite")],
)  # fmt: skip
def test_attributes_no_backend_can_carry_are_refused(graphs, value, message):
    obj = json.loads(graphs[1].dumps())
    obj["insts"][0]["attrs"]["extra"] = value
    with pytest.raises(GraphIRError, match=message):
        GraphIR.from_json(obj, is_op)
    obj["insts"][0]["attrs"]["extra"] = [2**63 - 1, -(2**63), 1e308]  # the edges are fine
    GraphIR.from_json(obj, is_op)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(junk=json_values, key=st.sampled_from(["values", "inputs", "weights", "insts", "outputs", "schema"]))
def test_arbitrary_junk_only_ever_raises_graphirerror(graphs, junk, key):
    obj = json.loads(graphs[2].dumps())
    obj[key] = junk
    try:
        GraphIR.from_json(obj, is_op)
    except GraphIRError:
        pass
