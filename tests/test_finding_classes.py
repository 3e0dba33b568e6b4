"""Finding classes (issue 28): a backend's "not implemented" is no finding and is learned for
the rest of the campaign; a mismatch every backend shares against PyTorch is "reference"; the
exporter refusing our graph is "ours"."""

from __future__ import annotations

import json

import numpy as np
import pytest
from campaign_helpers import f32_only, run_to_budget

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.op_support import SupportTable, restrict_ops, sig_key
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.unsupported import SupportLearner
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.gen.generator import GenConfig, generate
from nnsmith_cov.ops import select_ops
from nnsmith_cov.oracle.consensus import apply_consensus, mismatching
from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.refusal import error_class, refused_onnx_ops

OLD_SIGMOID = "unsupported_backends:NoOldSigmoid"
F32 = ((DType.float32,), (DType.float32,))


def _fuzz(tmp_path, backends: list[str], ops: list[str], tests: int, opsets=(20,)):
    gen = GenConfig(nodes=3, ops=[f32_only(op) for op in select_ops(ops)], opsets=opsets)
    settings = CaseSettings(backends, search={"method": "sampling", "max_iters": 8})
    run = RunDir(tmp_path / "run")
    worker = WorkerHandle(backends, run.worker_log(0))
    fuzzer = Fuzzer(FuzzConfig(gen, settings, seed=5, max_tests=tests), run, worker, lambda e: None)
    run_to_budget(fuzzer, worker)
    return fuzzer, run


def test_not_implemented_at_an_old_opset_is_unsupported_and_no_longer_drawn(tmp_path):
    fuzzer, run = _fuzz(tmp_path, [OLD_SIGMOID], ["Relu", "Sigmoid"], tests=8, opsets=(11,))
    st = fuzzer.stats
    assert st.findings.total() == 0 and not st.signatures  # not a finding ...
    assert not (run.root / "findings").exists() or not any((run.root / "findings").iterdir())
    stats = json.loads((run.root / "stats.json").read_text())
    assert stats["unsupported"] == 1  # ... but counted,
    (sig,) = stats["unsupported_signatures"]
    assert "NOT_IMPLEMENTED" in sig and "Sigmoid" in sig
    assert stats["unsupported_learned"] == [f"{OLD_SIGMOID}: Sigmoid f32->f32 at opset 11"]
    # ... and learned: the one test that met Sigmoid was the last to hold it.
    assert st.op_tests["Sigmoid"] == 1 and st.op_tests["Relu"] > 1
    sigmoid = next(o for o in fuzzer.cfg.gen.ops if o.name() == "Sigmoid")
    assert sigmoid.opset_floor(DType.float32) == 12  # still drawn where it may be implemented


def test_a_refusal_naming_no_op_of_the_graph_is_attributed_by_probes_at_its_opset(tmp_path):
    ops = [f32_only(op) for op in select_ops(["Relu", "Sigmoid"])]
    graph = next(
        g
        for g in (generate(GenConfig(nodes=3, ops=ops, opsets=(11,)), s).graph for s in range(20))
        if {i.op for i in g.insts} == {"Relu", "Sigmoid"}
    )
    refusal = Finding("crash", OLD_SIGMOID, "compile", "opt", "sig", "NotImplemented: NOT_IMPLEMENTED")
    learner = SupportLearner(ops, [OLD_SIGMOID])
    worker = WorkerHandle([OLD_SIGMOID], tmp_path / "worker.log")
    try:
        worker.start()
        pairs = learner.attribute(worker, graph, refusal)
    finally:
        worker.close()
    assert [(spec.name(), sig) for spec, sig in pairs] == [("Sigmoid", F32)]
    (learned,) = learner.learn(OLD_SIGMOID, pairs, graph.opset)
    assert learned.text() == f"{OLD_SIGMOID}: Sigmoid f32->f32 at opset 11"
    assert learner.learn(OLD_SIGMOID, pairs, 11) == []  # known already


def test_refusals_learned_per_opset_raise_the_floor_or_drop_the_signature():
    add, where = select_ops(["Add", "Where"])
    table = SupportTable("x", "1", "t")
    f16 = next(s for s in add.sigs if s[0][0] is DType.float16)
    table.refuse("Add", sig_key(f16), 15)
    (narrow,) = restrict_ops([add], [table])
    assert narrow.name() == "Add" and f16 in narrow.sigs
    assert narrow.opset_floor(DType.float16) == 16 and narrow.opset_floor(DType.float32) == add.opset_floor(
        DType.float32
    )
    table.refuse("Add", sig_key(f16), 20)  # refused at the newest opset: gone
    (narrow,) = restrict_ops([add], [table])
    assert f16 not in narrow.sigs
    # Where's signatures share their first dtype (bool): a refused one goes, its siblings stay at every opset.
    bool_f16 = next(s for s in where.sigs if s[0][1] is DType.float16)
    table.refuse("Where", sig_key(bool_f16), 13)
    (narrow,) = restrict_ops([where], [table])
    assert bool_f16 not in narrow.sigs and len(narrow.sigs) == len(where.sigs) - 1
    assert narrow.opset_floor(DType.bool) == where.opset_floor(DType.bool)


def test_refusals_learned_in_a_campaign_are_written_back_to_the_probe_cache(tmp_path):
    from nnsmith_cov.campaign.op_support import OK, _load, cache_path

    (add,) = select_ops(["Add"])
    f16 = next(s for s in add.sigs if s[0][0] is DType.float16)
    versions = {"ort": "1.0", "torch": "2.0"}
    learner = SupportLearner([add], ["ort"])
    learner.remember_in(tmp_path / "cache", versions)
    assert [r.opset for r in learner.learn("ort", [(add, f16)], 13)] == [13]
    learner.learn("ort", [(add, f16)], 11)  # lower than known: no news, the cache keeps 13
    path = cache_path(tmp_path / "cache", "ort", "1.0")
    table = _load(path, "ort", "1.0", "2.0")
    assert table is not None and table.refused_at == {"Add": {sig_key(f16): 13}} and table.entries == {}
    # The next campaign starts from the cache: the generator keeps fp16 Add above opset 13 only.
    (narrow,) = restrict_ops([add], [table])
    assert narrow.opset_floor(DType.float16) == 14
    # A probe entry saved later keeps what was learned.
    table.entries["Add"] = {sig_key(f16): OK}
    path.write_text(json.dumps(table.to_json()))
    assert _load(path, "ort", "1.0", "2.0").refused_at == {"Add": {sig_key(f16): 13}}


def test_an_unwritable_cache_stops_the_write_back_not_the_campaign(tmp_path):
    (add,) = select_ops(["Add"])
    f16 = next(s for s in add.sigs if s[0][0] is DType.float16)
    (tmp_path / "file").write_text("")
    learner = SupportLearner([add], ["ort"])
    learner.remember_in(tmp_path / "file" / "cache", {"ort": "1.0", "torch": "2.0"})
    assert len(learner.learn("ort", [(add, f16)], 13)) == 1
    assert learner.cache is None and "cannot write the op-support cache" in (learner.cache_error or "")


def _inconsistency(backend: str, actual: dict[str, np.ndarray]) -> Finding:
    return Finding("inconsistency", backend, "execute", "opt", f"{backend}/execute/opt: x", "o3: value", actual=actual)


ORACLE = {"o3": np.array([1.0, 2.0, 3.0], np.float32), "o4": np.array([5.0], np.float32)}
DIFFER = mismatching(1e-2, 1e-3)


def test_a_mismatch_every_backend_shares_against_pytorch_is_reference():
    wrong = {"o3": np.array([1.0, 2.5, 3.0], np.float32), "o4": ORACLE["o4"]}
    found = [_inconsistency("ort", wrong), _inconsistency("tvm", {k: v.copy() for k, v in wrong.items()})]
    assert apply_consensus(found, ["ort", "tvm"], ORACLE, DIFFER)
    assert [f.category for f in found] == ["reference", "reference"]
    assert found[0].rule == "consensus: ort and tvm agree on o3 against torch"


@pytest.mark.parametrize(
    "other",
    [
        {"o3": np.array([1.0, 9.0, 3.0], np.float32), "o4": ORACLE["o4"]},  # wrong, but differently
        None,  # the other backend agrees with PyTorch (no finding of its own)
    ],
)
def test_without_agreement_of_all_backends_a_mismatch_stays_a_bug(other):
    wrong = {"o3": np.array([1.0, 2.5, 3.0], np.float32), "o4": ORACLE["o4"]}
    found = [_inconsistency("ort", wrong)] + ([_inconsistency("tvm", other)] if other is not None else [])
    assert not apply_consensus(found, ["ort", "tvm"], ORACLE, DIFFER)
    assert {f.category for f in found} == {"bug"}
    assert not apply_consensus(found[:1], ["ort"], ORACLE, DIFFER)  # one backend: no consensus to speak of


def test_two_backends_wrong_alike_end_to_end_file_reference_findings(tmp_path):
    backends = ["unsupported_backends:OffByOne", "unsupported_backends:OffByOneToo"]
    fuzzer, run = _fuzz(tmp_path, backends, ["Relu", "Neg"], tests=2)
    lines = [json.loads(x) for x in (run.root / "findings.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and {x["category"] for x in lines} == {"reference"}
    assert all(x["rule"].startswith(f"consensus: {backends[0]} and {backends[1]} agree on") for x in lines)
    bundle = run.root / next(x["bundle"] for x in lines if x["new"])
    assert json.loads((bundle / "meta.json").read_text())["category"] == "reference"


ADAPTIVE = (
    "Unsupported: ONNX export of operator adaptive_avg_pool2d, input size not accessible. Please feel free to "
    "request support or submit a pull request on PyTorch GitHub: https://github.com/pytorch/pytorch/issues"
)


@pytest.mark.parametrize(
    ("backend", "stage", "kind", "message", "category"),
    [
        (
            "ort",
            "compile",
            "NotImplemented",
            "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an "
            "implementation for PRelu(16) node with name '/PRelu'",
            "unsupported",
        ),
        (
            "tvm",
            "import",
            "OpNotImplemented",
            "The following operators are not supported for frontend ONNX: Celu",
            "unsupported",
        ),
        ("tvm", "compile", "InternalError", "Check failed: unsupported dtype float16", None),  # a failed check: a bug
        ("tvm", "import", "TypeError", "unsupported operand type(s) for +: 'int' and 'str'", None),
        ("torch", "export", "SymbolicValueError", ADAPTIVE, "ours"),
        (
            "torch",
            "export",
            "InferenceError",
            "[ShapeInferenceError] (op_type:Add, node name: /Add): A typestr: T, has unsupported type: tensor(int8)",
            "ours",
        ),
        ("torch", "reference", "RuntimeError", "not implemented for 'Half'", "ours"),
        # A size the spec computes where the exporter needs a constant ("... because it is not
        # constant", past the first line): a refusal of what the spec asked.
        ("torch", "export", "SymbolicValueError", "Failed to export a node '%5 : Long(1) = onnx::Gather'", "ours"),
        # The exporter's own failure (not a refusal): PyTorch's, not a compiler's.
        ("torch", "export", "RuntimeError", "Check failed: bad index", "reference"),
    ],
)
def test_error_classes(backend, stage, kind, message, category):
    verdict = error_class(backend, stage, kind, message)
    assert (verdict.category if verdict else None) == category


def test_refused_ops_are_read_from_ort_and_tvm_messages():
    assert refused_onnx_ops("Could not find an implementation for Clip(11) node with name '/Clip'") == ["Clip"]
    assert refused_onnx_ops("not supported for frontend ONNX: Celu, Shrink\nTraceback") == ["Celu", "Shrink"]
    assert refused_onnx_ops("NOT_IMPLEMENTED") == []


@pytest.mark.slow  # probes two signatures on a fresh cache
def test_ops_for_backends_narrows_a_model_outside_a_campaign_as_fuzz_does(tmp_path):
    from nnsmith_cov.campaign.op_support import SupportError, ops_for_backends

    relu = _f32_and_f64(select_ops(["Relu"])[0])
    (narrow,) = ops_for_backends([relu], ["probe_backends:RefusesF64CrashesF16"], tmp_path / "cache")
    assert narrow.name() == "Relu" and [s[0][0] for s in narrow.sigs] == [DType.float32]
    (tmp_path / "file").write_text("")
    with pytest.raises(SupportError, match="cannot use the op-support cache"):
        ops_for_backends([relu], ["ort"], tmp_path / "file" / "cache")


def _f32_and_f64(op):
    sigs = [s for s in op.sigs if s[0][0] in (DType.float32, DType.float64)]
    return type(op.__name__, (op,), {"sigs": sigs})
