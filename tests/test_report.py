"""`nnsmith-cov report`: exact set arithmetic, tables, figures and exports on hand-made campaigns."""

from __future__ import annotations

import csv
import itertools
import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.corpus import CorpusStore, TestEntry, TestRecord, TimelineRow
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.report import plots
from nnsmith_cov.report.command import ReportOptions, make_report
from nnsmith_cov.report.compare import pairwise, unique_counts, venn_regions
from nnsmith_cov.report.export import read_json, write_json
from nnsmith_cov.report.lcov import read_lcov, write_lcov
from nnsmith_cov.report.load import load_corpus, parse_spec
from nnsmith_cov.report.model import Campaign, ReportError

PASS_FILE = "tvm/relax/transform/fuse.py"
OTHER_FILE = "tvm/relax/op.py"


def fake_universe() -> Universe:
    """20 arcs: 0-9 in a pass file (9 is a function exit), 10-19 elsewhere."""
    file_of = np.array([0] * 10 + [1] * 10, dtype=np.int32)
    line = np.array(list(range(1, 11)) * 2, dtype=np.int32)
    target = line + 1
    target[9] = -1
    return Universe("python", "arc", {"tvm": "0.27.0"}, [PASS_FILE, OTHER_FILE], file_of, line, target)


def make_campaign(
    path: Path,
    tests: list[tuple[list[int] | None, float, list[str], bool]],
    time_s: float = 60.0,
    universe: Universe | None = None,
):
    """A campaign corpus from (hit branch indices or None, elapsed, ops, has finding) per test."""
    universe = universe or fake_universe()
    config = {"seed": 1, "time_s": time_s, "feedback": True, "collector": universe.collector, "pass_filters": None}
    virgin = VirginMap(len(universe))
    with CorpusStore.create(path, config, {"tvm": "0.27.0"}, universe) as store:
        for test_id, (hit, elapsed, ops, finding) in enumerate(tests):
            hits = None if hit is None else Hits.from_arrays(np.array(hit), np.ones(len(hit)))
            novelty = virgin.update(hits) if hits is not None else None
            keep = hits is not None and novelty.interesting
            findings = [{"symptom": "crash", "backend": "tvm", "stage": "compile", "signature": f"s{test_id}"}]
            findings = findings if finding else []
            entry = None
            if keep or finding:
                record = TestRecord(
                    seed=test_id,
                    status="finding" if finding else "pass",
                    graph={},
                    gen={"ops": ops},
                    draws=[],
                    timings={},
                    elapsed_s=elapsed,
                    novelty=novelty,
                )
                entry = TestEntry(record, hits if keep else None, {}, findings)
            row = TimelineRow(elapsed, test_id + 1, virgin.count(), 0, 0, 0)
            store.commit(test_id, entry, elapsed_s=elapsed, virgin=virgin if keep else None, timeline=row)


CAMPAIGN_A = [
    ([0, 1, 10], 1.0, ["Add", "Conv2d"], False),
    ([0], 2.0, ["Add"], False),  # nothing new: not kept
    ([2, 11, 12], 4.0, ["Mul", "Add"], True),
    (None, 5.0, ["Relu"], True),  # a finding without coverage
]
CAMPAIGN_B = [
    ([0, 3, 9], 1.5, ["Mul"], False),
    ([10, 13], 3.0, ["Mul", "Mul"], False),
]


def campaign(label: str, keys: set[str], collector: str = "python", unit: str = "arc") -> Campaign:
    return Campaign(label, label, "json", collector, unit, frozenset(keys), frozenset(), ())


# -- set arithmetic ----------------------------------------------------------------------


def test_venn_regions_and_unique_counts_are_exact_on_hand_made_sets():
    sets = {"a": {"1", "2", "3", "4"}, "b": {"3", "4", "5"}, "c": {"4", "6"}}
    assert venn_regions(sets) == {("a",): 2, ("a", "b"): 1, ("a", "b", "c"): 1, ("b",): 1, ("c",): 1}
    assert unique_counts(sets) == {"a": 2, "b": 1, "c": 1}
    assert pairwise(sets)["a"] == {"b": 2, "c": 3}
    assert unique_counts({"x": set(), "y": {"1"}}) == {"x": 0, "y": 1}


def test_venn_regions_of_many_sets_match_brute_force():
    rng = random.Random(3)
    sets = {f"s{i}": {str(rng.randrange(60)) for _ in range(30)} for i in range(5)}
    regions = venn_regions(sets)
    for r in range(1, 6):
        for combo in itertools.combinations(sets, r):
            inside = set.intersection(*(sets[x] for x in combo))
            outside = set().union(*(sets[x] for x in sets if x not in combo))
            assert regions.get(combo, 0) == len(inside - outside)
    assert sum(regions.values()) == len(set().union(*sets.values()))


# -- campaigns -----------------------------------------------------------------------------


def test_load_corpus_reads_totals_pass_only_curves_and_ops(tmp_path):
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    c = load_corpus(tmp_path / "a", "A")
    u = fake_universe()
    assert c.covered == {u.key(i) for i in (0, 1, 2, 10, 11, 12)}
    assert c.pass_covered == {u.key(i) for i in (0, 1, 2)}
    assert (c.universe_size, c.pass_universe, c.tests, c.corpus, c.findings) == (20, 10, 4, 2, 2)
    assert c.time_budget_s == 60.0 and c.elapsed_s == 5.0
    assert c.by_time is not None and c.by_tests is not None
    assert c.by_time.x == (0.0, 1.0, 4.0, 5.0) and c.by_time.branches == (0, 3, 6, 6)
    assert c.by_time.pass_branches == (0, 2, 3, 3)
    assert c.by_tests.x == (0.0, 1.0, 3.0, 4.0)
    ops = {r["op"]: r for r in c.ops}
    assert ops["Add"]["corpus_tests"] == 2 and ops["Add"]["corpus_share"] == 1.0
    assert ops["Conv2d"]["new_branches"] == 3 and ops["Mul"]["finding_tests"] == 1
    assert ops["Relu"]["corpus_tests"] == 0 and ops["Relu"]["finding_tests"] == 1
    assert "generated_tests" not in ops["Add"]  # no stats.json: only what the corpus keeps


def test_op_rows_take_all_generated_tests_from_stats(tmp_path):
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    (tmp_path / "a" / "stats.json").write_text(json.dumps({"op_tests": {"Add": 4, "Conv2d": 2, "Tanh": 3}}))
    ops = {r["op"]: r for r in load_corpus(tmp_path / "a", "A").ops}
    assert ops["Add"]["generated_tests"] == 4 and ops["Add"]["interesting_rate"] == 0.5
    assert ops["Conv2d"]["interesting_rate"] == 0.5
    assert ops["Tanh"]["generated_tests"] == 3 and ops["Tanh"]["corpus_tests"] == 0
    assert ops["Mul"]["generated_tests"] == 0 and ops["Mul"]["interesting_rate"] == 0.0


def test_parse_spec_labels():
    assert parse_spec("runs/x=ours") == ("corpus", Path("runs/x"), "ours")
    assert parse_spec("runs/x")[2] == "x"
    assert parse_spec("lcov:cov/tzer.info=tzer") == ("lcov", Path("cov/tzer.info"), "tzer")
    assert parse_spec("json:b/y.json")[2] == "y"


def _svg_ids(path: Path, prefix: str) -> list[str]:
    root = ET.parse(path).getroot()  # also proves the SVG is well-formed
    return [el.get("id") for el in root.iter() if (el.get("id") or "").startswith(prefix)]


def test_report_on_fake_campaigns_writes_table_figures_and_exports(tmp_path):
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    make_campaign(tmp_path / "b", CAMPAIGN_B, time_s=30.0)
    out = tmp_path / "rep"
    make_report([f"{tmp_path / 'a'}=A", f"{tmp_path / 'b'}=B"], out, ReportOptions(quiet=True))

    body = json.loads((out / "report.json").read_text())
    rows = {r["label"]: r for r in body["campaigns"]}
    assert rows["A"]["total"] == 6 and rows["B"]["total"] == 5
    assert rows["A"]["pass_only"] == 3 and rows["B"]["pass_only"] == 3
    assert rows["A"]["unique"] == 4 and rows["B"]["unique"] == 3  # shared: arcs 0 and 10
    assert rows["A"]["unique_pass"] == 2 and rows["B"]["unique_pass"] == 2
    assert rows["A"]["total_pct"] == 30.0 and rows["B"]["pass_pct"] == 30.0
    assert (rows["A"]["tests"], rows["A"]["corpus"], rows["A"]["findings"]) == (4, 2, 2)
    assert rows["B"]["time_budget_s"] == 30.0 and rows["A"]["collector"] == "python"
    assert rows["A"]["build"] == fake_universe().ident
    assert {tuple(r["sets"]): r["count"] for r in body["venn"]} == {("A",): 4, ("A", "B"): 2, ("B",): 3}
    assert any("python collector" in line and "time budget 60 s" in line for line in body["made_by"])

    with (out / "table.csv").open() as f:
        table = {r["label"]: r for r in csv.DictReader(f)}
    assert table["A"]["unique"] == "4" and table["B"]["total"] == "5" and table["B"]["pass_only"] == "3"

    figs = out / "figures"
    for name in ("coverage-time", "coverage-tests", "pass-coverage-time", "pass-coverage-tests", "venn"):
        assert (figs / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (figs / f"{name}.svg").exists()
    assert sorted(_svg_ids(figs / "coverage-time.svg", "series-")) == ["series-0", "series-1"]
    assert len(_svg_ids(figs / "venn.svg", "region-")) == 3
    assert (out / "ops" / "A.csv").exists()
    assert read_json(out / "branches" / "A.json", "A2").covered == load_corpus(tmp_path / "a", "A").covered


def test_four_campaigns_get_an_upset_chart(tmp_path):
    paths = []
    for i, keys in enumerate([{"f.py:1->2", "f.py:2->3"}, {"f.py:2->3"}, {"f.py:5->6"}, {"f.py:1->2", "g.py:1->-1"}]):
        p = tmp_path / f"s{i}.json"
        write_json(campaign(f"s{i}", keys), p)
        paths.append(f"json:{p}")
    out = tmp_path / "rep"
    make_report(paths, out, ReportOptions(quiet=True))
    assert not (out / "figures" / "venn.png").exists()
    assert (out / "figures" / "upset.png").read_bytes()[:4] == b"\x89PNG"
    # regions: {s0}: none, {s0,s1}: 2->3, {s2}: 5->6, {s0,s3}: 1->2, {s3}: g.py
    assert len(_svg_ids(out / "figures" / "upset.svg", "region-")) == 4


# -- lcov and imports -----------------------------------------------------------------------


def test_lcov_export_parses_back_to_the_same_set(tmp_path):
    make_campaign(tmp_path / "a", CAMPAIGN_B)
    c = load_corpus(tmp_path / "a", "A")
    assert any(k.endswith("->-1") for k in c.covered)  # the function exit arc survives too
    write_lcov(c, tmp_path / "a.info")
    text = (tmp_path / "a.info").read_text()
    assert "BRDA:10,1,1,1" in text and "BRDA:2,0,3,0" in text  # exit arc taken; an uncovered arc listed
    back = read_lcov(tmp_path / "a.info", "back")
    assert (back.covered, back.pass_covered, back.collector, back.unit) == (c.covered, c.pass_covered, "python", "arc")

    edges = campaign("e", {"src/x.cc:12#0", "src/x.cc:12#1", "/abs/y.cc:3#7"}, collector="llvm", unit="edge")
    write_lcov(edges, tmp_path / "e.info")
    assert read_lcov(tmp_path / "e.info", "e").covered == edges.covered


def test_foreign_lcov_uses_branches_or_else_lines(tmp_path):
    (tmp_path / "br.info").write_text(
        "TN:\nSF:/s/a.c\nDA:1,4\nBRDA:1,0,0,3\nBRDA:1,0,1,0\nBRDA:2,0,0,-\nend_of_record\n"
    )
    (tmp_path / "da.info").write_text("SF:/s/a.c\nDA:1,4\nDA:2,0\nend_of_record\nSF:/s/b.c\nDA:7,1\nend_of_record\n")
    br = read_lcov(tmp_path / "br.info", "br")
    assert (br.collector, br.unit, br.covered) == ("lcov", "lcov-branch", {"/s/a.c:1#0.0"})
    da = read_lcov(tmp_path / "da.info", "da")
    assert (da.unit, da.covered) == ("lcov-line", {"/s/a.c:1", "/s/b.c:7"})


def test_imported_lcov_joins_the_table_and_venn(tmp_path):
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    make_campaign(tmp_path / "b", CAMPAIGN_B)
    u = fake_universe()
    elsewhere = campaign("other", {u.key(i) for i in (1, 3, 17)})
    write_lcov(elsewhere, tmp_path / "other.info")
    out = tmp_path / "rep"
    make_report(
        [f"{tmp_path / 'a'}=A", f"{tmp_path / 'b'}=B", f"lcov:{tmp_path / 'other.info'}=tzer"],
        out,
        ReportOptions(quiet=True, figures=True),
    )
    body = json.loads((out / "report.json").read_text())
    rows = {r["label"]: r for r in body["campaigns"]}
    assert (rows["tzer"]["origin"], rows["tzer"]["total"], rows["tzer"]["unique"]) == ("lcov", 3, 1)
    assert rows["tzer"]["pass_only"] == 2 and rows["tzer"]["total_pct"] is None
    regions = {tuple(r["sets"]): r["count"] for r in body["venn"]}
    assert regions[("A", "tzer")] == 1 and regions[("B", "tzer")] == 1 and regions[("tzer",)] == 1
    assert rows["A"]["unique"] == 3  # arc 1 is no longer A's alone
    assert len(_svg_ids(out / "figures" / "venn.svg", "region-")) == 7


def test_mixed_collectors_are_refused_unless_asked(tmp_path, capsys):
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    (tmp_path / "n.info").write_text("SF:tvm/relax/op.py\nDA:1,1\nend_of_record\n")
    specs = [str(tmp_path / "a"), f"lcov:{tmp_path / 'n.info'}"]
    assert main(["report", *specs, "-o", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different" in err
    assert main(["report", *specs, "-o", str(tmp_path / "r"), "--by-line", "--no-figures"]) == 0
    rows = json.loads((tmp_path / "r" / "report.json").read_text())["campaigns"]
    assert rows[1]["unique"] == 0  # tvm/relax/op.py:1 is also where campaign a's arc 10 starts


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["missing", "not-lmdb", "empty-folder", "bad-lcov"])
def test_bad_input_is_one_line_error(tmp_path, capsys, damage):
    target = tmp_path / "c"
    spec = str(target)
    if damage == "not-lmdb":
        target.mkdir()
        (target / "data.mdb").write_bytes(b"\0garbage" * 1000)
    elif damage == "empty-folder":
        target.mkdir()
    elif damage == "bad-lcov":
        (tmp_path / "x.info").write_text("SF:a\nDA:one,two\n")
        spec = f"lcov:{tmp_path / 'x.info'}"
    assert main(["report", spec, "-o", str(tmp_path / "r")]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnsmith-cov: error:")
    assert "Traceback" not in captured.err


def test_cut_corpus_is_one_line_error(tmp_path, capsys):
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    data = tmp_path / "a" / "data.mdb"
    data.write_bytes(data.read_bytes()[:6000])
    assert main(["report", str(tmp_path / "a"), "-o", str(tmp_path / "r")]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_pass_filter_flag_overrides_the_campaigns_own(tmp_path):
    make_campaign(tmp_path / "b", CAMPAIGN_B)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "b"), "-o", str(out), "--pass-filter", OTHER_FILE, "--no-figures"]) == 0
    row = json.loads((out / "report.json").read_text())["campaigns"][0]
    assert (row["pass_only"], row["pass_universe"]) == (2, 10)  # arcs 10 and 13 of op.py, not 0, 3, 9
    assert not (out / "figures").exists()


def test_html_reports(tmp_path, monkeypatch):
    from nnsmith_cov.report.html import html_report

    pkg = tmp_path / "site" / "reportpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("def f(x):\n    if x:\n        return 1\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    arcs = campaign("py", {"reportpkg/mod.py:2->3", "reportpkg/mod.py:3->-1", "gone/x.py:1->2"})
    note = html_report(arcs, tmp_path / "html-py")
    assert "coverage.py" in note and "1 files not installed" in note
    page = next((tmp_path / "html-py").glob("*mod_py.html")).read_text()
    assert '<p class="run"><span class="n"><a id="t3"' in page  # line 3 ran (arc 2->3)
    assert '<p class="mis show_mis"><span class="n"><a id="t4"' in page  # line 4 did not

    edges = campaign("e", {"src/a.cc:3#0", "src/a.cc:3#1", "src/b.cc:9#4"}, collector="llvm", unit="edge")
    html_report(edges, tmp_path / "html-e")
    assert "src/a.cc" in (tmp_path / "html-e" / "index.html").read_text()


def fake_binary_universe() -> Universe:
    """8 blocks of a prebuilt module: 0-3 in an optimizer file, 4-7 elsewhere."""
    files = ["onnxruntime/core/optimizer/fuse.cc", "onnxruntime/core/session/run.cc"]
    n = np.arange(8, dtype=np.int32)
    return Universe("binary", "block", {"libort.so": "b1d"}, files, (n >= 4).astype(np.int32), n * 16, n)


def test_composite_campaign_is_reported_per_collector(tmp_path):
    joined = Universe.join([fake_universe(), fake_binary_universe()])
    # python arcs 0-19, then binary blocks 20-27
    make_campaign(tmp_path / "c", [([0, 1, 20, 21], 1.0, ["Add"], False), ([2, 24], 3.0, ["Mul"], False)], 60, joined)
    make_campaign(tmp_path / "a", CAMPAIGN_A)
    with pytest.raises(ReportError, match="which part"):
        load_corpus(tmp_path / "c", "C")
    both = load_corpus(tmp_path / "c", "C", part="python")
    assert both.universe_ident == fake_universe().ident  # the part compares with python alone
    assert both.covered == {fake_universe().key(i) for i in (0, 1, 2)}
    assert both.pass_covered == both.covered and both.universe_size == 20
    binary = load_corpus(tmp_path / "c", "C", part="binary")
    assert (binary.collector, binary.unit, binary.universe_size) == ("binary", "block", 8)
    assert binary.covered == {fake_binary_universe().key(i) for i in (0, 1, 4)}
    assert len(binary.pass_covered) == 2  # the optimizer file's blocks, by the binary defaults
    assert binary.by_time is not None and binary.by_time.branches[-1] == 3

    out = tmp_path / "out"
    report = make_report([f"{tmp_path / 'c'}=C", f"{tmp_path / 'a'}=A"], out, ReportOptions(quiet=True))
    python_rows = json.loads((out / "python" / "report.json").read_text())["campaigns"]
    assert {r["label"] for r in python_rows} == {"C", "A"}  # A joins the python part only
    binary_rows = json.loads((out / "binary" / "report.json").read_text())["campaigns"]
    assert [(r["label"], r["total"]) for r in binary_rows] == [("C", 3)]
    assert {(r["part"], r["label"]) for r in report.rows} == {("python", "C"), ("python", "A"), ("binary", "C")}
    assert (out / "python" / "figures" / "venn.png").exists() and (out / "table.csv").exists()


def test_coverage_axis_names_the_unit_counted():
    assert plots.unit_word(["arc", "arc"]) == "branches"
    assert plots.unit_word(["block"]) == "blocks"
    assert plots.unit_word(["lcov-line", "line"]) == "lines"
    assert plots.unit_word(["block", "arc"]) == "branches"
