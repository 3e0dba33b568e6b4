"""How a graph reaches the backends: the opset, symbolic input dims and IR text round trip
drawn per graph, their record in GraphIR, the export itself, and the scheduler's arms over them."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET
from nnsmith_cov.campaign.op_support import probe_graph, sig_key
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback import Proposal, Scheduler
from nnsmith_cov.feedback.simulate import run
from nnsmith_cov.gen.export_plan import static_input_dims
from nnsmith_cov.gen.generator import GenConfig, GenRecord, generate
from nnsmith_cov.gen.graph_ir import DEFAULT_OPSET, GraphIR, GraphIRError
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.materialize.onnx_export import ExportError, opset_of
from nnsmith_cov.ops import ALL_OPS, op_by_name
from nnsmith_cov.search.gradient import search_values

ALL_OPSETS = tuple(range(MIN_OPSET, MAX_OPSET + 1))
pytestmark = pytest.mark.usefixtures("every_test_steered")  # (the bandit as it steers)


def _floor(graph: GraphIR) -> int:
    return max(op_by_name(i.op).opset_floor(graph.types[i.inputs[0]].dtype) for i in graph.insts)


# -- drawing the plan ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_the_opset_drawn_is_allowed_and_exports(seed):
    cfg = GenConfig(nodes=6, ops=ALL_OPS, opsets=ALL_OPSETS)
    gen = generate(cfg, seed)
    g = gen.graph
    assert g.opset in ALL_OPSETS and g.opset >= _floor(g)
    assert gen.record.opset == g.opset
    # Drawn once, before the first op: the graph is then built to export at it.
    labels = [label for label, _ in gen.record.draws]
    assert labels.count("export.opset") == 1 and labels.index("export.opset") < labels.index("op")
    search = search_values(g, seed)
    if search.ok:
        model = onnx.load_from_string(materialize_and_export(g, search.values).onnx)
        assert opset_of(model) == g.opset
        onnx.checker.check_model(model, full_check=True)


def test_one_allowed_opset_draws_nothing_new():
    """With the default (opset 20 only, no dynamic dims) a seed's draws and graph are what they
    were before export plans existed: no export.* draw."""
    for seed in range(8):
        gen = generate(GenConfig(nodes=6, ops=ALL_OPS), seed)
        assert gen.graph.opset == DEFAULT_OPSET and gen.graph.dynamic == []
        assert not [label for label, _ in gen.record.draws if label.startswith("export.")]


def test_the_same_seed_gives_the_same_plan():
    cfg = GenConfig(nodes=6, ops=ALL_OPS, opsets=ALL_OPSETS, dynamic_prob=0.5)
    for seed in range(6):
        a, b = generate(cfg, seed).graph, generate(cfg, seed).graph
        assert (a.opset, a.dynamic) == (b.opset, b.dynamic)
        assert a.content_hash() == b.content_hash()


def test_opset_weights_steer_the_draw_whatever_ops_the_library_holds():
    """The opset follows its weights, also toward old ones: the graph is built for it (drawn
    after the graph, a 10-node graph of ~140 ops mostly holds an op that needs 18)."""
    cfg = GenConfig(nodes=10, ops=ALL_OPS, opsets=ALL_OPSETS, opset_weights={o: 0.001 for o in ALL_OPSETS} | {11: 1.0})
    graphs = [generate(cfg, s).graph for s in range(15)]
    assert sum(g.opset == 11 for g in graphs) >= 12
    assert all(_floor(g) <= g.opset for g in graphs)


def test_signatures_needing_a_higher_opset_than_allowed_are_not_used():
    # Tril/Triu are ONNX Trilu (opset 14); ReduceMax/Min of bool need 20.
    cfg = GenConfig(nodes=4, ops=[op_by_name(n) for n in ("Tril", "Triu", "ReduceMax", "Relu", "Add")], opsets=(11, 12))
    for seed in range(15):
        g = generate(cfg, seed).graph
        assert g.opset in (11, 12)
        assert not {"Tril", "Triu"} & set(g.op_counts())
        assert all(g.types[i.inputs[0]].dtype is not DType.bool for i in g.insts if i.op == "ReduceMax"), (
            "ReduceMax of bool needs opset 20"
        )


def test_dynamic_dims_are_dims_of_model_inputs_and_at_least_one():
    cfg = GenConfig(nodes=6, ops=ALL_OPS, dynamic_prob=1.0)
    seen = 0
    for seed in range(10):
        gen = generate(cfg, seed)
        g = gen.graph
        fixed = static_input_dims(g, op_by_name)  # dims the exporter must read stay static
        has_dims = any((v, d) not in fixed for v in g.inputs for d in range(len(g.types[v].shape)))
        assert not set(g.dynamic) & fixed
        assert bool(g.dynamic) == has_dims == gen.record.dynamic
        for v, d in g.dynamic:
            assert v in g.inputs and 0 <= d < len(g.types[v].shape)
        seen += bool(g.dynamic)
    assert seen >= 5
    assert not any(generate(GenConfig(nodes=6, ops=ALL_OPS), s).graph.dynamic for s in range(5))


# -- GraphIR and the export -----------------------------------------------------------------
def _small_graph() -> GraphIR:
    return generate(GenConfig(nodes=3, ops=[op_by_name(n) for n in ("Relu", "Add", "Sigmoid")]), 1).graph


def test_graph_json_keeps_the_plan_and_reads_schema_1_as_static_opset_20():
    g = _small_graph()
    v = g.inputs[0]
    g.opset, g.dynamic = 15, [(v, 0)]
    back = GraphIR.loads(g.dumps())
    assert (back.opset, back.dynamic) == (15, [(v, 0)])
    assert back.content_hash() == g.content_hash()
    old = json.loads(g.dumps())
    del old["export"]
    old["schema"] = 1
    legacy = GraphIR.from_json(old)
    assert (legacy.opset, legacy.dynamic) == (DEFAULT_OPSET, [])
    assert "opset 15" in g.text() and "dynamic" in g.text()


def test_the_round_trip_plan_is_kept_and_absent_means_direct():
    g = _small_graph()
    direct = g.dumps()
    assert "roundtrip" not in direct  # graphs from before the plan hash as they did
    g.roundtrip = True
    back = GraphIR.loads(g.dumps())
    assert back.roundtrip and back.content_hash() == g.content_hash() != GraphIR.loads(direct).content_hash()
    assert not GraphIR.loads(direct).roundtrip
    assert "compiled from its IR's text" in g.text()


def test_a_round_trip_is_drawn_only_with_a_share():
    for prob in (0.0, 1.0):
        cfg = GenConfig(nodes=4, ops=ALL_OPS, roundtrip_prob=prob)
        for seed in range(3):
            gen = generate(cfg, seed)
            labels = [label for label, _ in gen.record.draws]
            assert gen.graph.roundtrip == gen.record.roundtrip == (prob == 1.0)
            assert labels.count("export.roundtrip") == (prob > 0)


@pytest.mark.parametrize(
    "export",
    [
        {"opset": 17, "dynamic": [], "roundtrip": 1},
        {"opset": "17", "dynamic": []},
        {"opset": True, "dynamic": []},
        {"opset": 0, "dynamic": []},
        {"opset": 17, "dynamic": [[99, 0]]},
        {"opset": 17, "dynamic": [[0, 7]]},
        {"opset": 17, "dynamic": [[0, 0], [0, 0]]},
    ],
)
def test_malformed_plans_are_refused(export):
    obj = json.loads(_small_graph().dumps()) | {"export": export}
    with pytest.raises(GraphIRError):
        GraphIR.from_json(obj)


def test_a_weight_cannot_be_dynamic():
    g = generate(GenConfig(nodes=3, ops=[op_by_name("Add")], weight_prob=1.0), 2).graph
    assert g.weights
    obj = json.loads(g.dumps()) | {"export": {"opset": 20, "dynamic": [[g.weights[0], 0]]}}
    with pytest.raises(GraphIRError, match="not a dim of a model input"):
        GraphIR.from_json(obj)


def test_dynamic_dims_are_symbolic_in_the_onnx_signature():
    g = _small_graph()
    v = g.inputs[0]
    assert len(g.types[v].shape) >= 1
    g.dynamic = [(v, 0)]
    values = search_values(g, 1).values
    model = onnx.load_from_string(materialize_and_export(g, values).onnx)
    (inp,) = [i for i in model.graph.input if i.name == f"i{v}"]
    dims = inp.type.tensor_type.shape.dim
    assert dims[0].dim_param == f"i{v}_d0"
    assert all(d.dim_value == s for d, s in zip(dims[1:], g.types[v].shape[1:]))


def test_an_opset_the_exporter_refuses_is_an_export_error():
    g = generate(GenConfig(nodes=1, ops=[op_by_name("Tril")]), 0).graph
    g.opset = 13  # below ONNX Trilu
    with pytest.raises(ExportError):
        materialize_and_export(g, search_values(g, 0).values)


# -- the specs' declared floors ---------------------------------------------------------------
ALL_SIGS = [(op, sig) for op in ALL_OPS for sig in op.sigs]


def _export_checked(graph: GraphIR, values: dict, opset: int) -> None:
    graph.opset = opset
    onnx.checker.check_model(onnx.load_from_string(materialize_and_export(graph, values).onnx), full_check=True)


# Specs whose floors are those of ONNX's schema for the one node they write: a lone op exports
# below them, the exporter wrapping the integers in Casts, but it leaves the Casts out where it
# has lost the operand's dtype (tests/test_export_refusals.py shows such graphs).
SCHEMA_NODE = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Max": "Max", "Min": "Min"}


def _schema_admits(node: str, dtype: DType, opset: int) -> bool:
    """ONNX's schema of `node` at `opset` takes `dtype` for its first input."""
    schema = onnx.defs.get_schema(node, opset)
    (allowed,) = [c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == schema.inputs[0].type_str]
    return f"tensor({onnx.TensorProto.DataType.Name(dtype.onnx).lower()})" in allowed


@pytest.mark.parametrize("op,sig", ALL_SIGS, ids=[f"{op.name()}-{sig_key(sig)}" for op, sig in ALL_SIGS])
def test_a_declared_floor_is_where_the_export_starts_to_work(op, sig):
    """Every signature exports (and passes the checker) at its declared floor; above
    MIN_OPSET the floor is tight: one opset below fails, or, for the specs in SCHEMA_NODE,
    ONNX's schema starts taking the dtype at the floor."""
    graph = probe_graph(op, sig)
    if graph is None:
        pytest.skip("no single-op graph of this signature")  # as the support probe says "untested"
    search = search_values(graph, 0)
    assert search.ok
    floor = op.opset_floor(sig[0][0])
    _export_checked(graph, search.values, floor)
    node = SCHEMA_NODE.get(op.name())
    if node is not None:
        assert _schema_admits(node, sig[0][0], floor)
        assert floor == MIN_OPSET or not _schema_admits(node, sig[0][0], floor - 1)
    elif floor > MIN_OPSET:
        with pytest.raises((ExportError, onnx.checker.ValidationError, onnx.shape_inference.InferenceError)):
            _export_checked(graph, search.values, floor - 1)


# -- the scheduler's arms -------------------------------------------------------------------------
NAMES = [f"Op{i}" for i in range(10)]


def test_a_rewarding_opset_gains_weight_and_feedback_off_stays_uniform():
    def old_opsets_pay(rec: GenRecord, t: int) -> float:
        return 0.4 if rec.opset <= 12 else 0.02

    trace = run(Scheduler(NAMES, 10, seed=1, opsets=ALL_OPSETS), old_opsets_pay, 400, seed=1)
    low = trace.opset_prob(11, 200, 400) + trace.opset_prob(12, 200, 400)
    assert low > 2.5 * 2 / len(ALL_OPSETS)
    plain = Scheduler(NAMES, 10, seed=1, feedback=False, opsets=ALL_OPSETS).propose()
    assert plain.opset_weights is None and plain.dynamic_prob is None


@pytest.mark.parametrize("arm, seed", [("dynamic", 2), ("roundtrip", 5)])
def test_a_yes_no_arm_follows_its_reward_and_is_absent_unless_asked(arm, seed):
    def arm_pays(rec: GenRecord, t: int) -> float:
        return 0.4 if getattr(rec, arm) else 0.02

    trace = run(Scheduler(NAMES, 10, seed=seed, **{arm: True}), arm_pays, 400, seed=seed)
    assert getattr(trace, f"{arm}_prob")(200, 400) > 0.7
    for unasked in (Scheduler(NAMES, 10, seed=seed), Scheduler(NAMES, 10, seed=seed, feedback=False, **{arm: True})):
        assert getattr(unasked.propose(), f"{arm}_prob") is None


def test_proposals_and_states_round_trip_with_the_export_arms():
    s = Scheduler(NAMES, 10, seed=3, opsets=(11, 13, 20), dynamic=True, roundtrip=True)
    p = s.propose()
    assert set(p.opset_weights) == {11, 13, 20} and 0.0 <= p.dynamic_prob <= 1.0
    assert 0.0 <= p.roundtrip_prob <= 1.0
    assert Proposal.from_json(json.loads(json.dumps(p.to_json()))) == p
    rec = GenRecord(seed=0)
    rec.ops, rec.opset, rec.dynamic, rec.roundtrip = ["Op1"], 13, True, True
    s.observe(p, rec, Novelty(1, 0))
    restored = Scheduler.from_state(json.loads(json.dumps(s.state())))
    assert restored.propose() == s.propose()


def _before_mutation(state: dict) -> dict:
    """A state as schemas 1-3 wrote it: without the mutation arms, the ranked reward's recent
    scores, the children counts and the export-form arms (schemas 4 and 5), nor the hedge (9)."""
    del state["recent"], state["children"], state["config"]["mutation"], state["groups"]["mutation"]
    del state["hedged"], state["config"]["params"]["hedge"]
    del state["config"]["forms"], state["config"]["params"]["window"], state["config"]["caps"]
    return state


def test_a_schema_1_state_resumes_without_export_evidence():
    s = Scheduler(NAMES, 10, seed=4)
    s.observe(s.propose(), GenRecord(seed=0, ops=["Op1"]), Novelty(1, 0))
    state = _before_mutation(json.loads(json.dumps(s.state())))
    state["schema"] = 1
    for key in ("opsets", "dynamic", "roundtrip"):
        del state["config"][key]
    for key in ("opset", "dynamic", "roundtrip"):
        del state["groups"][key]
    old = Scheduler.from_state(state)
    assert old.opsets == (DEFAULT_OPSET,) and not old.dynamic and not old.roundtrip
    assert np.allclose(old.groups["op"].counts, s.groups["op"].counts)


def test_a_schema_2_state_resumes_without_round_trip_evidence():
    s = Scheduler(NAMES, 10, seed=4, opsets=(13, 20), dynamic=True)
    s.observe(s.propose(), GenRecord(seed=0, ops=["Op1"], opset=13), Novelty(1, 0))
    state = _before_mutation(json.loads(json.dumps(s.state())))
    state["schema"] = 2
    del state["config"]["roundtrip"], state["groups"]["roundtrip"]
    old = Scheduler.from_state(state)
    assert old.opsets == (13, 20) and old.dynamic and not old.roundtrip
    assert np.allclose(old.groups["opset"].counts, s.groups["opset"].counts)
    state["config"]["roundtrip"] = True  # a schema-2 config with a key it never had
    with pytest.raises(ValueError, match="bad config"):
        Scheduler.from_state(state)


def test_a_model_the_checker_refuses_is_the_exporters_error(monkeypatch):
    """The exporter sometimes types a node outside its schema at an old opset (seen: uint8 Mul
    at opset 12 under symbolic dims); such a model must not reach a backend as valid."""
    from onnx import TensorProto, helper

    import nnsmith_cov.materialize.model_dir as model_dir

    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [3])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [3])
    node = helper.make_node("Mul", ["x", "x"], ["y"])  # Mul takes 8-bit ints from opset 14
    bad = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 12)])
    monkeypatch.setattr(model_dir, "export_onnx", lambda *a, **k: bad.SerializeToString())
    g = _small_graph()
    with pytest.raises(ExportError, match="invalid model"):
        materialize_and_export(g, search_values(g, 1).values)


# -- campaigns -------------------------------------------------------------------------------------
CAMPAIGN = ["--backends", "ort", "--nodes", "4", "--ops", "Add", "Mul", "Relu", "Sigmoid", "MatMul", "--seed", "3"]


def _campaign_graphs(folder):
    from nnsmith_cov.corpus.store import CorpusStore

    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        return [GraphIR.from_json(r.graph) for _, r in store.entries(include_finding_only=True)]


def _export_counts(folder):
    stats = json.loads((folder / "stats.json").read_text())
    return stats["tests"], stats["export_tests"]


def test_a_feedback_campaign_varies_the_export_and_resumes_with_the_same_choices(tmp_path):
    from nnsmith_cov.cli import main

    folder = tmp_path / "on"
    assert main(["fuzz", "-o", str(folder), "--tests", "8", *CAMPAIGN]) == 0
    gen = json.loads((folder / "config.json").read_text())["generator"]
    assert gen["opsets"] == list(ALL_OPSETS) and gen["dynamic_prob"] is None  # None: the scheduler's arm
    assert {"opset", "dynamic"} <= set(gen["feedback_arms"])
    assert gen["roundtrip_prob"] == 0.0  # ORT has no text form of its IR: no round-trip arm
    tests, counts = _export_counts(folder)
    opsets = {k: n for k, n in counts.items() if k.startswith("opset ")}
    assert sum(opsets.values()) == tests == counts.get("static", 0) + counts.get("dynamic", 0) == 8
    assert len(opsets) >= 2
    assert all(g.opset in ALL_OPSETS for g in _campaign_graphs(folder))
    assert main(["fuzz", "--resume", str(folder), "--tests", "11"]) == 0
    tests, counts = _export_counts(folder)
    assert tests == 11 and sum(n for k, n in counts.items() if k.startswith("opset ")) == 11
    assert json.loads((folder / "config.json").read_text())["generator"]["opsets"] == list(ALL_OPSETS)


def test_without_feedback_the_export_is_plain_unless_asked(tmp_path):
    from nnsmith_cov.cli import main

    plain = tmp_path / "plain"
    assert main(["fuzz", "-o", str(plain), "--tests", "4", "--feedback", "off", *CAMPAIGN]) == 0
    assert _export_counts(plain) == (4, {"opset 20": 4, "static": 4})
    wide = tmp_path / "wide"
    argv = ["fuzz", "-o", str(wide), "--tests", "6", "--feedback", "off", "--opsets", "13,20", "--dynamic", "1"]
    assert main([*argv, *CAMPAIGN]) == 0
    tests, counts = _export_counts(wide)
    assert set(counts) <= {"opset 13", "opset 20", "static", "dynamic"} and tests == 6
    assert counts.get("dynamic", 0) >= 3  # all but graphs whose inputs are 0-d
    assert all(bool(g.dynamic) == any(g.types[v].shape for v in g.inputs) for g in _campaign_graphs(wide))


def test_a_round_trip_share_plans_graphs_and_is_counted(tmp_path):
    from nnsmith_cov.cli import main

    folder = tmp_path / "trip"
    argv = ["fuzz", "-o", str(folder), "--tests", "4", "--feedback", "off", "--roundtrip", "1", *CAMPAIGN]
    assert main(argv) == 0
    tests, counts = _export_counts(folder)
    assert tests == counts["roundtrip"] == 4
    assert all(g.roundtrip for g in _campaign_graphs(folder))
    assert json.loads((folder / "config.json").read_text())["generator"]["roundtrip_prob"] == 1.0


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--opsets", "9-20"], "within 11..20"),
        (["--opsets", "13,x"], "not an opset"),
        (["--dynamic", "1.5"], "in [0, 1]"),
        (["--roundtrip", "2"], "in [0, 1]"),
    ],
)
def test_bad_export_flags_are_one_line_errors(tmp_path, capsys, flags, message):
    from nnsmith_cov.cli import main

    assert main(["generate", "--seed", "1", "-o", str(tmp_path / "m"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
