"""Baseline generators (GraphFuzzer-style, LEMON-style): valid, reproducible, within the op
allow-list, shape-preserving where they must be, and usable as `fuzz --generator`."""

from __future__ import annotations

import json

import onnx
import onnx.checker
import pytest
import torch

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.baselines import GENERATORS, generate_with, lemon
from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.gen.generator import GenConfig, GenerationError
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.onnx_export import export_onnx
from nnsmith_cov.materialize.torch_module import GraphModule, input_tensors
from nnsmith_cov.materialize.validate import check_agreement
from nnsmith_cov.ops import ALL_OPS, is_op, op_by_name, select_ops
from nnsmith_cov.search.gradient import search_values

BASELINES = ("graphfuzzer", "lemon")
CFG = GenConfig(nodes=8, ops=ALL_OPS)


@pytest.mark.parametrize("name", BASELINES)
def test_graphs_are_valid_run_in_torch_and_export(name):
    for seed in range(10):
        graph = generate_with(name, CFG, seed).graph
        again = GraphIR.loads(graph.dumps(), known_op=is_op)  # validates, every op known
        assert again.dumps() == graph.dumps() and graph.inputs and graph.outputs
        assert all(t.nelement() <= CFG.max_elems and min(t.shape, default=1) >= 1 for t in graph.types)
        values = search_values(graph, seed, method="none").values
        module = GraphModule(graph, op_by_name, values)
        with torch.no_grad():
            outs = module(*input_tensors(graph, values))
        assert [tuple(o.shape) for o in outs] == [graph.types[v].shape for v in graph.outputs]
        onnx.checker.check_model(onnx.load_from_string(export_onnx(module, input_tensors(graph, values))))
        agreement = check_agreement(graph, values)  # torch, GraphIR and ONNX shape inference agree
        assert agreement.ok, (name, seed, agreement, graph.text())


@pytest.mark.parametrize("name", BASELINES)
def test_same_seed_same_graph_and_draws_replay(name):
    a, b = generate_with(name, CFG, 5), generate_with(name, CFG, 5)
    assert a.graph.dumps() == b.graph.dumps() and a.record.draws == b.record.draws
    # the record rebuilds the graph: its draws replayed under any seed
    assert generate_with(name, CFG, 999, prefix=a.record.draws).graph.dumps() == a.graph.dumps()
    rec = a.record.to_json()
    assert rec["generator"] == name and rec["insert_draws"] == 0 and rec["seed"] == 5
    hashes = {generate_with(name, CFG, s).graph.content_hash() for s in range(10)}
    assert len(hashes) == 10


def test_lemon_mutations_preserve_the_seed_models_output_types():
    mutated = 0
    kinds = set()
    for seed in range(30):
        gen = lemon.generate(CFG, seed)
        origin, net = lemon.seed_model(CFG, ChoiceSource(seed))
        base = net.to_graph()
        assert origin == gen.record.origin
        assert [gen.graph.types[v] for v in gen.graph.outputs] == [base.types[v] for v in base.outputs]
        assert [gen.graph.types[v] for v in gen.graph.inputs] == [base.types[v] for v in base.inputs]
        mutated += gen.graph.dumps() != base.dumps()
        kinds.update(gen.record.steps)
    assert mutated >= 25
    assert kinds == set(lemon.MUTATIONS), set(lemon.MUTATIONS) - kinds
    assert {lemon.generate(CFG, s).record.origin for s in range(30)} == {"cnn", "mlp", "rnn"}


def test_graphfuzzer_glues_mismatched_shapes_with_slice_and_pad():
    # MatMul and Concat rarely fit what is already there: their inputs get sliced or padded
    cfg = GenConfig(nodes=6, ops=select_ops(["MatMul", "Concat2", "Add", "Relu", "Slice", "PadConstant"]))
    glued = 0
    for seed in range(10):
        gen = generate_with("graphfuzzer", cfg, seed)
        ops = gen.graph.op_counts()
        steps = gen.record.steps
        # glue is in the graph on top of the chosen ops, and changes the shape it glues
        assert ops.get("Slice", 0) == steps.count("slice") + gen.record.ops.count("Slice")
        assert ops.get("PadConstant", 0) == steps.count("padconstant") + gen.record.ops.count("PadConstant")
        glued += bool({"slice", "padconstant"} & set(steps))
    assert glued >= 5
    for seed in range(10):  # conv-like ops are shape-preserving instances
        g = generate_with("graphfuzzer", CFG, seed).graph
        for inst in g.insts:
            if inst.op in ("Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d", "MaxPool2d",
                           "AvgPool1d", "AvgPool2d"):  # fmt: skip
                assert g.types[inst.outputs[0]] == g.types[inst.inputs[0]]
                assert all(v == 1 for k, v in inst.attrs.items() if k.startswith(("stride", "dilation")))
    # without glue in the op set, inputs must fit as they are: no Slice/Pad appears
    plain = GenConfig(nodes=6, ops=select_ops(["Add", "Mul", "MatMul", "Concat2", "Relu", "Conv2d"]))
    for seed in range(8):
        g = generate_with("graphfuzzer", plain, seed).graph
        assert set(g.op_counts()) <= {"Add", "Mul", "MatMul", "Concat2", "Relu", "Conv2d"}


def _float32_only(names):
    # what op-support probing does to an op: same name, fewer signatures
    out = []
    for op in select_ops(names):
        sigs = [s for s in op.sigs if all(d is DType.float32 for d in s[0] + s[1])]
        if sigs:
            out.append(type(op.__name__, (op,), {"sigs": sigs}))
    return out


@pytest.mark.parametrize("name", BASELINES)
def test_only_allowed_ops_and_signatures_are_generated(name):
    names = ["Add", "Mul", "Relu", "Tanh", "Sigmoid", "MatMul", "Linear", "Slice", "PadConstant", "Reshape", "Roll"]
    cfg = GenConfig(nodes=8, ops=_float32_only(names))
    for seed in range(10):
        g = generate_with(name, cfg, seed).graph
        assert set(g.op_counts()) <= set(names)
        assert {t.dtype for t in g.types} == {DType.float32}


def test_lemon_without_a_buildable_seed_model_fails_cleanly():
    with pytest.raises(GenerationError, match="no LEMON seed model"):
        lemon.generate(GenConfig(nodes=4, ops=select_ops(["Relu", "Add"])), 0)
    with pytest.raises(ValueError, match="unknown generator"):
        generate_with("nosuch", CFG, 0)
    assert set(GENERATORS) == {"nnsmith", "graphfuzzer", "lemon", "tzer"}
    with pytest.raises(GenerationError, match="TIR functions, not graphs"):  # tzer runs its own loop
        generate_with("tzer", CFG, 0)


FUZZ = ["--backends", "ort", "--nodes", "4", "--seed", "3", "--collector", "python"]
OPS = {
    "graphfuzzer": ["Add", "Mul", "Relu", "Sigmoid", "MatMul", "Conv2d", "Slice", "PadConstant", "Reshape"],
    "lemon": ["Add", "Mul", "Relu", "Tanh", "Sigmoid", "MatMul", "Linear", "Slice", "PadConstant", "Roll"],
}


@pytest.mark.parametrize("name", BASELINES)
def test_fuzz_with_a_baseline_generator_keeps_corpus_entries_and_resumes_with_it(tmp_path, name):
    folder = tmp_path / name
    argv = ["fuzz", "-o", str(folder), "--tests", "6", "--generator", name, *FUZZ, "--ops", *OPS[name]]
    assert main(argv) == 0
    config = json.loads((folder / "config.json").read_text())
    assert config["generator"]["name"] == name and config["generator"]["feedback_arms"] == ["op", "nodes"]
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        entries = list(store.entries())
        assert store.counters().next_test_id == 6
    assert entries, "the first test always reaches new coverage"
    for _, record in entries:
        assert record.gen["generator"] == name
        assert set(GraphIR.from_json(record.graph).op_counts()) <= set(OPS[name])
    assert main(["fuzz", "--resume", str(folder), "--tests", "7"]) == 0
    assert json.loads((folder / "config.json").read_text())["generator"]["name"] == name
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.counters().next_test_id == 7
        assert all(r.gen["generator"] == name for _, r in store.entries())


def test_graphfuzzer_tries_the_schedulers_first_op_first_and_draws_as_before_without_one():
    import dataclasses

    from nnsmith_cov.baselines import graphfuzzer

    # the scheduler's pick is the first try's op, on a first input of a dtype it takes: it is the
    # first op drawn and every graph holds it
    picked = dataclasses.replace(CFG, first_op="Tanh")
    firsts = [next(v for k, v in graphfuzzer.generate(picked, s).record.draws if k == "op") for s in range(10)]
    tanh = [o.name() for o in CFG.ops].index("Tanh")
    assert firsts == [tanh] * 10
    held = sum("Tanh" in graphfuzzer.generate(picked, s).graph.op_counts() for s in range(10))
    plain = sum("Tanh" in graphfuzzer.generate(CFG, s).graph.op_counts() for s in range(10))
    assert held == 10 and plain <= 3, (held, plain)
    # its records replay without the pick (a replay knows only the draws)
    made = graphfuzzer.generate(picked, 4)
    assert graphfuzzer.generate(CFG, 77, prefix=made.record.draws).graph.dumps() == made.graph.dumps()
    # an op name not among the ops (or None) leaves generation as it was
    unknown = dataclasses.replace(CFG, first_op="NoSuchOp")
    assert graphfuzzer.generate(unknown, 3).graph.dumps() == graphfuzzer.generate(CFG, 3).graph.dumps()
