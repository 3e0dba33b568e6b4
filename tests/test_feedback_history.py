"""scripts/feedback_history.py: the rows it reads, the pooled on / off-var figures, and its refusals."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from scripts_loader import script

HEADER = "seed,first,other,total,unique,reach,first_total,other_total,first_unique,other_unique"


@pytest.fixture(scope="module")
def history():
    with script("feedback_history") as module:
        yield module


def write_run(docs: Path, name: str, csv_text: str | None, title: str | None = None, table: bool = False) -> None:
    folder = docs / name
    folder.mkdir(parents=True)
    if csv_text is not None:
        (folder / "summary.csv").write_text(csv_text)
    if title is not None:
        (folder / "README.md").write_text(f"# {title}\n\nSome text.\n# not the title\n")
    if table:
        (folder / "table.csv").write_text("mode,branches\non,1\n")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    # ORT: three seeds all above 1 in total (sign test 3 of 3), one unreadable unique, an on-nomut pair.
    write_run(
        docs,
        "bench-feedback-ort-15min-x",
        HEADER + ",first_tests,other_tests\n"
        "1,on,off-var,1.2,4.0,0.25,120,100,40,10,300,200\n"
        "1,on,on-nomut,0.5,0.5,,120,240,5,10,300,300\n"
        "2,on,off-var,1.1,,,110,100,0,0,100,400\n"
        "3,on,off-var,1.05,2.0,0.6,105,100,20,10,abc,100\n",
        title="ORT, a lever (issue 27)",
    )
    # TVM's C++: no test columns, one seed below 1 and one above.
    write_run(
        docs,
        "bench-feedback-tvm-binary-30min-y",
        HEADER + "\n1,on,off-var,0.9,1.0,,90,100,10,10\n2,on,off-var,1.25,9.0,0.5,125,100,90,10\n",
    )
    write_run(docs, "bench-feedback-30min", None, table=True)
    return docs


def test_rows_are_read_with_titles_ratios_reach_and_tests(history, docs):
    rows, skipped = history.collect(docs)
    assert [(r.folder, r.seed, r.pair) for r in rows] == [
        ("bench-feedback-ort-15min-x", "1", "on / off-var"),
        ("bench-feedback-ort-15min-x", "1", "on / on-nomut"),
        ("bench-feedback-ort-15min-x", "2", "on / off-var"),
        ("bench-feedback-ort-15min-x", "3", "on / off-var"),
        ("bench-feedback-tvm-binary-30min-y", "1", "on / off-var"),
        ("bench-feedback-tvm-binary-30min-y", "2", "on / off-var"),
    ]
    ort1, nomut, ort2, ort3, tvm1, tvm2 = rows
    assert ort1.title == "ORT, a lever (issue 27)" and tvm1.title == ""
    assert (ort1.total, ort1.unique, ort1.reach, ort1.tests) == (1.2, 4.0, 0.25, 1.5)
    assert nomut.reach == math.inf and ort2.unique is None and ort2.tests == 0.25
    assert ort3.has_tests and ort3.tests is None  # a non-numeric test count
    assert not tvm1.has_tests and tvm1.tests is None
    assert [r.compiler for r in (ort1, tvm1)] == ["ort", "tvm-binary"]
    assert skipped == [("bench-feedback-30min", "older layout, not tabulated")]


def test_compiler_comes_from_the_folder_name(history):
    assert history.compiler_of("bench-feedback-ort-30min") == "ort"
    assert history.compiler_of("bench-feedback-tvm-binary-60min") == "tvm-binary"
    assert history.compiler_of("bench-feedback-tvm-30min") == "tvm-python"
    assert history.compiler_of("bench-feedback-tvm-30min-first-op") == "tvm-python"
    assert history.compiler_of("bench-feedback-30min") == "other"


def test_pooled_means_goals_and_sign_test(history, docs):
    rows, _ = history.collect(docs)
    ort = history.pool(rows, "ort")
    # on-nomut is not pooled; seed 2's empty unique is left out of the unique mean and goal only.
    assert ort.pairs == 3 and (ort.total_n, ort.unique_n, ort.reach_n) == (3, 2, 3)
    assert ort.total_gmean == pytest.approx((1.2 * 1.1 * 1.05) ** (1 / 3))
    assert ort.unique_gmean == pytest.approx(math.sqrt(4.0 * 2.0))
    assert (ort.total_met, ort.unique_met, ort.reach_met) == (1, 1, 1)  # 1.2x; 4x; 0.25
    assert (ort.above, ort.below) == (3, 0) and ort.p == pytest.approx(0.25)

    tvm = history.pool(rows, "tvm-binary")
    assert tvm.pairs == 2 and tvm.total_gmean == pytest.approx(math.sqrt(0.9 * 1.25))
    assert tvm.unique_gmean == pytest.approx(3.0)
    assert (tvm.total_met, tvm.unique_met, tvm.reach_met) == (1, 1, 1)  # reach 0.5 meets <= 0.5; never does not
    assert (tvm.above, tvm.below) == (1, 1) and tvm.p == pytest.approx(1.0)
    assert history.pool(rows, "tvm-python").pairs == 0


def test_sign_test_is_the_exact_two_sided_binomial(history):
    assert history.sign_test_p(3, 0) == pytest.approx(0.25) and history.sign_test_p(0, 3) == pytest.approx(0.25)
    assert history.sign_test_p(4, 1) == pytest.approx(0.375)  # 2 * (1 + 5) / 32
    assert history.sign_test_p(10, 0) == pytest.approx(2 / 2**10)
    assert history.sign_test_p(13, 15) == pytest.approx(0.851, abs=5e-4)  # ORT's 28 pairs (scipy's binomtest: 0.8506)
    assert history.sign_test_p(5, 5) == 1.0 and history.sign_test_p(0, 0) is None


def test_repeated_campaigns_count_once(history, tmp_path):
    docs = tmp_path / "docs"
    line = "1,on,off-var,1.2,4.0,0.25,120,100,40,10\n"
    write_run(docs, "bench-feedback-ort-a", HEADER + "\n" + line)
    write_run(docs, "bench-feedback-ort-b", HEADER + "\n" + line + "2,on,off-var,0.8,1.0,,80,100,5,5\n")
    rows, _ = history.collect(docs)
    assert history.pool(history.distinct(rows)[0], "ort").pairs == 2
    text = history.render(rows, [])
    assert "- bench-feedback-ort-b seed 1 (= bench-feedback-ort-a seed 1)" in text
    assert text.count("| [bench-feedback-ort-") == 3  # the table of every pair still shows all rows


def test_render_and_main_write_the_document(history, docs, tmp_path, capsys):
    assert history.main(["--docs", str(docs)]) == 0
    text = capsys.readouterr().out
    assert (
        "| [bench-feedback-ort-15min-x](bench-feedback-ort-15min-x/) | ORT, a lever (issue 27) | 1 | on / off-var "
        "| 1.20x | 4.00x | 0.25 | 1.50x |" in text
    )
    assert "| 2 | on / off-var | 1.10x | n/a | never | 0.25x |" in text
    assert "| 3 | on / off-var | 1.05x | 2.00x | 0.60 | n/a |" in text
    assert "| 1 | on / off-var | 0.90x | 1.00x | never |  |" in text  # no test columns: empty cell
    assert "different code versions over time" in text
    assert "| ort | 3 | 1.11x | 2.83x | 1 of 3 | 1 of 2 | 1 of 3 | 3 / 0 | 0.250 |" in text
    assert "| tvm-binary | 2 | 1.06x | 3.00x | 1 of 2 | 1 of 2 | 1 of 2 | 1 / 1 | 1.000 |" in text
    assert "| tvm-python |" not in text
    assert "Skipped: bench-feedback-30min (older layout, not tabulated)." in text

    out = tmp_path / "elsewhere" / "history.md"
    out.parent.mkdir()
    assert history.main(["--docs", str(docs), "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert "[bench-feedback-ort-15min-x](../docs/bench-feedback-ort-15min-x/)" in out.read_text()


def test_a_folder_without_any_csv_is_skipped_with_its_reason(history, tmp_path):
    write_run(tmp_path, "bench-feedback-ort-empty", None, title="nothing here")
    assert history.collect(tmp_path) == ([], [("bench-feedback-ort-empty", "no summary.csv")])


def test_missing_docs_folder_is_one_line_and_status_2(history, tmp_path, capsys):
    assert history.main(["--docs", str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and len(err.splitlines()) == 1
    assert err.startswith("feedback_history: ") and "nope" in err and "Traceback" not in err


def test_csv_without_total_is_one_line_and_status_2(history, tmp_path, capsys):
    write_run(tmp_path, "bench-feedback-ort-bad", "seed,first,other,unique,reach\n1,on,off-var,1.0,\n")
    assert history.main(["--docs", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("feedback_history: ")
    assert "summary.csv lacks column(s): total" in err


def test_script_run_as_a_program_exits_2_without_a_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, str(history_path()), "--docs", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def history_path() -> Path:
    return Path(__file__).resolve().parent.parent / "scripts" / "feedback_history.py"
