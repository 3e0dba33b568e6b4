"""`nnsmith-cov reduce`: delta debugging keeps the finding, is deterministic, and writes a bundle
that `repro` accepts and a repro.py that runs in a clean interpreter."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import pytest

from nnsmith_cov.campaign.testcase import CaseSettings, judge, prepare, run_backend
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.cli import main as cli_main
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.model_dir import load_npz, npz_bytes
from nnsmith_cov.ops import is_op
from nnsmith_cov.oracle.bundle import read_bundle, write_bundle
from nnsmith_cov.reduce.__main__ import run as reduce_main
from nnsmith_cov.reduce.candidates import build, cone, full_cut, live, pattern, remove
from nnsmith_cov.reduce.delta import Search
from nnsmith_cov.reduce.engine import reduce_bundle

CRASH = "reduce_backends:CrashesOnCosOfRelu"
WRONG = "reduce_backends:WrongWithSinAndMul"


def _ten_ops(dtype: str = "f32") -> GraphIR:
    """Ten ops; a Cos reads a Relu (v7 = Cos(v4)), Sin and Mul sit elsewhere."""
    t = {"shape": [2, 3], "dtype": dtype}
    insts = [
        ("Add", [0, 2], 3),
        ("Relu", [3], 4),
        ("Sin", [1], 5),
        ("Mul", [4, 5], 6),
        ("Cos", [4], 7),
        ("Tanh", [6], 8),
        ("Sub", [7, 8], 9),
        ("Abs", [9], 10),
        ("Neg", [6], 11),
        ("Add", [10, 11], 12),
    ]
    obj = {
        "schema": 2,
        "values": [t] * 13,
        "inputs": [0, 1],
        "weights": [2],
        "insts": [{"op": op, "attrs": {}, "inputs": ins, "outputs": [out]} for op, ins, out in insts],
        "outputs": [12],
        "export": {"opset": 17, "dynamic": []},
    }
    return GraphIR.from_json(obj, is_op)


def _make_bundle(path: Path, backend: str, graph: GraphIR, seed: int = 7) -> Path:
    """A bundle as a campaign writes it: searched values, PyTorch's outputs, the backend's finding."""
    search = {"method": "gradient", "max_iters": 64, "budget_ms": 3000}
    settings = CaseSettings([backend], timeout_s=120.0, search=search, localize=False)
    worker = WorkerHandle([backend], path.parent / f"{path.name}.log")
    try:
        prepared, failed = prepare(worker, graph, seed, settings)
        assert failed is None and prepared.oracle is not None and prepared.onnx is not None
        finding = judge(prepared, backend, "opt", run_backend(worker, prepared, backend, "opt", 120.0), settings)
    finally:
        worker.close()
    assert finding is not None
    meta = {"seed": seed, "test": 0, "settings": settings.to_json(), "search": prepared.search}
    return write_bundle(path, finding, graph, prepared.values, prepared.oracle, prepared.onnx, meta)


# -- the edits, without a backend ------------------------------------------------------------


def test_removing_a_node_feeds_its_consumers_the_recorded_value():
    g = _ten_ops()
    recorded = {v: np.full((2, 3), float(v), np.float32) for v in range(13)}
    cut = remove(g, full_cut(g), {0})  # Add(v0, v2) -> v3 goes; Relu now reads v3 as an input
    cand = build(g, cut, recorded)
    assert cand.ops() == [inst.op for inst in g.insts[1:]]
    relu = cand.graph.insts[0]
    assert cand.origin[relu.inputs[0]] == 3 and relu.inputs[0] in cand.graph.inputs
    assert np.array_equal(cand.values[f"i{relu.inputs[0]}"], recorded[3])
    assert 2 not in cand.origin.values()  # the weight only the Add read is gone
    (out,) = cand.graph.outputs
    assert np.array_equal(cand.oracle[f"o{out}"], recorded[12])


def test_removing_a_consumer_returns_what_it_read():
    g = _ten_ops()
    cut = remove(g, full_cut(g), {9})  # the last Add: its inputs v10 and v11 become outputs
    assert set(cut.outputs) == {10, 11}
    assert len(live(g, cut)) == 9


def test_a_cone_is_the_private_subgraph_of_an_input():
    g = _ten_ops()
    cut = full_cut(g)
    assert cone(g, cut, 6) == {4, 5}  # Cos and Tanh; Mul and Relu before them feed others too
    assert cone(g, cut, 3) == {2}  # Sin, not the Relu that Cos reads as well
    assert cone(g, cut, 1) == {0}
    assert pattern(["Sin", "Mul", "Add"]) == "Add+Mul+Sin"


def test_a_fresh_input_keeps_the_dims_a_dynamic_input_made_symbolic():
    obj = json.loads(_ten_ops().dumps())
    obj["values"] = [{"shape": [2, 3], "dtype": "f32"}] * 2 + [{"shape": [1, 3], "dtype": "f32"}] + obj["values"][3:]
    obj["export"]["dynamic"] = [[0, 0]]  # v0's dim 0 (size 2) is symbolic; v1 (Sin's input) is not
    g = GraphIR.from_json(obj, is_op)
    recorded = {v: np.zeros(g.types[v].shape, np.float32) for v in range(13)}
    cand = build(g, remove(g, full_cut(g), {0, 2}), recorded)  # Relu reads v3, Mul reads v5: fresh inputs
    fresh = {cand.origin[v]: v for v in cand.graph.inputs}
    assert set(fresh) == {3, 5}
    assert sorted(cand.graph.dynamic) == [(fresh[3], 0)]  # v3 = Add(v0, v2) has v0's symbolic dim 0


def test_keeping_a_crash_compares_the_backend_check_not_its_operands():
    from nnsmith_cov.oracle.finding import Finding
    from nnsmith_cov.reduce.check import keeps

    binary = "tvm/import/opt: TypeError: Binary operators must have the same datatype. However, R.multiply({}, lv1)"
    none = "tvm/import/opt: TypeError: 'NoneType' object is not iterable"

    def crash(signature: str, stage: str = "import") -> Finding:
        return Finding("crash", "tvm", stage, "opt", signature, "")

    assert keeps(crash(binary.format("lv3")), crash(binary.format("i0")))
    assert not keeps(crash(binary.format("lv3")), crash(binary.format("i0"), stage="compile"))
    assert keeps(crash(none), crash(none)) and not keeps(crash(none), crash(none.replace("iterable", "callable")))
    assert not keeps(crash(binary.format("lv3")), crash(none))


def _cos_of_relu(g: GraphIR, cut) -> bool:
    """The crash fake's condition, checked on the candidate graph itself (no backend)."""
    small = build(g, cut, {}).graph
    relu_outs = {v for inst in small.insts if inst.op == "Relu" for v in inst.outputs}
    return any(inst.op == "Cos" and relu_outs.intersection(inst.inputs) for inst in small.insts)


def test_the_search_reaches_a_one_minimal_graph_and_repeats_itself():
    g = _ten_ops()
    runs = [Search(g, full_cut(g), lambda cut: _cos_of_relu(g, cut), time.monotonic() + 60, True).run() for _ in "ab"]
    first, second = runs
    assert [g.insts[k].op for k in sorted(first.cut.keep)] == ["Relu", "Cos"]
    assert first.cut == second.cut and first.passes == second.passes
    assert not first.out_of_time and first.steps >= 1
    # 1-minimal: no single instruction or output can go.
    for k in first.cut.keep:
        smaller = remove(g, first.cut, {k})
        assert smaller is None or not _cos_of_relu(g, smaller)


def test_the_op_the_backend_names_is_tried_alone_first():
    from nnsmith_cov.reduce.delta import alone

    g = _ten_ops()
    assert [sorted(c.keep) for c in alone(g, full_cut(g), "Add")] == [[9], [0]]  # last first
    assert alone(g, full_cut(g), "Conv") == []
    (cos,) = alone(g, full_cut(g), "cos")
    tried: list = []

    def holds(cut) -> bool:
        tried.append(cut)
        return any(g.insts[k].op == "Cos" for k in cut.keep)

    done = Search(g, full_cut(g), holds, time.monotonic() + 60, True, first=[cos]).run()
    assert tried[0] == cos and done.passes[0] == "fault" and [g.insts[k].op for k in done.cut.keep] == ["Cos"]


def test_the_search_stops_at_its_deadline_with_what_it_has():
    g = _ten_ops()
    asked = []
    p = Search(g, full_cut(g), lambda cut: asked.append(cut) or True, time.monotonic() - 1, False).run()
    assert p.out_of_time and p.steps == 0 and not asked and p.cut == full_cut(g)


# -- end to end ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crash_bundle(tmp_path_factory) -> Path:
    return _make_bundle(tmp_path_factory.mktemp("crash") / "bundle", CRASH, _ten_ops())


@pytest.fixture(scope="module")
def crash_reduced(crash_bundle):
    return reduce_bundle(crash_bundle, budget_s=300, plugins=[CRASH])


@pytest.mark.slow
def test_a_crash_reduces_to_the_ops_it_needs_and_keeps_its_signature(crash_bundle, crash_reduced):
    original = read_bundle(crash_bundle, [CRASH])
    assert crash_reduced.out == crash_bundle / "reduced"
    assert crash_reduced.ops == ["Relu", "Cos"] and not crash_reduced.out_of_time
    reduced = read_bundle(crash_reduced.out, [CRASH])
    assert reduced.meta["signature"] == original.meta["signature"]
    assert reduced.meta["localized"] == "conversion"  # O0 fails as well
    relu, cos = reduced.graph.insts
    assert cos.inputs == relu.outputs
    info = json.loads((crash_reduced.out / "reduce.json").read_text())
    assert info["original_ops"] == 10 and info["reduced_ops"] == 2
    assert info["ops"] == ["Relu", "Cos"] and info["pattern"] == "Cos+Relu"
    assert info["signature"] == original.meta["signature"]
    assert info["steps"] >= 1 and info["candidates_run"] >= info["steps"] and info["seconds"] > 0
    assert info["reference_agrees"] is True  # fresh inputs carry the values the search's run had
    # The reduced bundle is one `repro` accepts and reproduces.
    assert cli_main(["repro", str(crash_reduced.out), "--plugin", CRASH]) == 0


@pytest.mark.slow
def test_reduction_is_deterministic(crash_bundle, crash_reduced, tmp_path):
    again = reduce_bundle(crash_bundle, tmp_path / "again", budget_s=300, plugins=[CRASH])
    assert again.ops == crash_reduced.ops and again.steps == crash_reduced.steps
    first, second = read_bundle(crash_reduced.out, [CRASH]), read_bundle(again.out, [CRASH])
    assert first.graph.dumps() == second.graph.dumps()
    assert first.values.keys() == second.values.keys()
    assert all(np.array_equal(first.values[k], second.values[k]) for k in first.values)


@pytest.mark.slow
def test_a_spent_budget_still_writes_a_bundle(crash_bundle, tmp_path):
    result = reduce_bundle(crash_bundle, tmp_path / "quick", budget_s=0.001, plugins=[CRASH])
    assert result.out_of_time and result.steps == 0 and len(result.ops) == 10
    assert read_bundle(result.out, [CRASH]).meta["signature"] == read_bundle(crash_bundle, [CRASH]).meta["signature"]
    assert json.loads((result.out / "reduce.json").read_text())["reduced_ops"] == 10


@pytest.mark.slow
def test_an_inconsistency_reduces_and_its_repro_script_shows_it(tmp_path):
    bundle = _make_bundle(tmp_path / "bundle", WRONG, _ten_ops())
    result = reduce_bundle(bundle, tmp_path / "out", budget_s=300, plugins=[WRONG])
    assert sorted(result.ops) == ["Mul", "Sin"]
    reduced = read_bundle(result.out, [WRONG])
    assert reduced.meta["symptom"] == "inconsistency" and reduced.meta["localized"] == "optimization"
    assert cli_main(["repro", str(result.out), "--plugin", WRONG]) == 0
    # The script runs stock onnxruntime, which is right here: it says the outputs agree ...
    assert result.script is not None
    done = _clean_run(result.script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 of 1 outputs disagree" in done.stdout
    # ... and shows expected against actual where they do not.
    oracle = load_npz(result.out / "oracle.npz")
    (name,) = oracle
    (result.out / "oracle.npz").write_bytes(npz_bytes({name: oracle[name] + np.float32(0.5)}))
    done = _clean_run(result.script)
    assert done.returncode == 1
    assert f"{name}: MISMATCH" in done.stdout and "expected" in done.stdout and "actual" in done.stdout


@pytest.mark.slow
def test_an_ort_crash_repro_script_crashes_in_a_clean_interpreter(tmp_path):
    # onnxruntime has no float64 Elu kernel: a real crash, which the script must trigger alone.
    t = {"shape": [2, 3], "dtype": "f64"}
    insts = [("Sin", [0], 1), ("Elu", [1], 2), ("Neg", [2], 3), ("Abs", [3], 4)]
    obj = {
        "schema": 2,
        "values": [t] * 5,
        "inputs": [0],
        "weights": [],
        "insts": [{"op": op, "attrs": {}, "inputs": ins, "outputs": [out]} for op, ins, out in insts],
        "outputs": [4],
        "export": {"opset": 17, "dynamic": []},
    }
    bundle = _make_bundle(tmp_path / "bundle", "ort", GraphIR.from_json(obj, is_op))
    result = reduce_bundle(bundle, budget_s=300)
    assert result.ops == ["Elu"]
    assert result.script is not None
    done = _clean_run(result.script)
    assert done.returncode != 0
    assert "Elu" in done.stderr and "NOT_IMPLEMENTED" in done.stderr


# Runs a script as a user would, where only the venv's site-packages can be imported (no .pth
# files processed, so not the editable nnsmith_cov either), and says what it imported.
_PROBE = """
import runpy, sys
sys.path.append(sys.argv[1])
script = sys.argv[2]
sys.argv = [script]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    print("imported:", sorted(m for m in ("nnsmith_cov", "torch") if m in sys.modules), file=sys.stderr)
"""


def _clean_run(script: Path) -> subprocess.CompletedProcess:
    """`python -I -S` on the script with PYTHONPATH unset, from another folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    site = sysconfig.get_paths()["purelib"]
    cmd = [sys.executable, "-I", "-S", "-c", _PROBE, site, str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=script.parent.parent, timeout=300)
    assert "imported: []" in done.stderr, done.stderr
    return done


def test_bundle_text_never_becomes_code(tmp_path):
    from nnsmith_cov.reduce.script import write_script

    meta = {"backend": "ort", "symptom": 'crash"""\nimport os', "stage": "compile", "opt": "opt", "signature": '"""; x'}
    path = write_script(tmp_path, meta)
    assert path is not None
    tree = ast.parse(path.read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules == {"sys", "pathlib", "numpy", "onnx", "onnxruntime"}


# -- bad input ----------------------------------------------------------------------------------


def _one_line_error(capsys, argv: list[str]) -> str:
    code = reduce_main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_not_a_bundle_is_one_line(tmp_path, capsys):
    assert "not a bundle" in _one_line_error(capsys, [str(tmp_path)])
    assert "not a bundle" in _one_line_error(capsys, [str(tmp_path / "missing")])


def test_a_corrupt_bundle_is_one_line(tmp_path, capsys):
    (tmp_path / "meta.json").write_text("{not json")
    _one_line_error(capsys, [str(tmp_path)])
    (tmp_path / "meta.json").write_text(json.dumps({"schema": 1, "symptom": "crash"}))
    assert "lacks" in _one_line_error(capsys, [str(tmp_path)])


def test_bad_flags_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        reduce_main([str(tmp_path), "--time", "soon"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a duration" in err


def test_an_output_folder_that_is_not_a_bundle_is_refused(tmp_path, capsys):
    from nnsmith_cov.oracle.finding import Finding

    g = _ten_ops()
    values = {"i0": np.ones((2, 3), np.float32), "i1": np.ones((2, 3), np.float32), "w2": np.ones((2, 3), np.float32)}
    finding = Finding("crash", "ort", "compile", "opt", "ort/compile/opt: X", "X")
    bundle = write_bundle(tmp_path / "bundle", finding, g, values, None, b"", {"seed": 0})
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep me")
    assert "not a bundle" in _one_line_error(capsys, [str(bundle), "-o", str(tmp_path / "precious")])
    assert (tmp_path / "precious" / "notes.txt").read_text() == "keep me"
