"""scripts/choice_frontier.py: when each campaign held the code only one choice leads to."""

from __future__ import annotations

import pytest
from fake_campaign import FakeTest, write_campaign
from scripts_loader import script


@pytest.fixture(scope="module")
def frontier_script():
    with script("choice_frontier") as module:
        yield module


def campaign(opset20_at: list[float]) -> list[FakeTest]:
    """Twenty tests at opsets 11-19 reaching branches 0-89; tests at opset 20, at the times given,
    reaching two branches each of 90-99 (and branch 0, which other tests reach too)."""
    tests = [FakeTest(float(i), ["Add"], 11 + i % 9, list(range(i * 4, i * 4 + 5))) for i in range(18)]
    for k, at in enumerate(opset20_at):
        tests.append(FakeTest(at, ["Add", "Relu"], 20, [0, 90 + (2 * k) % 10, 91 + (2 * k) % 10]))
    return sorted(tests, key=lambda t: t.elapsed_s)


def test_the_steered_campaign_holds_the_frontier_sooner(frontier_script, tmp_path, capsys):
    steered, uniform = tmp_path / "seed-1" / "feedback-on", tmp_path / "seed-1" / "feedback-off-var"
    write_campaign(steered, campaign([2.0, 3.0, 4.0, 5.0, 6.0]))
    write_campaign(uniform, campaign([10.0, 40.0, 80.0]))  # three tests: six of the ten branches
    reaches = [frontier_script.load_reach(f, ["opset=20", "op=Relu"]) for f in (steered, uniform)]
    front = frontier_script.frontier(reaches, "opset=20")
    assert sorted(front.nonzero()[0].tolist()) == list(range(90, 100))  # branch 0 is reached without it
    assert frontier_script.times_to(reaches[0].first_s, front) == [3.0, 4.0, 6.0]
    assert frontier_script.times_to(reaches[1].first_s, front) == [40.0, 80.0, None]
    assert reaches[0].holding["opset=20"] == 5 and reaches[0].kept == 23

    assert frontier_script.main([str(steered), str(uniform), "--choice", "opset=20"]) == 0
    out = capsys.readouterr().out
    assert "## opset=20: 10 branches only kept tests holding it reached" in out
    # 73 branches from the eighteen tests at 0-17 s, the run as long as its last test
    assert "| seed-1/feedback-on | 83 | 12.0% | 5 / 23 | 10 (100%) | 3 s (0.18) | 4 s (0.24) | 6 s (0.35) |" in out
    assert "| seed-1/feedback-off-var | 79 | 12.7% | 3 / 21 | 6 (60%) | 40 s (0.50) | 80 s (1.00) | never |" in out


def test_bad_input_is_one_line_and_a_nonzero_exit(frontier_script, tmp_path, capsys):
    write_campaign(tmp_path / "a", campaign([1.0]))
    write_campaign(tmp_path / "b", campaign([1.0]), branches=120)  # another build: another universe
    assert frontier_script.main([str(tmp_path / "a"), "--choice", "colour=red"]) == 2
    assert frontier_script.main([str(tmp_path / "a"), str(tmp_path / "missing"), "--choice", "opset=20"]) == 1
    assert frontier_script.main([str(tmp_path / "a"), str(tmp_path / "b"), "--choice", "opset=20"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("choice_frontier: ") for line in err)
    assert "KIND=VALUE" in err[0] and "different code" in err[2]


def test_the_balance_sums_the_disjoint_frontiers_of_one_kind(frontier_script, tmp_path, capsys):
    steered, uniform = tmp_path / "on", tmp_path / "off"
    write_campaign(steered, campaign([2.0, 3.0, 4.0, 5.0, 6.0]))
    write_campaign(uniform, campaign([10.0, 40.0, 80.0]))
    argv = [str(steered), str(uniform), "--choice", "opset=20", "--choice", "opset=11", "--choice", "op=Relu"]
    assert frontier_script.main(argv) == 0
    out = capsys.readouterr().out.split("## What each campaign holds of each frontier")[1]
    # opset 11's tests (0 and 9) reach 0-4 and 36-40; 0, 4, 36 and 40 are reached at other opsets too
    assert "| opset=20 | 10 | 10 | 6 |" in out and "| opset=11 | 6 | 6 | 6 |" in out
    assert "| op=Relu | 10 | 10 | 6 |" in out  # only the opset 20 tests hold Relu
    assert "| opset: the 2 asked | 16 | 16 | 12 |" in out and "op: the" not in out
