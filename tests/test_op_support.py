"""Operator-support probing: real refusals are found, cached, reused, and narrow the op set."""

from __future__ import annotations

import json

import pytest

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.backends.op_support import (
    SupportError,
    SupportTable,
    cache_path,
    load_or_probe,
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
    path = cache_path(tmp_path, "ort", ort.version)
    saved = json.loads(path.read_text())
    assert saved["schema"] == 2 and saved["ops"] == ort.entries

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
    assert json.loads(path.read_text())["ops"]["Add"]["f32,f32->f32"] == "ok"


def test_restrict_keeps_names_and_drops_refused_sigs():
    acos, add = op_by_name("Acos"), op_by_name("Add")
    refused = {sig_key(s): "compile: NotImplemented" for s in acos.sigs}
    table = SupportTable("x", "1", "t", {"Acos": refused, "Add": {"f32,f32->f32": "compile: no"}})
    (narrow,) = restrict_ops([acos, add], [table])
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
    assert json.loads(path.read_text())["schema"] == 2
