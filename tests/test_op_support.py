"""Operator-support probing: real refusals are found, cached, reused, and narrow the op set."""

from __future__ import annotations

import json

import pytest

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.campaign.op_support import (
    SUPPORT_SCHEMA,
    Outcome,
    SupportError,
    SupportTable,
    cache_path,
    classify,
    load_or_probe,
    probe_crashes,
    probe_graph,
    probe_graphs,
    restrict_ops,
    sig_key,
)
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.ops import op_by_name, select_ops

OPS = select_ops(["Add", "Acos", "Where", "Split2"])


@pytest.fixture
def worker(tmp_path):
    w = WorkerHandle(["ort"], tmp_path / "w.log")
    yield w
    w.close()


def test_probe_graphs_hold_the_op_with_the_sig_and_no_scalars():
    for op in OPS:
        for sig in op.sigs[:3]:
            graph = probe_graph(op, sig)
            assert graph is not None, (op.name(), sig)
            (inst,) = [i for i in graph.insts if i.op == op.name()]
            assert tuple(graph.types[v].dtype for v in inst.inputs) == sig[0]
            assert all(len(graph.types[v].shape) > 0 for v in range(len(graph.types)))


def test_ort_refusals_are_found_cached_and_reused(tmp_path, worker):
    tables = load_or_probe(worker, ["ort"], OPS, tmp_path)
    ort = tables["ort"]
    assert ort.status("Add", "f32,f32->f32") == "ok"
    # ORT 1.31 has no double Acos kernel and no Where on bool values.
    assert "NOT_IMPLEMENTED" in ort.status("Acos", "f64->f64")
    assert "NOT_IMPLEMENTED" in ort.status("Where", "bool,bool,bool->bool")
    assert ort.outcome("Acos", "f64->f64").cls == "refused"
    path = cache_path(tmp_path, "ort", ort.version)
    saved = json.loads(path.read_text())
    assert saved["schema"] == SUPPORT_SCHEMA and saved["ops"] == ort.to_json()["ops"]
    assert saved["ops"]["Acos"]["f64->f64"]["class"] == "refused"

    # A second call asks the worker for nothing but its versions.
    asked = []
    call = worker.call
    worker.call = lambda request, timeout_s: asked.append(request["kind"]) or call(request, timeout_s)
    again = load_or_probe(worker, ["ort"], OPS, tmp_path)
    assert again["ort"].entries == ort.entries
    assert "prepare" not in asked and "run" not in asked


def test_a_corrupt_cache_is_probed_again(tmp_path, worker, capsys):
    version = worker.start()["versions"]["ort"]
    path = cache_path(tmp_path, "ort", version)
    path.write_text("{ not json")
    tables = load_or_probe(worker, ["ort"], select_ops(["Add"]), tmp_path)
    assert tables["ort"].status("Add", "f32,f32->f32") == "ok"
    assert "ignoring unusable op-support cache" in capsys.readouterr().err
    assert json.loads(path.read_text())["ops"]["Add"]["f32,f32->f32"] == {"class": "ok"}


def test_restrict_keeps_names_and_drops_refused_sigs():
    acos, add = op_by_name("Acos"), op_by_name("Add")
    refused = {sig_key(s): Outcome("refused", "compile: NotImplemented") for s in acos.sigs}
    add_out = {"f32,f32->f32": Outcome("refused", "compile: no"), "f64,f64->f64": Outcome("crash", "compile: boom")}
    table = SupportTable("x", "1", "t", {"Acos": refused, "Add": add_out})
    (narrow,) = restrict_ops([acos, add], [table])
    assert ((DType.float64, DType.float64), (DType.float64,)) in narrow.sigs  # a crash stays
    assert narrow.name() == "Add" and issubclass(narrow, add)
    assert ((DType.float32, DType.float32), (DType.float32,)) not in narrow.sigs
    assert len(narrow.sigs) == len(add.sigs) - 1
    with pytest.raises(SupportError):
        restrict_ops([acos], [table])


def test_probes_try_other_instances_before_refusing(tmp_path):
    """One instance a backend refuses (the all-size-1 one) must not bar an op it takes otherwise."""
    relu = select_ops(["Relu"])
    (sig,) = [s for s in relu[0].sigs if s[0][0] is DType.float32]
    graphs = probe_graphs(relu[0], sig)
    assert len(graphs) == 3 and len({g.content_hash() for g in graphs}) == 3
    first = graphs[0]
    assert all(d == 1 for v in first.inputs for d in first.types[v].shape)  # the smallest shapes first
    assert any(d > 1 for g in graphs[1:] for v in g.inputs for d in g.types[v].shape)
    w = WorkerHandle(["faulty_backends:RefusesUnitShapes"], tmp_path / "w.log")
    try:
        one = type("Relu", (relu[0],), {"sigs": [sig]})
        table = load_or_probe(w, ["faulty_backends:RefusesUnitShapes"], [one], tmp_path)
        assert table["faulty_backends:RefusesUnitShapes"].status("Relu", sig_key(sig)) == "ok"
    finally:
        w.close()


def test_a_schema_1_cache_keeps_what_worked_and_probes_its_refusals_again(tmp_path, worker):
    version = worker.start()["versions"]["ort"]
    torch_version = worker.start()["versions"]["torch"]
    path = cache_path(tmp_path, "ort", version)
    old = {"Add": {"f32,f32->f32": "ok", "f64,f64->f64": "compile: refused once"}}
    path.write_text(json.dumps({"schema": 1, "backend": "ort", "version": version, "torch": torch_version, "ops": old}))
    asked = []
    call = worker.call
    worker.call = lambda request, timeout_s: asked.append(request["kind"]) or call(request, timeout_s)
    add = type(
        "Add",
        (op_by_name("Add"),),
        {"sigs": [s for s in op_by_name("Add").sigs if s[0][0] in (DType.float32, DType.float64)]},
    )
    tables = load_or_probe(worker, ["ort"], [add], tmp_path)
    assert tables["ort"].status("Add", "f64,f64->f64") == "ok"  # probed again: ORT adds doubles
    assert asked.count("run") == 1  # only the refused signature was run
    assert json.loads(path.read_text())["schema"] == SUPPORT_SCHEMA


@pytest.mark.parametrize(
    "status, cls",
    [
        (
            "compile: NotImplemented: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation",
            "refused",
        ),
        ("import: OpNotImplemented: The following operators are not supported for frontend ONNX: Celu", "refused"),
        (
            "export: UnsupportedOperatorError: Exporting the operator 'aten::x' to ONNX opset 11 is not supported",
            "refused",
        ),
        ("compile: InternalError: unknown intrinsic Op(tirx.acos)", "crash"),
        ("compile: InternalError: Check failed: (data_type == Float(32)) is false: not supported", "crash"),
        ("import: TypeError: Binary operators must have the same datatype", "crash"),
        ("import: TypeError: unsupported operand type(s) for +: 'Var' and 'int'", "crash"),
        ("execute: RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code", "crash"),
        (
            "execute: RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned"
            " while running ScatterElements node. Name:'' Status Message: CPU execution provider: MLFloat16 data"
            " type is not supported with ScatterElements opset 16 when reduction is 'add'.",
            "refused",
        ),
        ("hung at compile", "crash"),
        ("died: -11 at compile", "crash"),
    ],
)
def test_failures_are_classed_as_refusals_or_crashes(status, cls):
    assert classify(status) == cls


def _write_old_cache(path, schema, version, torch_version, ops) -> None:
    path.write_text(
        json.dumps({"schema": schema, "backend": "ort", "version": version, "torch": torch_version, "ops": ops})
    )


def test_a_schema_2_cache_is_never_read_as_classed(tmp_path, worker):
    """Schema 2 stored failures as bare strings: they are probed again, not guessed from the text."""
    versions = worker.start()["versions"]
    path = cache_path(tmp_path, "ort", versions["ort"])
    old = {"Add": {"f32,f32->f32": "ok", "f64,f64->f64": "compile: InternalError: made up"}}
    _write_old_cache(path, 2, versions["ort"], versions["torch"], old)
    add = type(
        "Add",
        (op_by_name("Add"),),
        {"sigs": [s for s in op_by_name("Add").sigs if s[0][0] in (DType.float32, DType.float64)]},
    )
    tables = load_or_probe(worker, ["ort"], [add], tmp_path)
    assert tables["ort"].outcome("Add", "f64,f64->f64").cls == "ok"  # probed again: ORT adds doubles
    saved = json.loads(path.read_text())
    assert saved["schema"] == SUPPORT_SCHEMA and saved["ops"]["Add"]["f32,f32->f32"] == {"class": "ok"}


@pytest.mark.parametrize("entry", ["ok", {"class": "weird"}, {"class": "crash", "instance": 7}, {"detail": "x"}])
def test_a_schema_3_cache_with_a_bad_entry_is_probed_again(tmp_path, worker, capsys, entry):
    versions = worker.start()["versions"]
    path = cache_path(tmp_path, "ort", versions["ort"])
    _write_old_cache(path, SUPPORT_SCHEMA, versions["ort"], versions["torch"], {"Add": {"f32,f32->f32": entry}})
    tables = load_or_probe(worker, ["ort"], select_ops(["Add"])[:1], tmp_path)
    assert "ignoring unusable op-support cache" in capsys.readouterr().err
    assert tables["ort"].outcome("Add", "f32,f32->f32").cls == "ok"


def test_a_refusal_is_excluded_and_a_crash_is_kept_and_handed_on(tmp_path):
    """Only the refused signature leaves the generator's choices; the crashing one stays and is
    listed, with a graph that crashes the backend again."""
    from nnsmith_cov.campaign.testcase import CaseSettings, failure, prepare, run_backend
    from nnsmith_cov.gen.generator import GenConfig, generate

    fake = "probe_backends:RefusesF64CrashesF16"
    relu = op_by_name("Relu")
    w = WorkerHandle([fake], tmp_path / "w.log")
    try:
        tables = load_or_probe(w, [fake], [relu], tmp_path)
        table = tables[fake]
        assert table.outcome("Relu", "f64->f64").cls == "refused"
        assert table.outcome("Relu", "f32->f32").cls == "ok"
        crashed = table.outcome("Relu", "f16->f16")
        assert crashed.cls == "crash" and "Check failed" in crashed.detail
        saved = json.loads(cache_path(tmp_path, fake, table.version).read_text())
        assert saved["ops"]["Relu"]["f16->f16"]["class"] == "crash"

        (narrow,) = restrict_ops([relu], tables.values())
        assert [sig_key(s) for s in narrow.sigs] == ["f16->f16", "f32->f32"]
        halves = [generate(GenConfig(nodes=2, ops=[narrow]), seed).graph for seed in range(6)]
        assert any(graph.types[v].dtype is DType.float16 for graph in halves for v in graph.inputs)

        (crash,) = probe_crashes(tables, [relu])
        assert (crash.backend, crash.op, crash.sig_key) == (fake, "Relu", "f16->f16")
        assert crash.status == crashed.detail
        graph = crash.graph()
        assert graph is not None and [i.op for i in graph.insts if i.op == "Relu"] == ["Relu"]
        settings = CaseSettings([fake], timeout_s=60.0)
        prepared, finding = prepare(w, graph, 0, settings)
        assert finding is None and prepared.onnx is not None
        found = failure(fake, "opt", run_backend(w, prepared, fake, "opt", 60.0))
        assert found is not None and found.symptom == "crash" and "Check failed" in found.detail
    finally:
        w.close()


def test_probe_crashes_lists_a_pytorch_failure_once():
    add = op_by_name("Add")
    key = sig_key(add.sigs[0])
    torch_crash = Outcome("crash", "export: SymbolicValueError: boom")
    tables = {b: SupportTable(b, "1", "t", {"Add": {key: torch_crash}}) for b in ("ort", "tvm")}
    (crash,) = probe_crashes(tables, [add])
    assert crash.backend == "torch" and crash.sig == add.sigs[0]


def test_pytorch_crashes_are_not_cached_under_the_backend(tmp_path):
    add = op_by_name("Add")
    key = sig_key(add.sigs[0])
    table = SupportTable("ort", "1", "t", {"Add": {key: Outcome("crash", "reference: NameError: boom")}})
    assert table.to_json()["ops"] == {"Add": {}}
    table.entries["Add"][key] = Outcome("crash", "compile: InternalError: boom")
    assert table.to_json()["ops"]["Add"][key] == {
        "class": "crash",
        "detail": "compile: InternalError: boom",
        "instance": 0,
    }


def test_campaigns_saving_one_cache_at_once_keep_each_others_entries_and_refusals(tmp_path):
    """Two campaigns started together on a fresh machine both probe and save the same file: the
    second must neither fail (a shared temporary file was renamed away under it) nor drop what
    the first wrote (each saves the table it probed, a stale view of the file)."""
    import threading

    from nnsmith_cov.campaign import op_support

    path = cache_path(tmp_path, "ort", "1")
    first = SupportTable("ort", "1", "t", {"Add": {"f32,f32->f32": Outcome("ok")}}, {"Acos": {"f64->f64": 13}})
    torch_crash = Outcome("crash", "export: SymbolicValueError: boom")
    second = SupportTable("ort", "1", "t", {"Relu": {"f32->f32": Outcome("ok")}, "Add": {"f32,f32->f32": torch_crash}})
    second.refused_at = {"Acos": {"f64->f64": 11, "f16->f16": 17}}
    op_support._save(first, path)
    op_support._save(second, path)
    saved = op_support._load(path, "ort", "1", "t")
    assert saved is not None
    assert saved.outcome("Add", "f32,f32->f32") == Outcome("ok") and saved.outcome("Relu", "f32->f32") == Outcome("ok")
    assert saved.refused_at == {"Acos": {"f64->f64": 13, "f16->f16": 17}}  # each refusal at the higher opset

    # many writers at once, each with its own entries: none fails, all land, no temporary file is left
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(k: int) -> None:
        try:
            start.wait()
            for i in range(10):
                op_support._save(SupportTable("ort", "1", "t", {f"Op{k}": {f"s{i}": Outcome("ok")}}), path)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    saved = op_support._load(path, "ort", "1", "t")
    assert saved is not None and all(saved.outcome(f"Op{k}", f"s{i}") for k in range(4) for i in range(10))
    assert saved.outcome("Relu", "f32->f32") == Outcome("ok")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
