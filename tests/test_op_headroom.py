"""scripts/op_headroom.py: op rankings learnt on some campaigns, tried on a held-out one."""

from __future__ import annotations

import random

import pytest
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
