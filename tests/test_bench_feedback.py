"""scripts/bench_feedback.py: its arguments, its ratios and tables, and two tiny campaigns through it."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from scripts_loader import script


@pytest.fixture(scope="module")
def bench():
    with script("bench_feedback") as module:
        yield module


def test_seeds_and_modes_are_parsed_and_bad_ones_refused(bench, capsys):
    assert bench.parse_seeds("1,2") == [1, 2] and bench.parse_seeds("1-3,2,7") == [1, 2, 3, 7]
    assert bench.parse_modes("on,off-var,on-nomut") == ["on", "off-var", "on-nomut"]
    args = bench.parse_args(["--seeds", "1,2", "--modes", "on,off-var", "--jobs", "0"])
    assert args.seeds == [1, 2] and 1 <= args.jobs <= 4 and args.time == "30m"
    assert bench.parse_args(["--seed", "5", "--modes", "on,off"]).seeds == [5]
    for bad in (
        ["--seeds", "x"],
        ["--seeds", "2-a"],
        ["--modes", "on"],
        ["--modes", "on,on"],
        ["--modes", "on,fast"],
        ["--jobs", "-1"],
        ["--fuzz-args", "'unclosed"],
    ):
        assert bench.main([*bad, "--reuse", "--out", "/nonexistent/never"]) == 2, bad
        err = capsys.readouterr().err.strip()
        assert err.startswith("bench_feedback: ") and len(err.splitlines()) == 1, (bad, err)


def test_a_missing_campaign_is_a_one_line_error(bench, tmp_path, capsys):
    assert bench.main(["--reuse", "--out", str(tmp_path), "--modes", "on,off-var"]) == 2
    assert "no campaign in" in capsys.readouterr().err


def test_ratios_compare_the_first_mode_with_each_other(bench):
    on = bench.Run(frozenset("abcdefgh"), (1.0, 5.0, 10.0), (4, 6, 8))
    off = bench.Run(frozenset("abcdex"), (2.0, 8.0, 10.0), (3, 5, 6))
    nomut = bench.Run(frozenset("abcdefgh"), (1.0, 10.0), (7, 8))
    rows = bench.ratios(1, {"on": on, "off-var": off, "on-nomut": nomut}, "on")
    by = {r.other: r for r in rows}
    # total 8 / 6; unique: nothing only `on` reached (on-nomut has all of it) vs "x" only off-var
    assert by["off-var"].total == pytest.approx(8 / 6) and by["off-var"].unique == 0.0
    assert by["off-var"].reach == pytest.approx(0.5)  # on had 6 branches at 5 s of off-var's 10 s
    assert by["on-nomut"].reach == 1.0 and by["on-nomut"].unique is None  # neither has any of its own
    pair = bench.ratios(2, {"on": on, "off-var": off}, "on")[0]
    assert pair.unique == 3.0 and pair.first_unique == 3 and pair.other_unique == 1  # f, g, h vs x
    assert pair.met() == {"total": True, "unique": True, "reach": True}
    never = bench.ratios(3, {"on": off, "off-var": on}, "on")[0]
    assert never.reach is None and never.met()["reach"] is False
    alone = bench.ratios(4, {"on": on, "off": bench.Run(frozenset(), (), ())}, "on")[0]
    assert alone.total is None and alone.unique == math.inf and alone.reach is None


def test_headroom_pools_every_campaign_and_seeds_of_one_mode_are_compared(bench, tmp_path):
    per_seed = {
        1: {"on": bench.Run(frozenset("abcd"), (), ()), "off-var": bench.Run(frozenset("abce"), (), ())},
        2: {"on": bench.Run(frozenset("abf"), (), ()), "off-var": bench.Run(frozenset("ab"), (), ())},
    }
    room = bench.headroom(per_seed, "on")
    # the pool is a-f: six branches, whichever seed or mode reached them
    assert [(r.seed, r.other, r.pool) for r in room] == [(1, "off-var", 6), (2, "off-var", 6)]
    assert room[0].first_share == pytest.approx(4 / 6) and room[0].other_share == pytest.approx(4 / 6)
    assert room[0].ceiling == pytest.approx(6 / 4) and room[1].ceiling == pytest.approx(3.0)
    spread = {r.mode: r for r in bench.seed_spread(per_seed)}
    # on: seed 1 alone has c, d; seed 2 alone has f
    assert (spread["on"].seed_a, spread["on"].seed_b) == (1, 2)
    assert spread["on"].unique == 2.0 and spread["on"].total == pytest.approx(4 / 3)
    assert spread["off-var"].unique == math.inf and (spread["off-var"].a_unique, spread["off-var"].b_unique) == (2, 0)
    assert bench.seed_spread({1: per_seed[1]}) == []  # one seed: nothing to compare
    bench.write_tables(tmp_path, bench.ratios(1, per_seed[1], "on"), bench.Yardsticks(room, list(spread.values())))
    md = (tmp_path / "summary.md").read_text()
    assert "Pool: 6 branches" in md and "| 2 | on / off-var | 0.500 / 0.333 | 3.00x | 1.15x |" in md
    assert "| off-var | 1 / 2 | 2.00x | inf | 2 / 0 |" in md
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["headroom"][1]["ceiling"] == 3.0 and data["seed_spread"][1]["unique"] is None


def test_unique_branches_are_credited_to_the_entry_that_first_reached_them(bench, tmp_path):
    wanted = np.zeros(10, dtype=bool)
    wanted[[1, 2, 3, 4, 5, 6]] = True
    entries = [  # (elapsed, test, status, origin, branch indices), in the order the campaign found them
        (1.0, 0, "pass", "fresh", np.array([0, 1, 2, 3, 4])),  # first to reach 1-4
        (2.0, 3, "finding", "extend", np.array([1, 2, 5, 12])),  # 1 and 2 are 0's already; 12 lies outside the map
        (3.0, 5, "pass", "grow", np.array([0, 7])),  # nothing wanted
        (4.0, 6, "pass", "fresh", np.array([5, 6])),  # 5 is 3's
    ]
    finds = bench.attribute(entries, wanted)
    assert [(f.test, f.branches, f.status) for f in finds] == [(0, 4, "pass"), (3, 1, "finding"), (6, 1, "pass")]
    assert wanted.sum() == 6  # the caller's mask is left as it was
    # tests per origin: the scheduler's children per arm, the rest fresh; then per origin [tests,
    # corpus entries, unique branches first reached, the entries' ms, their new branches]
    ran = bench.tests_by_origin(10, {"grow": [3, 2], "extend": [1, 1], "attr": [0, 0]})
    assert ran == {"fresh": 6, "grow": 3, "extend": 1} and bench.tests_by_origin(4, None) == {"fresh": 4}
    # the scheduler's hedge: its tests count as "uniform", out of the fresh ones
    assert bench.tests_by_origin(10, {"grow": [3, 2]}, [4, 1]) == {"fresh": 3, "grow": 3, "uniform": 4}
    kept = {"fresh": [2, 180.0, 9], "extend": [1, 150.0, 2], "grow": [1, 95.04, 0]}
    counts = {o: [n, *kept[o]] for o, n in ran.items()}
    origins = bench.by_origin(finds, counts)
    assert origins == {"extend": [1, 1, 1, 150.0, 2], "fresh": [6, 2, 5, 180.0, 9], "grow": [3, 1, 0, 95.0, 0]}
    # an entry's cost: its generation and every stage; a record without gen_ms costs its stages
    assert bench.entry_cost({"search": 4.5, "ort.compile": 10.0}, {"gen_ms": 30.5}) == 45.0
    assert bench.entry_cost({"search": 4.5}, {}) == 4.5 and bench.entry_cost({}, {"gen_ms": None}) == 0.0
    assert bench.origin_of(None, {}) == "fresh" and bench.origin_of(4, {"mutation": None}) == "grow"
    assert bench.origin_of(4, {"mutation": {"kind": "extend", "at": 3}}) == "extend"
    assert bench.origin_of(None, {"hedged": True}) == "uniform" and bench.origin_of(None, {"hedged": 1}) == "fresh"
    big = bench.Find(900, 12.0, 7, "finding")
    small = [bench.Find(10, 20.0 + i, 8 + i, "pass") for i in range(6)]
    finds = [
        bench.Finds(
            1, "on", 300, 30, small[0], 50, {"extend": [30, 20, 120, 3000.0, 45], "fresh": [90, 60, 180, 4800.0, 240]}
        ),
        bench.Finds(1, "off-var", 1000, 20, big, 960, {"fresh": [120, 90, 1000, 0.0, 0]}),
    ]
    (trim,) = bench.trimmed(finds, "on")
    # 300 / 1000 unique (0.30x); without each side's 5 largest finds 250 / 40 (6.25x)
    assert (trim.first_rest, trim.other_rest) == (250, 40) and trim.unique == pytest.approx(6.25)
    rows = bench.ratios(
        1, {"on": bench.Run(frozenset("ab"), (), ()), "off-var": bench.Run(frozenset("ac"), (), ())}, "on"
    )
    bench.write_tables(tmp_path, rows, bench.Yardsticks(finds=finds, trims=[trim]))
    md = (tmp_path / "summary.md").read_text()
    assert "| 1 | off-var | 1000 | 20 | 900 (test 7 at 12 s, finding) | 960 |" in md
    assert "| 1 | on / off-var | 6.25x | 250 / 40 |" in md
    # per origin also ms per entry (3000 / 20) and new branches per second of them (45 / 3 s)
    assert "| 1 | on | extend | 30 (25%) | 20 (25%) | 120 (40%) | 150 | 15.0 |" in md
    assert "| 1 | on | fresh | 90 (75%) | 60 (75%) | 180 (60%) | 80 | 50.0 |" in md
    assert "| 1 | off-var | fresh | 120 (100%) | 90 (100%) | 1000 (100%) | 0 | - |" in md
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["finds"][1]["largest"]["test"] == 7 and data["trimmed_unique"][0]["unique"] == 6.25
    assert data["finds"][0]["origins"]["extend"] == [30, 20, 120, 3000.0, 45]
    assert data["origin_fields"] == ["tests", "entries", "unique", "ms", "new"]


def test_tables_list_each_seed_and_the_geometric_mean(bench, tmp_path):
    a = bench.Run(frozenset("abcd"), (1.0, 4.0), (2, 4), tests=30)
    b = bench.Run(frozenset("ab"), (1.0, 4.0), (1, 2), tests=20)
    rows = bench.ratios(1, {"on": a, "off-var": b}, "on") + bench.ratios(2, {"on": b, "off-var": a}, "on")
    bench.write_tables(tmp_path, rows)
    md = (tmp_path / "summary.md").read_text()
    assert "| 1 | on / off-var | 2.00x | inf |" in md and "| geomean | on / off-var | 1.00x |" in md
    assert "| 4 / 2 | 2 / 0 | 30 / 20 | total, unique, reach |" in md  # branches, unique, tests
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [r["seed"] for r in data["ratios"]] == [1, 2] and data["ratios"][0]["unique"] is None
    assert data["ratios"][0]["met"]["total"] is True and data["goals"]["unique"] == 3.0
    lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert lines[0].startswith("seed,first,other,total") and len(lines) == 3
    assert bench.geomean([2.0, 0.5, None, math.inf]) == pytest.approx(1.0) and bench.geomean([None]) is None


def test_over_the_seeds_a_pair_gets_its_effect_size_and_the_smallest_p_its_seeds_allow(bench, tmp_path):
    def pair(seed: int, on: int, off: int):
        return bench.Ratio(seed, "on", "off-var", on / off, None, None, on, off, 0, 0)

    rows = [pair(1, 12, 10), pair(2, 13, 11), pair(3, 14, 9)]  # every `on` above every `off-var`
    (over,) = bench.across_seeds(rows)
    assert over.seeds == 3 and over.a12 == 1.0 and over.p == pytest.approx(0.1) and over.min_p == pytest.approx(0.1)
    (mixed,) = bench.across_seeds([pair(1, 10, 12), pair(2, 11, 11), pair(3, 14, 9)])
    assert mixed.a12 == pytest.approx((0 + 0 + 1 + 0 + 0.5 + 1 + 1 + 1 + 1) / 9) and mixed.p > over.p
    two = bench.across_seeds(rows[:2])[0]
    assert two.min_p == pytest.approx(1 / 3) and two.p == pytest.approx(1 / 3)  # two seeds: never below 0.33
    assert bench.across_seeds(rows[:1]) == []  # one seed: nothing to test
    bench.write_tables(tmp_path, rows, bench.Yardsticks(across=[over]))
    assert "| on / off-var | 3 | 1.00 | 0.10 | 0.10 |" in (tmp_path / "summary.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["across_seeds"][0]["a12"] == 1.0


@pytest.mark.slow
def test_two_tiny_campaigns_run_in_parallel_and_are_reported(bench, tmp_path, monkeypatch, capsys):
    tests_dir = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "bench"
    flags = ["--backends", "fake_coverage:SigmoidPays", "--collector", "fake_coverage:OpCollector"]
    flags += ["--modes", "on,off-var", "--seeds", "1", "--tests", "6", "--jobs", "2", "--out", str(out)]
    flags += ["--fuzz-args", "--nodes 3 --ops Add Relu Sigmoid --search none --no-support"]
    assert bench.main(flags) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "ratios (on / off-var): total" in printed and "| 1 | on / off-var |" in printed
    data = json.loads((out / "summary.json").read_text())
    unique = {data["ratios"][0]["first"]: data["ratios"][0]["first_unique"]}
    unique[data["ratios"][0]["other"]] = data["ratios"][0]["other_unique"]
    finds = {f["mode"]: f for f in data["finds"]}
    # every unique branch is credited to one corpus entry of its campaign
    assert {m: f["unique"] for m, f in finds.items()} == unique
    for f in finds.values():
        assert (f["tests"] > 0) == (f["unique"] > 0) and f["top"] <= f["unique"]
        # every corpus entry has one origin, and the unique branches are split among them
        assert sum(o[2] for o in f["origins"].values()) == f["unique"]
        assert sum(o[0] for o in f["origins"].values()) == 6 and sum(o[1] for o in f["origins"].values()) > 0
        # the kept tests took time (generation at least) and the first of them added branches
        assert all(o[3] > 0 for o in f["origins"].values() if o[1]) and sum(o[4] for o in f["origins"].values()) > 0
        assert f["mode"] == "on" or set(f["origins"]) == {"fresh"}  # off-var never grows or mutates
        assert f["largest"] is None or f["largest"]["branches"] <= f["top"]
    for name in ("summary.md", "summary.csv", "summary.json", "coverage-time.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "seed-1" / "report" / "figures" / "coverage-time.png").exists()
    assert (out / "seed-1" / "feedback-on.log").exists() and (out / "seed-1" / "feedback-off-var" / "lmdb").exists()
    # a second run into the same folder refuses instead of mixing campaigns; --reuse reports again
    assert bench.main(flags) == 2 and "exists" in capsys.readouterr().err
    assert bench.main([*flags, "--reuse", "--no-report"]) == 0
    # --fill runs only what is missing: a lever's `on` against the off-var kept from before
    kept = out / "seed-1" / "feedback-off-var" / "lmdb" / "data.mdb"
    before = (kept.stat().st_mtime_ns, kept.read_bytes())
    shutil.rmtree(out / "seed-1" / "feedback-on")
    assert bench.main([*flags, "--fill", "--no-report"]) == 0
    assert (out / "seed-1" / "feedback-on" / "lmdb" / "data.mdb").exists()
    assert (kept.stat().st_mtime_ns, kept.read_bytes()) == before
