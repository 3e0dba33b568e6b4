"""`nnsmith-cov triage`: root causes of hand-made run folders (findings.jsonl + bundle folders)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from nnsmith_cov.cli import main as cli_main
from nnsmith_cov.corpus import CorpusStore, TestEntry, TestRecord
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.flag_values import duration as duration_arg
from nnsmith_cov.report.rootcause import read_findings, triage_run
from nnsmith_cov.report.triage import (
    _standalone,
    duration,
    main,
    print_class_summaries,
    row_cells,
    summary_line,
)

CRASH = "tvm/compile/opt: InternalError: Check failed: (N == N) is false"
NEAR_ADD = "ort/execute/opt: inconsistent values near Add<-Conv2d"
NEAR_RELU = "ort/execute/opt: inconsistent values near Relu<-Conv2d"
TVM_NEAR_ADD = "tvm/execute/opt: inconsistent values near Add<-Conv2d"


def line(test: int, signature: str, **extra) -> dict:
    """A findings.jsonl line as the ledger writes it; the header follows the signature."""
    backend, stage, opt = signature.split(":")[0].split("/")
    symptom = "crash" if stage == "compile" else "inconsistency"
    name = f"{symptom}-{backend}-{stage}-{abs(hash(signature)) % 10**12:012d}"
    out = {"test": test, "seed": test * 7, "symptom": symptom, "backend": backend, "stage": stage, "opt": opt}
    out |= {"localized": None, "signature": signature, "category": "bug", "rule": ""}
    return out | {"new": True, "bundle": f"findings/{name}"} | extra


def make_run(root: Path, lines: list[dict], reduced: dict[str, dict] | None = None) -> Path:
    """A run folder: config.json, findings.jsonl, a bundle per signature; `reduced` maps a
    signature to the reduce.json its bundle has."""
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"schema": 1}\n')
    (root / "findings.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for x in lines:
        bundle = root / x["bundle"]
        bundle.mkdir(parents=True, exist_ok=True)
        (bundle / "meta.json").write_text(json.dumps({"schema": 1, "signature": x["signature"]}))
        if reduced and x["signature"] in reduced:
            write_reduction(bundle, **reduced[x["signature"]])
    return root


def write_reduction(bundle: Path, pattern, reduced_ops: int, original_ops: int = 10, out_of_time: bool = False) -> None:
    (bundle / "reduced").mkdir(exist_ok=True)
    body = {"signature": "s", "original_ops": original_ops, "reduced_ops": reduced_ops, "ops": [], "pattern": pattern}
    body |= {"steps": 4, "seconds": 1.5, "candidates_run": 20, "out_of_time": out_of_time}
    (bundle / "reduced" / "reduce.json").write_text(json.dumps(body))


def args(run: Path, *, reduce: bool = False, as_json: bool = True, cls: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(run=run, reduce=reduce, reduce_time=30.0, plugin=[], json=as_json, cls=cls)


def run_json(run: Path, capsys, **kw) -> dict:
    assert main(args(run, **kw)) == 0
    return json.loads(capsys.readouterr().out)


def test_findings_of_one_signature_are_one_root_cause(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(3, CRASH), line(4, NEAR_ADD), line(4, CRASH), line(8, CRASH)])
    body = run_json(run, capsys)
    assert [(rc["signature"], rc["findings"], rc["tests"]) for rc in body["root_causes"]] == [
        (CRASH, 3, 3),  # most findings first
        (NEAR_ADD, 1, 1),
    ]
    crash = body["root_causes"][0]
    assert crash["first_seen"] == {"test": 3, "elapsed_s": None}
    assert crash["backends"] == ["tvm"]
    assert crash["bundle"] == str(run / line(3, CRASH)["bundle"])
    assert crash["reduced"] is None
    assert body["findings"] == 4 and body["tests"] == 3


def test_equal_reduced_patterns_merge_signatures(tmp_path, capsys):
    lines = [line(1, NEAR_ADD), line(2, NEAR_RELU), line(3, NEAR_RELU), line(4, TVM_NEAR_ADD)]
    reduced = {
        NEAR_ADD: {"pattern": ["Conv2d", "Add"], "reduced_ops": 3},
        NEAR_RELU: {"pattern": "Conv2d<-Add", "reduced_ops": 2, "original_ops": 7},  # the same pattern, as text
        TVM_NEAR_ADD: {"pattern": ["Conv2d", "Add"], "reduced_ops": 2},  # the same pattern on another backend
    }
    run = make_run(tmp_path / "run", lines, reduced)
    causes = run_json(run, capsys)["root_causes"]
    assert len(causes) == 2
    merged = causes[0]
    assert merged["signatures"] == [NEAR_ADD, NEAR_RELU]
    assert (merged["findings"], merged["tests"], merged["first_seen"]["test"]) == (3, 3, 1)
    # the smallest reduction stands for the root cause; --reduce would start from the first bundle
    assert merged["reduced"]["ops"] == 2 and merged["reduced"]["original_ops"] == 7
    assert merged["reduced"]["path"] == str(run / line(2, NEAR_RELU)["bundle"] / "reduced")
    assert merged["bundle"] == str(run / line(1, NEAR_ADD)["bundle"])
    assert causes[1]["backends"] == ["tvm"] and causes[1]["signatures"] == [TVM_NEAR_ADD]


def test_unreduced_signatures_stay_apart(tmp_path):
    run = make_run(
        tmp_path / "run", [line(1, NEAR_ADD), line(2, NEAR_RELU)], {NEAR_ADD: {"pattern": "A", "reduced_ops": 1}}
    )
    assert len(triage_run(run).root_causes) == 2


def test_classes_are_counted_and_filtered(tmp_path, capsys):
    lines = [
        line(1, NEAR_ADD, category="precision", rule="exact value closer to ort"),
        line(2, NEAR_ADD, category="precision", rule="exact value closer to ort"),
        line(2, TVM_NEAR_ADD, category="reference", rule="consensus"),
        line(3, CRASH),
        line(5, NEAR_ADD),  # the same signature, not excused this time: a root cause of its own class
    ]
    run = make_run(tmp_path / "run", lines)
    t = triage_run(run)
    assert t.by_class() == {"bug": (2, 2), "reference": (1, 1), "precision": (2, 1)}  # CLASSES order
    assert summary_line(t) == (
        "findings by class: bug 2 (2 root causes), reference 1 (1 root cause), precision 2 (1 root cause)"
    )
    assert [rc.category for rc in t.root_causes] == ["bug", "bug", "reference", "precision"]
    (run / "internal.jsonl").write_text('{"test": 9}\n{"test": 11}\n')
    assert summary_line(triage_run(run)).endswith("; 2 internal errors of nnsmith-cov, not counted")
    precision = run_json(run, capsys, cls="precision")
    assert [(rc["class"], rc["findings"], rc["rule"]) for rc in precision["root_causes"]] == [
        ("precision", 2, "exact value closer to ort")
    ]
    assert precision["classes"]["bug"] == {"findings": 2, "root_causes": 2}  # the totals stay whole


def test_old_findings_without_category_read_as_bug(tmp_path, capsys):
    old = {k: v for k, v in line(1, CRASH).items() if k not in ("category", "rule")}
    run = make_run(tmp_path / "run", [old, line(2, NEAR_ADD, category=None)])
    body = run_json(run, capsys)
    assert [rc["class"] for rc in body["root_causes"]] == ["bug", "bug"]
    assert body["classes"] == {"bug": {"findings": 2, "root_causes": 2}}


def test_table_lists_class_count_first_seen_and_reduced_size(tmp_path, capsys):
    lines = [line(4, NEAR_ADD, elapsed_s=12.4), line(9, NEAR_ADD), line(6, CRASH)]
    run = make_run(tmp_path / "run", lines, {NEAR_ADD: {"pattern": "Conv2d<-Add", "reduced_ops": 2, "original_ops": 9}})
    t = triage_run(run)
    assert row_cells(1, t.root_causes[0]) == [
        "1",
        "bug",
        "2",
        "2",
        "test 4 at 12 s",
        "ort",
        NEAR_ADD,
        "2 ops of 9",
        str(run / lines[0]["bundle"] / "reduced"),
    ]
    assert row_cells(2, t.root_causes[1])[4:] == ["test 6", "tvm", CRASH, "-", "-"]
    write_reduction(run / lines[2]["bundle"], "Conv2d", reduced_ops=1, original_ops=5, out_of_time=True)
    assert row_cells(2, triage_run(run).root_causes[1])[7] == "1 op of 5, out of time"
    assert main(args(run, as_json=False)) == 0
    out = capsys.readouterr().out
    assert "2 ops of 9" in out and "test 4 at 12 s" in out
    assert out.strip().splitlines()[-1] == "findings by class: bug 3 (2 root causes)"


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("2.5", 2.5), ("90s", 90.0), ("2m", 120.0), ("1m30s", 90.0)])
def test_reduce_time_takes_units(text, seconds):
    assert duration_arg(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "2x", "-3", "m", "1e9"])
def test_bad_reduce_time_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        duration_arg(text)


@pytest.mark.parametrize("seconds, text", [(0.4, "0 s"), (59.4, "59 s"), (425, "7m05s"), (3600 * 3 + 725, "3h12m")])
def test_durations_are_short(seconds, text):
    assert duration(seconds) == text


def test_first_seen_time_comes_from_the_corpus(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(2, CRASH)])
    record = TestRecord(seed=14, status="finding", graph={}, gen={}, draws=[], timings={}, elapsed_s=41.5)
    with CorpusStore.create(run / "lmdb", {"seed": 1}, {}, None) as store:
        store.commit(2, TestEntry(record, None, {}, [line(2, CRASH)]), elapsed_s=41.5)
    assert run_json(run, capsys)["root_causes"][0]["first_seen"] == {"test": 2, "elapsed_s": 41.5}


def test_a_line_still_being_written_is_not_read(tmp_path):
    run = make_run(tmp_path / "run", [line(1, CRASH)])
    with open(run / "findings.jsonl", "a") as f:
        f.write('{"test": 2, "sig')
    assert [o.test for o in read_findings(run)] == [1]


def test_a_bundle_path_leaving_the_run_is_ignored(tmp_path):
    run = make_run(tmp_path / "run", [line(1, CRASH)])
    (run / "findings.jsonl").write_text(json.dumps(line(1, CRASH, bundle="../elsewhere")) + "\n")
    assert read_findings(run)[0].bundle is None


def test_a_damaged_reduction_is_a_note_not_an_error(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(1, CRASH)], {CRASH: {"pattern": "A", "reduced_ops": 1}})
    (run / line(1, CRASH)["bundle"] / "reduced" / "reduce.json").write_text("{not json")
    assert main(args(run)) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["root_causes"][0]["reduced"] is None
    assert "ignored a damaged reduction" in captured.err


def _bad_runs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    cases = {"missing": tmp_path / "nope", "file": tmp_path / "file", "not a run": tmp_path / "empty"}
    for name, text in (
        ("not json", "{oops\n"),
        ("a list", "[1, 2]\n"),
        ("no signature", json.dumps({k: v for k, v in line(1, CRASH).items() if k != "signature"}) + "\n"),
        ("bad test", json.dumps(line(1, CRASH) | {"test": "three"}) + "\n"),
        ("bad class", json.dumps(line(1, CRASH) | {"category": 7}) + "\n"),
        ("deep", "[" * 10000 + "]" * 10000 + "\n"),
    ):
        run = tmp_path / name.replace(" ", "-")
        run.mkdir()
        (run / "findings.jsonl").write_text(text)
        cases[name] = run
    unreadable = tmp_path / "unreadable"
    (unreadable / "findings.jsonl").mkdir(parents=True)  # a folder where the file should be
    cases["unreadable"] = unreadable
    return cases


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "file",
        "not a run",
        "not json",
        "a list",
        "no signature",
        "bad test",
        "bad class",
        "deep",
        "unreadable",
    ],
)
def test_bad_run_folder_is_one_line_error(tmp_path, capsys, case):
    run = _bad_runs(tmp_path)[case]
    assert main(args(run)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nnsmith-cov: error: ") and str(run) in err[0]


def test_a_run_that_found_nothing_has_an_empty_table(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    body = run_json(run, capsys)
    assert body["root_causes"] == [] and body["findings"] == 0


def test_reduce_runs_the_reducer_once_per_unreduced_root_cause_in_table_order(tmp_path, capsys):
    lines = [line(1, NEAR_RELU), line(2, NEAR_ADD), line(3, NEAR_ADD), line(4, CRASH), line(5, TVM_NEAR_ADD)]
    run = make_run(tmp_path / "run", lines, {TVM_NEAR_ADD: {"pattern": "X", "reduced_ops": 1}})
    calls = []

    def stub(bundle: Path, budget_s: float) -> None:
        calls.append((bundle, budget_s))
        if bundle.name == Path(line(4, CRASH)["bundle"]).name:
            raise RuntimeError("the signature did not hold\nsecond line")
        write_reduction(bundle, ["Conv2d", "Add"], reduced_ops=2)  # both inconsistencies reduce alike

    assert main(args(run, reduce=True), reducer=stub) == 0
    captured = capsys.readouterr()
    order = [line(2, NEAR_ADD), line(1, NEAR_RELU), line(4, CRASH)]  # most findings first, then first seen
    assert calls == [(run / x["bundle"], 30.0) for x in order]
    assert "the signature did not hold" in captured.err and "second line" not in captured.err
    causes = json.loads(captured.out)["root_causes"]
    # after reduction the two ORT inconsistencies are one root cause
    assert [(rc["signatures"], rc["findings"]) for rc in causes] == [
        ([NEAR_RELU, NEAR_ADD], 3),
        ([CRASH], 1),
        ([TVM_NEAR_ADD], 1),
    ]
    calls.clear()
    assert main(args(run, reduce=True), reducer=stub) == 0  # only the crash is left to reduce
    assert calls == [(run / line(4, CRASH)["bundle"], 30.0)]


def test_reduce_passes_over_missing_bundles_and_says_when_nothing_was_written(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(1, CRASH), line(2, NEAR_ADD)])
    (run / line(1, CRASH)["bundle"] / "meta.json").unlink()
    calls = []
    assert main(args(run, reduce=True), reducer=lambda bundle, budget: calls.append(bundle)) == 0
    err = capsys.readouterr().err
    assert calls == [run / line(2, NEAR_ADD)["bundle"]]
    assert f"reduce: {CRASH}: no bundle to reduce" in err
    assert "the reducer wrote no reduced/reduce.json" in err


def test_standalone_entry_parses_flags(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(1, CRASH)])
    assert _standalone([str(run), "--json", "--class", "bug"]) == 0
    assert json.loads(capsys.readouterr().out)["class_filter"] == "bug"
    with pytest.raises(SystemExit):
        _standalone([str(run), "--class", "nonsense"])


def _coverage_campaign(run: Path) -> None:
    """A corpus with a collector, so that `report` takes it."""
    file_of = np.zeros(4, dtype=np.int32)
    universe = Universe(
        "python", "arc", {"tvm": "0.27.0"}, ["tvm/relax/op.py"], file_of, np.arange(4) + 1, np.arange(4) + 2
    )
    virgin = VirginMap(len(universe))
    config = {"seed": 1, "time_s": 10.0, "collector": "python", "pass_filters": None}
    with CorpusStore.create(run / "lmdb", config, {"tvm": "0.27.0"}, universe) as store:
        hits = Hits.from_arrays(np.array([0, 1]), np.ones(2))
        novelty = virgin.update(hits)
        record = TestRecord(
            seed=1, status="finding", graph={}, gen={}, draws=[], timings={}, elapsed_s=1.0, novelty=novelty
        )
        store.commit(0, TestEntry(record, hits, {}, [line(0, CRASH)]), elapsed_s=1.0, virgin=virgin)


def test_report_prints_findings_by_class(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(0, CRASH), line(0, NEAR_ADD, category="precision")])
    _coverage_campaign(run)
    assert cli_main(["report", f"{run}=A", "-o", str(tmp_path / "out"), "--no-figures"]) == 0
    out = capsys.readouterr().out
    assert "A: findings by class: bug 1 (1 root cause), precision 1 (1 root cause)" in out.splitlines()


def test_class_summaries_pass_over_what_is_not_a_run(tmp_path, capsys):
    run = make_run(tmp_path / "run", [line(0, CRASH)])
    damaged = make_run(tmp_path / "damaged", [line(0, CRASH)])
    (damaged / "findings.jsonl").write_text("{oops\n")
    print_class_summaries([f"lcov:{tmp_path}/x.info", str(tmp_path / "nope"), f"{run / 'lmdb'}=R", str(damaged)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "R: findings by class: bug 1 (1 root cause)"
    assert out[1].startswith("damaged: no triage (") and len(out) == 2


# -- root-cause keys of crashes ----------------------------------------------------------------

BINARY = (
    "tvm/{stage}/opt: TypeError: Binary operators must have the same datatype for both operands. However, "
    'R.{call}(R.const(1.0, "float32"), lv3) uses datatype T.float32 on the LHS'
)
NONE_ITER = "tvm/import/opt: TypeError: 'NoneType' object is not iterable"


def crash(test: int, signature: str, stage: str = "import") -> dict:
    return line(test, signature, symptom="crash", stage=stage)


def test_one_backend_check_from_several_ops_and_stages_is_one_root_cause(tmp_path, capsys):
    lines = [
        crash(1, BINARY.format(stage="import", call="subtract")),
        crash(2, BINARY.format(stage="import", call="multiply")),
        crash(3, BINARY.format(stage="compile", call="subtract"), stage="compile"),
    ]
    reduced = {lines[0]["signature"]: {"pattern": "Elu", "reduced_ops": 1}}
    reduced |= {lines[1]["signature"]: {"pattern": "ThresholdedRelu", "reduced_ops": 1}}
    body = run_json(make_run(tmp_path / "run", lines, reduced), capsys)
    assert [(rc["findings"], len(rc["signatures"])) for rc in body["root_causes"]] == [(3, 3)]
    assert body["root_causes"][0]["reduced"]["ops"] == 1


def test_python_errors_are_told_apart_by_the_op_at_fault(tmp_path, capsys):
    lines = [crash(1, NONE_ITER), crash(2, NONE_ITER + " "), crash(3, NONE_ITER + "  ")]
    run = make_run(tmp_path / "run", lines)
    for x, op in zip(lines, ("Expand", "Expand", "Slice"), strict=True):
        (run / x["bundle"] / "error.log").write_text(
            f"Traceback\nTypeError: ...\n--- worker output ---\nError converting operator {op}, with inputs: [lv1]\n"
        )
    body = run_json(run, capsys)
    assert sorted((rc["findings"], rc["key"].rsplit(" ", 1)[-1]) for rc in body["root_causes"]) == [
        (1, "Slice"),
        (2, "Expand"),
    ]


def test_a_python_error_without_a_known_op_is_keyed_by_its_reduced_pattern(tmp_path, capsys):
    lines = [crash(1, NONE_ITER), crash(2, NONE_ITER + " ")]
    reduced = {lines[0]["signature"]: {"pattern": "Expand+Less", "reduced_ops": 2}}
    reduced |= {lines[1]["signature"]: {"pattern": "Flip", "reduced_ops": 1}}
    body = run_json(make_run(tmp_path / "run", lines, reduced), capsys)
    assert len(body["root_causes"]) == 2


def test_pytorch_errors_filed_as_bugs_are_read_again_as_not_compiler_bugs(tmp_path, capsys):
    broken = "torch/export/-: RuntimeError: shape '[N, N]' is invalid for input of size N"
    refusal = "torch/export/-: SymbolicValueError: Unsupported: ONNX export of operator adaptive_avg_pool2d"
    # the exporter's "Failed to export a node ... because it is not constant": a refusal too
    gather = "torch/export/-: SymbolicValueError: Failed to export a node '%v : Long(T) = onnx::Gather[axis=N](%v, %v)"
    lines = [line(1, broken, symptom="crash"), line(2, refusal, symptom="crash"), crash(3, NONE_ITER)]
    lines.append(line(4, gather, symptom="crash"))
    body = run_json(make_run(tmp_path / "run", lines), capsys)
    classes = {rc["signature"]: (rc["class"], rc["rule"]) for rc in body["root_causes"]}
    assert classes[broken][0] == "reference" and classes[broken][1].startswith("torch-error:")
    assert classes[refusal][0] == "ours" and classes[gather][0] == "ours" and classes[NONE_ITER] == ("bug", "")
