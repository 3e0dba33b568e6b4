"""The `nnsmith-cov` command: generate's files, determinism, and one-line errors."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import is_op

FILES = ("model.onnx", "graph.json", "graph.txt")


def test_generate_writes_files_and_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["generate", "--seed", "5", "--nodes", "8", "-o", str(a)]) == 0
    assert main(["generate", "--seed", "5", "--nodes", "8", "-o", str(b)]) == 0
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    graph = GraphIR.loads((a / "graph.json").read_text(), is_op)
    assert len(graph.insts) == 8
    model = onnx.load(a / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == [f"i{v}" for v in graph.inputs]


def test_generate_respects_ops_and_no_binning(tmp_path):
    assert main(["generate", "--seed", "1", "--nodes", "4", "--ops", "add", "Relu", "--no-binning", "-o",
                 str(tmp_path)]) == 0  # fmt: skip
    graph = GraphIR.loads((tmp_path / "graph.json").read_text(), is_op)
    assert set(graph.op_counts()) <= {"Add", "Relu"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "-o", "x"], "--seed"),
        (["generate", "--seed", "abc", "-o", "x"], "not an integer"),
        (["generate", "--seed", "-3", "-o", "x"], "seed must be"),
        (["generate", "--seed", "1", "--nodes", "0", "-o", "x"], "must be in 1..200"),
        (["generate", "--seed", "1", "--nodes", "201", "-o", "x"], "must be in 1..200"),
        (["generate", "--seed", "1", "--ops", "Nope", "-o", "x"], "unknown operator"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_line_error(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nnsmith-cov: error:")
    assert message in err


def test_unwritable_output_is_one_line_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["generate", "--seed", "1", "-o", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err


def test_console_entry_point_runs_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "nnsmith_cov.cli", "generate", "--seed", "zz", "-o", "x"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_batch_summarizes(tmp_path, capsys):
    assert main(["batch", "--count", "5", "--nodes", "5", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "median" in out
    assert len(list(tmp_path.iterdir())) == 5


def test_ops_lists_the_library(capsys):
    assert main(["ops"]) == 0
    assert "vulnerable" in capsys.readouterr().out


def test_generate_writes_values_and_oracle(tmp_path):
    from nnsmith_cov.materialize.model_dir import load_npz

    assert main(["generate", "--seed", "5", "--nodes", "8", "-o", str(tmp_path)]) == 0
    graph = GraphIR.loads((tmp_path / "graph.json").read_text(), is_op)
    values = load_npz(tmp_path / "inputs.npz")
    assert set(values) == {f"i{v}" for v in graph.inputs} | {f"w{v}" for v in graph.weights}
    oracle = load_npz(tmp_path / "oracle.npz")
    assert set(oracle) == {f"o{v}" for v in graph.outputs}
    for v in graph.outputs:
        assert oracle[f"o{v}"].shape == graph.types[v].shape


def test_failed_search_writes_no_oracle(tmp_path, capsys):
    # Log of a few hundred values drawn once around 0: some are negative.
    (tmp_path / "oracle.npz").write_bytes(b"stale")
    argv = ["generate", "--seed", "3", "--ops", "Log", "--nodes", "2", "--search", "none", "-o", str(tmp_path)]
    assert main(argv) == 2  # a folder holding a model is replaced only with --force
    assert "--force" in capsys.readouterr().err and (tmp_path / "oracle.npz").read_bytes() == b"stale"
    argv.append("--force")
    assert main(argv) == 1
    assert not (tmp_path / "oracle.npz").exists()
    assert (tmp_path / "inputs.npz").exists()
    assert "still produces NaN/Inf" in capsys.readouterr().err


def test_generate_says_when_it_built_fewer_operators_than_asked(tmp_path, capsys):
    # a small solver budget: the generator keeps what fits, and says so
    argv = ["generate", "--seed", "1", "--nodes", "30", "--solver-work", "20000", "--search", "none", "-o"]
    main([*argv, str(tmp_path)])
    graph = GraphIR.loads((tmp_path / "graph.json").read_text(), is_op)
    assert len(graph.insts) < 30
    lines = [x for x in capsys.readouterr().err.splitlines() if "operators asked for" in x]
    assert lines == [f"generated {len(graph.insts)} of the 30 operators asked for (the solver's work budget or the "
                     "insertion tries ran out; see --solver-work)"]  # fmt: skip


def test_resume_restores_what_fuzz_stored(tmp_path):
    """The checks of a stored config accept what `fuzz` writes, and give back its settings."""
    import argparse
    import json

    from nnsmith_cov.campaign.fuzz_loop import FuzzConfig
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.cli_checks import restore_fuzz_args
    from nnsmith_cov.gen.generator import GenConfig
    from nnsmith_cov.ops import select_ops

    gen = GenConfig(nodes=7, ops=select_ops(["Add", "Relu"]), opsets=(13, 17))
    settings = CaseSettings(["ort", "mymod:Backend"], rtol=0.5, timeout_s=9.0)
    cfg = FuzzConfig(gen, settings, seed=11, max_tests=40, feedback=True, collector="python", dynamic_arm=True)
    (tmp_path / "config.json").write_text(json.dumps({"schema": 1} | cfg.to_json() | {"versions": {}}))
    args = argparse.Namespace(resume=tmp_path, time=None, tests=None, plugin=["mymod:Backend"])
    restore_fuzz_args(args)
    assert (args.nodes, args.seed, args.tests, args.time) == (7, 11, 40, None)
    assert args.backends == ["ort", "mymod:Backend"] and args.rtol == 0.5 and args.timeout_s == 9.0
    assert args.opsets == [13, 17] and args.dynamic is None and args.collector == "python"
    assert sorted(args.ops) == ["Add", "Relu"] and args.feedback == "on" and args.output == tmp_path


@pytest.mark.parametrize("feedback", [True, False])
def test_resume_gives_back_the_flags_that_made_the_campaign(tmp_path, feedback):
    """The restored flags build the stored config again, the feedback and off-var knobs included
    (a resumed campaign once lost its --grow-max cap and off-var its --vary-size)."""
    import argparse
    import json

    from nnsmith_cov.campaign.fuzz_loop import FuzzConfig
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.cli_checks import restore_fuzz_args
    from nnsmith_cov.commands.fuzz import _fuzz_config, _Plan
    from nnsmith_cov.gen.generator import GenConfig
    from nnsmith_cov.ops import select_ops

    gen = GenConfig(nodes=7, ops=select_ops(["Add", "Relu"]), opsets=(13, 17))
    # without feedback `fuzz` stores hedge 0: nothing is hedged
    knobs = dict(mutation=True, grow_max=(12, 20), hedge=0.3) if feedback else dict(vary_size=True, hedge=0.0)
    cfg = FuzzConfig(gen, CaseSettings(["ort"]), seed=5, max_tests=9, feedback=feedback, collector="python", **knobs)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_json() | {"versions": {}}))
    args = argparse.Namespace(resume=tmp_path, time=None, tests=None, plugin=[], cov_targets=[], pass_filter=None)
    restore_fuzz_args(args)
    args.time = None
    again = _fuzz_config(args, _Plan(True, "python", feedback), gen, cfg.settings)
    assert again.to_json() == cfg.to_json()


def test_resume_takes_only_the_flags_that_do_not_change_the_campaign(tmp_path):
    from nnsmith_cov.cli import CliError
    from nnsmith_cov.cli_checks import check_resume_flags

    ok = ["fuzz", "--resume", "x", "--time", "1m", "--tests", "3", "--workers", "2", "--plugin", "a:B"]
    check_resume_flags(ok + ["--no-support", "--status-every", "5"])
    with pytest.raises(CliError, match="does not take --backends, --seed"):
        check_resume_flags([*ok, "--seed", "0", "--backends", "ort"])  # even at their defaults


def test_a_plug_in_backend_of_a_bundle_runs_only_when_named(tmp_path):
    import json

    import numpy as np

    from nnsmith_cov.gen.generator import GenConfig, generate
    from nnsmith_cov.materialize.model_dir import leaf_names
    from nnsmith_cov.ops import select_ops
    from nnsmith_cov.oracle.bundle import BundleError, read_bundle

    graph = generate(GenConfig(nodes=3, ops=select_ops(["Add", "Relu"])), 2).graph
    (tmp_path / "graph.json").write_text(graph.dumps())
    np.savez(tmp_path / "inputs.npz", **{n: np.zeros(graph.types[v].shape) for v, n in leaf_names(graph).items()})
    meta = {"schema": 1, "symptom": "crash", "backend": "mymod:Backend", "stage": "compile", "opt": "opt",
            "signature": "s", "seed": 2}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="--plugin mymod:Backend"):
        read_bundle(tmp_path)
    assert read_bundle(tmp_path, ["mymod:Backend"]).meta["backend"] == "mymod:Backend"  # nothing imported yet


def test_output_folders_that_hold_nothing_of_ours_are_taken(tmp_path):
    from nnsmith_cov.cli_checks import check_model_folder, check_new_campaign

    (tmp_path / "notes.txt").write_text("mine")
    check_new_campaign(tmp_path, "-o")
    check_new_campaign(tmp_path / "new" / "deeper", "-o")
    (tmp_path / "graph.json").write_text("{}")
    check_model_folder(tmp_path, force=True)


# -- the flag table --------------------------------------------------------------------------


def _subparsers() -> dict:
    import argparse

    from nnsmith_cov.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _action(parser, flag):
    for a in parser._actions:
        if (flag.positional and a.dest == flag.names[0]) or (
            a.option_strings and tuple(a.option_strings) == flag.names
        ):
            return a
    return None


def test_every_flag_of_the_table_reaches_the_parsers_that_list_it():
    from nnsmith_cov.flags import FLAGS

    parsers = _subparsers()
    for flag in FLAGS:
        for command in flag.commands:
            action = _action(parsers[command], flag)
            assert action is not None, f"{command} lacks {flag.names}"
            default, help_text, required = flag.use(command)
            assert action.dest == flag.key and action.help == help_text, (command, flag.names)
            assert action.default == (False if flag.switch else default), (command, flag.names)
            groups = [g for g in parsers[command]._mutually_exclusive_groups if action in g._group_actions]
            assert all(g.required for g in groups) and (not groups or flag.exclusive)
            if not flag.positional:  # (one of a required group is required; none of it alone)
                assert action.required == (required and not groups), (command, flag.names)
            if flag.value is not None:
                assert action.type is flag.value, (command, flag.names)
            assert action.choices == flag.choices, (command, flag.names)
            assert action.nargs == (0 if flag.switch else flag.nargs), (command, flag.names)


# Commands that still add their own flags (not yet rows of the table).
OWN_FLAGS: set[str] = set()


def test_the_parsers_take_no_flag_outside_the_table():
    from nnsmith_cov.flags import flags_of

    for command, parser in _subparsers().items():
        if command in OWN_FLAGS:
            continue
        rows = flags_of(command)
        own = {a.dest for a in parser._actions if a.dest != "help"}
        assert own == {f.key for f in rows}, command
        assert len({f.names for f in rows}) == len(rows), f"{command} takes a flag twice"


def test_durations_carry_their_unit_in_the_name_or_the_value():
    from nnsmith_cov.flag_values import duration
    from nnsmith_cov.flags import FLAGS

    timed = [f for f in FLAGS if f.unit in ("s", "ms")]
    assert {"--time", "--timeout-s", "--timeout-ms", "--status-every", "--search-budget-ms"} <= {
        n for f in timed for n in f.names
    }
    for flag in timed:
        in_name = all(n.endswith(f"-{flag.unit}") for n in flag.names)
        assert in_name or (flag.value is duration and duration("5m") == 300), flag.names


def test_choices_kept_beside_their_owners_agree():
    """Rows whose choices are spelled in the table (to keep it free of heavy imports) list
    what their owners take."""
    from nnsmith_cov.baselines import FEEDBACK_ARMS
    from nnsmith_cov.flags import FLAGS
    from nnsmith_cov.replay.engine import CLOCKS
    from nnsmith_cov.search.gradient import METHODS

    choices = {f.names[0]: f.choices for f in FLAGS}
    assert choices["--clock"] == CLOCKS and choices["--search"] == METHODS
    assert set(choices["--generator"]) == set(FEEDBACK_ARMS)


def test_resume_takes_the_rows_marked_for_it():
    from nnsmith_cov.cli_checks import given_flags
    from nnsmith_cov.flags import RESUME_FLAGS

    assert set(RESUME_FLAGS) == {"resume", "time", "tests", "workers", "cluster", "worker_mem_mb", "status_every"} | {
        "support_cache",
        "no_support",
        "plugin",
        "max_corpus_mb",
        "recycle_after",
        "worker_max_rss_mb",
        "gen_process",
        "coverage_timeout",
        "calibration_share",
    }
    given = given_flags(
        ["fuzz", "--resume", "x", "--time", "5m", "--workers", "2", "--plugin", "a:B", "--no-su"], "fuzz"
    )
    assert given == {"resume", "time", "workers", "plugin", "no_support"}  # (abbreviations too)


def test_subcommands_are_registered_from_one_list(capsys):
    from nnsmith_cov.cli import COMMANDS

    names = list(_subparsers())
    assert len(names) >= len(COMMANDS) and all(callable(m.add_parser) and callable(m.main) for m in COMMANDS)
    for name in ("generate", "batch", "fuzz", "coverage", "repro", "ops", "report", "replay", "reduce", "triage"):
        assert name in names
        with pytest.raises(SystemExit) as done:  # each one's help renders (argparse formats every row)
            main([name, "--help"])
        assert done.value.code == 0 and f"nnsmith-cov {name}" in capsys.readouterr().out


def test_command_modules_import_nothing_private_from_cli():
    import ast
    from pathlib import Path

    import nnsmith_cov

    root = Path(nnsmith_cov.__file__).parent
    for path in [*root.rglob("command*.py"), *(root / "commands").glob("*.py"), root / "cli_checks.py"]:
        tree = ast.parse(path.read_text())
        named = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert "nnsmith_cov.cli" not in named, f"{path.relative_to(root)} imports from cli"


# -- config.json: FuzzConfig.to_json / from_json ------------------------------------------------


def _rich_config():
    """A FuzzConfig with every field away from its default."""
    from nnsmith_cov.campaign.fuzz_config import FuzzConfig
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.gen.generator import GenConfig
    from nnsmith_cov.ops import select_ops

    gen = GenConfig(
        nodes=7,
        ops=select_ops(["Add", "Relu", "Conv2d"]),
        binning=False,
        max_elems=4096,
        timeout_ms=1234,
        work_budget=777,
        opsets=(13, 17),
        roundtrip_prob=0.25,
    )
    settings = CaseSettings(
        ["ort", "tvm"],
        rtol=0.5,
        atol=0.25,
        half_rtol=0.125,
        half_atol=0.0625,
        timeout_s=9.0,
        search={"method": "sampling", "max_iters": 32, "budget_ms": 100.0},
        localize=False,
    )
    return FuzzConfig(
        gen,
        settings,
        seed=11,
        time_s=90.0,
        max_tests=40,
        feedback=True,
        collector="python",
        cov_targets=["tvm"],
        pass_filters=["tvm/relax/"],
        generator="graphfuzzer",
        dynamic_arm=True,
        mutation=True,
        hedge=0.125,
    )


def test_config_json_round_trips():
    import json

    from nnsmith_cov.campaign.fuzz_config import CONFIG_SCHEMA, FuzzConfig

    cfg = _rich_config()
    stored = json.loads(json.dumps(cfg.to_json() | {"versions": {"torch": "x"}, "coverage": None}))
    assert stored["schema"] == CONFIG_SCHEMA
    back = FuzzConfig.from_json(stored)
    assert back.to_json() == cfg.to_json()
    assert [o.name() for o in back.gen.ops] == sorted(o.name() for o in cfg.gen.ops)  # as a resume always had them
    assert (back.dynamic_arm, back.roundtrip_arm, back.gen.roundtrip_prob) == (True, False, 0.25)
    assert back.settings == cfg.settings and back.gen.opsets == (13, 17)


def test_a_schema_1_config_is_migrated_with_what_its_absent_keys_meant():
    from nnsmith_cov.campaign.fuzz_config import FuzzConfig

    old = _rich_config().to_json() | {"schema": 1}
    for key in ("mutation", "rtol", "time_s", "cov_targets", "pass_filters"):
        del old[key]
    for key in ("name", "work_budget", "opsets", "dynamic_prob", "roundtrip_prob"):
        del old["generator"][key]
    cfg = FuzzConfig.from_json(old)
    assert (cfg.mutation, cfg.settings.rtol, cfg.time_s, cfg.cov_targets, cfg.pass_filters) == (
        False,
        0.01,
        None,
        [],
        None,
    )
    assert (cfg.generator, cfg.gen.work_budget, cfg.gen.opsets) == ("nnsmith", 10_000_000, (20,))
    assert not cfg.dynamic_arm and cfg.gen.dynamic_prob == 0.0
    del old["schema"]  # (files from before the schema key are schema 1)
    assert FuzzConfig.from_json(old).to_json() == cfg.to_json()


def test_a_schema_3_config_reads_with_children_capped_at_four_times_its_size_and_grow_max_round_trips(tmp_path, capsys):
    import dataclasses
    import json

    from nnsmith_cov.campaign.fuzz_config import FuzzConfig

    old = _rich_config().to_json() | {"schema": 3}
    del old["grow_max"]
    cfg = FuzzConfig.from_json(old)
    assert cfg.gen.nodes == 7 and cfg.grow_caps == (28,) and cfg.to_json()["schema"] == 6
    assert FuzzConfig.from_json(dataclasses.replace(cfg, grow_max=(9,)).to_json()).max_grown == 9
    # schema 4 held one number: that cap, fixed
    assert FuzzConfig.from_json(cfg.to_json() | {"schema": 4, "grow_max": 11}).grow_caps == (11,)
    learned = FuzzConfig.from_json(dataclasses.replace(cfg, grow_max=(30, 9)).to_json())
    assert learned.grow_caps == (9, 30) and learned.max_grown == 30
    # The flag: stored, and refused where nothing is grown.
    out = tmp_path / "c"
    argv = ["fuzz", "-o", str(out), "--backends", "ort", "--collector", "none", "--tests", "3", "--ops", "Relu", "Add"]
    assert main([*argv, "--nodes", "3", "--feedback", "off"]) == 0
    assert json.loads((out / "config.json").read_text())["grow_max"] == [12]  # the default, 4 x --nodes
    assert main([*argv, "-o", str(tmp_path / "d"), "--feedback", "off", "--grow-max", "6"]) == 2
    assert not (tmp_path / "d").exists()
    # several caps: learned among, stored ascending; a repeat or a cap out of range is refused
    learn = [*argv, "-o", str(tmp_path / "e"), "--nodes", "3", "--grow-max", "12,6", "--tests", "2"]
    assert main([*learn, "--collector", "python"]) == 0
    assert json.loads((tmp_path / "e" / "config.json").read_text())["grow_max"] == [6, 12]
    for bad, why in (("6,6", "a cap repeats"), ("6,0", "must be in 1..800"), ("6,x", "not an integer")):
        assert main([*argv, "-o", str(tmp_path / "f"), "--grow-max", bad]) == 2
        assert why in capsys.readouterr().err
    assert not (tmp_path / "f").exists()


def test_a_schema_5_config_reads_without_a_hedge_and_the_hedge_flag_is_stored_and_checked(tmp_path, capsys):
    import dataclasses
    import json

    from nnsmith_cov.campaign.fuzz_config import FuzzConfig
    from nnsmith_cov.stored import StoredError

    old = _rich_config().to_json() | {"schema": 5}
    del old["hedge"]
    assert FuzzConfig.from_json(old).hedge == 0.0  # campaigns before the hedge steered every test
    cfg = dataclasses.replace(_rich_config(), hedge=0.25)
    assert FuzzConfig.from_json(cfg.to_json()).hedge == 0.25
    for bad in (1, 1.5, -0.1, "0.5", None, True):
        with pytest.raises(StoredError, match="hedge"):
            FuzzConfig.from_json(cfg.to_json() | {"hedge": bad})
    # The flag: stored with feedback (0.5 unless given; 0 without), refused without it or out of [0, 1).
    argv = ["fuzz", "--backends", "ort", "--tests", "2", "--ops", "Relu", "Add", "--nodes", "3"]
    assert main([*argv, "-o", str(tmp_path / "a"), "--collector", "python", "--hedge", "0"]) == 0
    assert json.loads((tmp_path / "a" / "config.json").read_text())["hedge"] == 0.0
    assert main([*argv, "-o", str(tmp_path / "b"), "--collector", "python"]) == 0
    assert json.loads((tmp_path / "b" / "config.json").read_text())["hedge"] == 0.5
    assert main([*argv, "-o", str(tmp_path / "e"), "--collector", "none"]) == 0  # no feedback: nothing hedged
    assert json.loads((tmp_path / "e" / "config.json").read_text())["hedge"] == 0.0
    assert main([*argv, "-o", str(tmp_path / "c"), "--collector", "none", "--hedge", "0.2"]) == 2
    assert "--hedge needs feedback" in capsys.readouterr().err
    for bad, why in (("1", "must be a number in [0, 1)"), ("x", "not a number")):
        assert main([*argv, "-o", str(tmp_path / "d"), "--collector", "python", "--hedge", bad]) == 2
        assert why in capsys.readouterr().err
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_a_schema_2_config_reads_with_sizes_fixed_and_vary_size_round_trips(tmp_path):
    import dataclasses
    import json

    from nnsmith_cov.campaign.fuzz_config import FuzzConfig
    from nnsmith_cov.stored import StoredError

    old = _rich_config().to_json() | {"schema": 2}
    del old["vary_size"]
    assert FuzzConfig.from_json(old).vary_size is False
    off_var = dataclasses.replace(_rich_config(), feedback=False, mutation=False, vary_size=True)
    assert FuzzConfig.from_json(off_var.to_json()).vary_size is True
    missing = off_var.to_json()
    del missing["vary_size"]
    with pytest.raises(StoredError, match="vary_size"):
        FuzzConfig.from_json(missing)
    # The flag: feedback off drawing the sizes the size arm chooses from.
    out = tmp_path / "c"
    argv = ["fuzz", "-o", str(out), "--backends", "ort", "--collector", "none", "--feedback", "off"]
    assert main([*argv, "--vary-size", "--tests", "6", "--nodes", "3", "--ops", "Relu", "Add"]) == 0
    assert json.loads((out / "config.json").read_text())["vary_size"] is True
    from nnsmith_cov.corpus.store import CorpusStore

    with CorpusStore.open(out / "lmdb", readonly=True) as store:  # the scheduler got it (and resumes with it)
        assert store.scheduler_state()["config"]["vary"] is True


@pytest.mark.parametrize(
    "change, message",
    [
        ({"schema": 7}, "schema 7: this nnsmith-cov reads config schemas 1..6"),
        ({"hedge": 1.0}, "hedge must be a share in [0, 1), not 1.0"),
        ({"grow_max": 0}, "grow_max must be a list of 1..8 distinct integers in 1..800, not 0"),
        ({"grow_max": [0]}, "grow_max must be a list of 1..8 distinct integers in 1..800, not [0]"),
        ({"grow_max": [20, 20]}, "grow_max must be a list of 1..8 distinct integers in 1..800, not [20, 20]"),
        ({"grow_max": []}, "grow_max must be a list of 1..8 distinct integers in 1..800, not []"),
        ({"grow_max": None}, "lacks 'grow_max'"),
        ({"schema": "2"}, "schema '2'"),
        ({"schema": True}, "schema True"),
        ({"mutation": None}, "lacks 'mutation'"),  # schema 2 implies nothing
        ({"rtol": None}, "lacks 'rtol'"),
    ],
)
def test_an_unknown_schema_or_a_missing_key_is_a_one_line_error(tmp_path, capsys, change, message):
    import json

    config = _rich_config().to_json()
    for k, v in change.items():
        config.pop(k) if v is None else config.__setitem__(k, v)
    (tmp_path / "lmdb").mkdir()
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["fuzz", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unusable campaign config" in err and message in err


def test_ctrl_c_while_the_command_imports_is_one_line_and_130(monkeypatch, capsys):
    import importlib.abc

    from nnsmith_cov.__main__ import run

    class Interrupting(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "nnsmith_cov.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "nnsmith_cov.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert run() == 130
    assert capsys.readouterr().err == "nnsmith-cov: interrupted\n"


def test_python_dash_m_runs_the_command():
    out = subprocess.run(
        [sys.executable, "-m", "nnsmith_cov", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("nnsmith-cov ")
