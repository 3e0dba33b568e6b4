"""`nnsmith-cov replay`: corpora reproduce their coverage, broken inputs cost only themselves."""

from __future__ import annotations

import io
import json

import numpy as np
from onnx import TensorProto, helper

from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore

FLAGS = ["--backends", "ort", "--nodes", "4", "--ops", "Add", "Mul", "Relu", "Sigmoid", "MatMul", "--seed", "3"]
FAKE = ["--collector", "fake_coverage:OpCollector"]


def _model(op: str, dim: int | str) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 3])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_replayed_campaign_reaches_the_branches_of_its_virgin_map(tmp_path):
    camp, out = tmp_path / "camp", tmp_path / "again"
    assert main(["fuzz", "-o", str(camp), "--tests", "8", *FLAGS]) == 0
    assert main(["replay", str(camp), "--backends", "ort", "-o", str(out)]) == 0
    with CorpusStore.open(camp / "lmdb", readonly=True) as src:
        before = src.virgin().covered()
        kept = {f"{camp}#{i}": r.elapsed_s for i, r in src.entries(include_finding_only=True)}
    with CorpusStore.open(out / "lmdb", readonly=True) as store:
        assert store.check() == []  # map == union of the stored bitmaps, counters match
        after = store.virgin().covered()
        assert store.meta.collector == "python" and store.counters().tests_run == len(kept)
        stamps = [r.elapsed_s for _, r in store.entries()]
        rows = store.timeline()
    # Same branches as the campaign's map (export under coverage; ORT itself is not measured).
    assert len(before) > 100 and np.array_equal(before, after)
    replayed = _jsonl(out / "replayed.jsonl")
    assert {line["source"] for line in replayed} == set(kept)
    # The campaign's own time stamps are kept, and its test numbering is the test axis.
    assert sorted(stamps) == stamps and set(stamps) <= set(kept.values())
    assert rows[-1].branches == len(after) and rows[-1].tests >= len(kept)
    config = json.loads((out / "config.json").read_text())
    assert config["replay"]["clock"] == "source" and config["replay"]["sources"][0]["kind"] == "corpus"
    assert config["generator"]["ops"] == ["Add", "MatMul", "Mul", "Relu", "Sigmoid"]  # `fuzz --resume` can go on
    assert not (out / "replay-errors.jsonl").exists()


def test_a_folder_with_corrupt_onnx_files_replays_the_rest_and_lists_them(tmp_path, capsys):
    models = tmp_path / "models"
    (models / "deep").mkdir(parents=True)
    (models / "a_sigmoid.onnx").write_bytes(_model("Sigmoid", "N"))  # symbolic batch dim
    (models / "deep" / "b_relu.onnx").write_bytes(_model("Relu", 2))
    (models / "c_garbage.onnx").write_bytes(b"\x08\x07 not a protobuf \xff\xfe")
    (models / "d_cut.onnx").write_bytes(_model("Tanh", 4)[:25])
    (models / "e_unknown.onnx").write_bytes(_model("NoSuchOp", 2))  # fails the ONNX checker
    (models / "notes.txt").write_text("not a model")
    out = tmp_path / "out"
    backends = "fake_coverage:SigmoidPays,faulty_backends:RefusesImport"
    assert main(["replay", str(models), "--backends", backends, *FAKE, "-o", str(out)]) == 0
    captured = capsys.readouterr()
    errors = _jsonl(out / "replay-errors.jsonl")
    broken = sorted(e["source"] for e in errors if e["kind"] == "unreadable")
    assert broken == ["c_garbage.onnx", "d_cut.onnx", "e_unknown.onnx"]
    assert all(f"broken {name}" in captured.err for name in broken)
    refused = sorted(e["source"] for e in errors if e["kind"] == "rejected")
    assert refused == ["a_sigmoid.onnx", "deep/b_relu.onnx"]  # by RefusesImport; the other backend ran them
    assert "replayed 2 of 5 inputs" in captured.out and "3 broken, 2 refused" in captured.out
    replayed = _jsonl(out / "replayed.jsonl")
    assert [line["source"] for line in replayed] == ["a_sigmoid.onnx", "deep/b_relu.onnx"]  # sorted by name
    with CorpusStore.open(out / "lmdb", readonly=True) as store:
        assert store.check() == [] and store.counters().corpus == 2  # each reached a new fake branch
        entry = store.entry(0)
        assert entry.blobs["model.onnx"] == _model("Sigmoid", "N")
        with np.load(io.BytesIO(entry.blobs["inputs.npz"])) as z:
            assert z["x"].shape == (1, 3) and z["x"].dtype == np.float32  # N drawn as 1
    assert json.loads((out / "config.json").read_text())["replay"]["clock"] == "replay"


def test_a_crash_on_a_foreign_model_is_a_finding_and_the_worker_restarts(tmp_path, capsys):
    models = tmp_path / "m"
    models.mkdir()
    (models / "a.onnx").write_bytes(_model("Relu", 2))
    out = tmp_path / "out"
    argv = ["replay", str(models / "a.onnx"), "--backends", "faulty_backends:Segfault", *FAKE, "--no-localize"]
    assert main([*argv, "-o", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["findings"] == {"crash/compile/faulty_backends:Segfault": 1}
    assert stats["worker_restarts"] >= 1 and stats["replay"]["replayed"] == 1
    (bundle,) = (out / "findings").iterdir()
    assert (bundle / "model.onnx").read_bytes() == _model("Relu", 2) and (bundle / "inputs.npz").is_file()
    assert not (bundle / "graph.json").exists()  # a foreign model has no GraphIR
    meta = json.loads((bundle / "meta.json").read_text())
    assert meta["symptom"] == "crash" and meta["replay_of"] == "a.onnx"
    with CorpusStore.open(out / "lmdb", readonly=True) as store:
        assert store.check() == [] and len(store.findings()) == 1


def test_bad_sources_and_flags_are_one_line_errors(tmp_path, capsys):
    def err(argv):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    assert "no such file or folder" in err(["replay", str(tmp_path / "nothing"), "-o", str(tmp_path / "o")])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no campaign corpus" in err(["replay", str(empty), "-o", str(tmp_path / "o")])
    (tmp_path / "x.txt").write_text("hi")
    assert "not an .onnx file" in err(["replay", str(tmp_path / "x.txt"), "-o", str(tmp_path / "o")])
    models = tmp_path / "models"
    models.mkdir()
    (models / "a.onnx").write_bytes(_model("Relu", 2))
    assert "campaign corpora only" in err(["replay", str(models), "--clock", "source", "-o", str(tmp_path / "o")])
    assert "invalid choice" in err(["replay", str(models), "--clock", "never", "-o", str(tmp_path / "o")])
    assert "measures coverage" in err(["replay", str(models), "--collector", "none", "-o", str(tmp_path / "o")])
    fake_corpus = tmp_path / "fake"
    (fake_corpus / "lmdb").mkdir(parents=True)
    (fake_corpus / "lmdb" / "data.mdb").write_bytes(b"\0" * 100)
    assert "data.mdb" in err(["replay", str(fake_corpus), "-o", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()
