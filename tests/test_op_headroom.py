"""scripts/op_headroom.py: op rankings learnt on some campaigns, tried on a held-out one."""

from __future__ import annotations

import random

import pytest
from fake_campaign import FakeTest, write_campaign
from scripts_loader import script


@pytest.fixture(scope="module")
def headroom():
    with script("op_headroom") as module:
        yield module


OPS = [f"Op{i}" for i in range(20)]


def campaign(seed: int, hot: str | None, tests: int = 400) -> list:
    """Graphs of 4 ops drawn uniformly; a test adds 1 branch in 10, 4 in 10 with `hot` (if any)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(tests):
        ops = frozenset(rng.sample(OPS, 4))
        p = 0.4 if hot in ops else 0.1
        rows.append((ops, rng.choice([3, 5, 9]) if rng.random() < p else 0))
    return rows


def test_an_op_that_pays_everywhere_is_ranked_first_and_carries_over(headroom):
    campaigns = {f"c{s}": campaign(s, "Op7") for s in range(3)}
    assert headroom.ranked(headroom.op_scores(campaigns["c0"], 8))[0] == "Op7"
    rows = headroom.leave_one_out(campaigns, (1,), (1,), 8)
    assert [r.campaign for r in rows] == ["c0", "c1", "c2"]
    for r in rows:  # a fifth of the tests hold Op7, which pays four times as often
        assert 0.1 * r.tests < r.holding < 0.35 * r.tests
        assert r.mean_ratio > 2.0 and r.new_ratio > 2.0


def test_without_an_op_that_pays_nothing_carries_over(headroom):
    campaigns = {f"c{s}": campaign(10 + s, None) for s in range(3)}
    rows = headroom.leave_one_out(campaigns, (5,), (1,), 8)
    assert all(0.7 < r.mean_ratio < 1.3 for r in rows)


def test_an_op_that_pays_in_one_campaign_only_does_not_carry_over(headroom):
    campaigns = {"c0": campaign(20, "Op3"), "c1": campaign(21, "Op11"), "c2": campaign(22, "Op15")}
    rows = {r.campaign: r for r in headroom.leave_one_out(campaigns, (2,), (1,), 8)}
    # c0's ranking comes from c1 and c2 (Op11, Op15), which pay nothing in c0
    assert rows["c0"].mean_ratio < 1.3


def test_bad_input_is_one_line_and_a_nonzero_exit(headroom, tmp_path, capsys):
    assert headroom.main([str(tmp_path)]) == 2
    assert headroom.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("op_headroom: ") for line in err)


def test_a_campaign_whose_stats_are_missing_or_broken_is_refused_with_an_error_main_reports(headroom, tmp_path):
    # main catches OSError and ValueError per campaign: one line, exit 1, nothing half printed
    with pytest.raises(OSError):
        headroom.op_shares(tmp_path)
    for text in ("{not json", "[1, 2]", '{"op_tests": "Add"}', '{"op_tests": {"Add": "x"}}'):
        (tmp_path / "stats.json").write_text(text)
        with pytest.raises(ValueError):
            headroom.op_shares(tmp_path)
    (tmp_path / "stats.json").write_text('{"op_tests": {"Add": 3, "Relu": 1}}')
    assert headroom.op_shares(tmp_path) == {"Add": 0.75, "Relu": 0.25}
    (tmp_path / "stats.json").write_text('{"tests": 4}')
    assert headroom.op_shares(tmp_path) == {}


def choice_campaign(seed: int, tests: int = 1000) -> list:
    """Choice rows of one kind (opsets 11-20, one a test); opset 20 pays four times as often."""
    rng = random.Random(seed)
    rows = []
    for _ in range(tests):
        opset = rng.randint(11, 20)
        p = 0.4 if opset == 20 else 0.1
        rows.append((frozenset({f"opset={opset}"}), 3 if rng.random() < p else 0))
    return rows


def test_a_choice_that_pays_everywhere_is_named_first_on_every_held_out_campaign(headroom):
    campaigns = {f"c{s}": choice_campaign(s) for s in range(3)}
    for h in headroom.leave_one_out(campaigns, (1,), (1,), 8):
        assert h.top == ("opset=20",)
        assert 0.05 * h.tests < h.holding < 0.16 * h.tests and h.new_ratio > 2.0


def test_lifts_are_the_share_with_a_new_branch_against_all_tests_and_the_share_holding_it(headroom):
    rows = [(frozenset({"a"}), 2), (frozenset({"a"}), 0), (frozenset({"b"}), 0), (frozenset({"a", "b"}), 0)]
    lifts = headroom.lifts(rows)
    assert lifts["a"] == pytest.approx((1 / 3 / 0.25, 0.75, 2 - 0.75 * 2))
    assert lifts["b"] == pytest.approx((0.0, 0.5, 0 - 0.5 * 2))
    assert headroom.lifts([(frozenset({"a"}), 0)]) == {"a": (None, 1.0, 0.0)}


def write_headroom_campaign(folder, seed: int, tests: int = 200, steered: bool = False) -> None:
    """A campaign whose kept tests at opset 20 add a new branch five times as often; or, `steered`,
    one that drew opset 20 for half its tests and found it paying no more than the rest."""
    rows = []
    for test_id in range(tests):
        opset = 11 + (test_id + seed) % 10
        new = 3 if (test_id // 10) % (2 if opset == 20 else 10) == seed % 2 else 0
        if steered:
            opset = 20 if test_id % 2 else 11 + test_id % 10
            new = 3 if (test_id // 10) % 10 == 0 else 0
        rows.append(FakeTest(float(test_id), ["Add", "Relu"], opset, [test_id % 50], new))
    write_campaign(folder, rows)


def test_the_report_names_the_choice_that_pays_on_real_corpora(headroom, tmp_path, capsys):
    folders = [tmp_path / f"seed-{s}" / "feedback-off-var" for s in (1, 2, 3)]
    for s, folder in enumerate(folders):
        write_headroom_campaign(folder, s)
    steered = tmp_path / "seed-1" / "feedback-on"
    write_headroom_campaign(steered, 1, steered=True)
    argv = [str(f) for f in folders] + ["--after", "0", "--min-tests", "4", "--steered", str(steered)]
    assert headroom.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "| opset | " in line]
    # held out: the uniform campaigns only, each told opset 20 by the other two
    assert [row.split(" | ")[0] for row in rows] == [f"| seed-{s}/feedback-off-var" for s in (1, 2, 3)]
    assert all("| 20 |" in row for row in rows)
    lift_rows = {
        line.split(" | ")[0]: line.split(" | ")[1:] for line in out.splitlines() if line.startswith("| opset=")
    }
    assert len(lift_rows["| opset=20"]) == 4  # a column per campaign, the steered one last
    assert lift_rows["| opset=20"][-1].startswith("1.00x (50%")  # drawn for half its tests, paying as the rest
    assert float(lift_rows["| opset=20"][0].split("x")[0]) > 3
    assert "| dtype=f32 | 1.00x (100%, +0) |" in out
