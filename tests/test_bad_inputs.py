"""Bad input, as a user or a downloaded file gives it: one line on stderr, a non-zero exit, no
traceback, and nothing on disk touched.

Each row builds its inputs under `tmp_path`, hashes that folder, runs the command in this
process (`cli.main`), and hashes again. Every error here comes before a worker starts, so the
whole table runs in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.gen.generator import GenConfig, generate
from nnsmith_cov.materialize.model_dir import leaf_names
from nnsmith_cov.ops import select_ops

DEEP = "[" * 200_000 + "]" * 200_000
HUGE = 10**400


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A small model folder as `generate` writes it (graph.json, record.json, inputs.npz), made
    without a value search: every error below comes before values matter."""
    out = tmp_path_factory.mktemp("model") / "m"
    out.mkdir()
    gen = generate(GenConfig(nodes=3, ops=select_ops(["Add", "Relu"])), 1)
    (out / "graph.json").write_text(gen.graph.dumps())
    (out / "record.json").write_text(json.dumps({"schema": 1, "seed": 1}))
    arrays = {name: np.zeros(gen.graph.types[v].shape, np.float32) for v, name in leaf_names(gen.graph).items()}
    np.savez(out / "inputs.npz", **arrays)
    return out


def _bundle(root: Path, model: Path, **meta) -> Path:
    """A bundle folder built from `model`, its meta.json updated with `meta` (None deletes)."""
    b = root / "bundle"
    b.mkdir()
    for name in ("graph.json", "inputs.npz"):
        shutil.copy(model / name, b / name)
    base = {"schema": 1, "symptom": "crash", "backend": "ort", "stage": "compile", "opt": "opt",
            "signature": "ort/compile/opt: X", "seed": 1, "settings": {"rtol": 0.01, "timeout_s": 5}}  # fmt: skip
    for k, v in meta.items():
        base.pop(k) if v is None else base.__setitem__(k, v)
    (b / "meta.json").write_text(json.dumps(base))
    return b


def _graph_with(model: Path, attrs_text: str) -> str:
    """graph.json of `model` whose first instruction's attributes are `attrs_text` (raw JSON)."""
    obj = json.loads((model / "graph.json").read_text())
    obj["insts"][0]["attrs"] = {"__marker__": 0}
    return json.dumps(obj).replace('{"__marker__": 0}', attrs_text)


def _campaign(root: Path, config: object | str) -> Path:
    """A campaign folder whose config.json holds `config` (text as given, else as JSON)."""
    c = root / "camp"
    (c / "lmdb").mkdir(parents=True)
    (c / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return c


def _config(**changes) -> dict:
    """A config.json as `fuzz` writes it, with `changes` (None deletes)."""
    c = {
        "seed": 0, "time_s": 60, "max_tests": None, "feedback": False, "collector": "", "cov_targets": [],
        "pass_filters": None, "backends": ["ort"], "rtol": 0.01, "atol": 0.001, "half_rtol": 0.05,
        "half_atol": 0.01, "timeout_s": 60, "search": {"method": "gradient", "max_iters": 256, "budget_ms": 5000},
        "localize": True,
        "generator": {"nodes": 5, "binning": True, "max_elems": 65536, "timeout_ms": 60000, "work_budget": 10**7,
                      "opsets": [20], "dynamic_prob": 0.0, "roundtrip_prob": 0.0, "ops": ["Add"], "name": "nnsmith"},
    }  # fmt: skip
    for k, v in changes.items():
        c.pop(k) if v is None else c.__setitem__(k, v)
    return c


def _file(root: Path, name: str = "afile", data: bytes = b"x") -> Path:
    (root / name).write_bytes(data)
    return root / name


def _dir(root: Path, *files: str) -> Path:
    d = root / "d"
    d.mkdir()
    for f in files:
        (d / f).parent.mkdir(parents=True, exist_ok=True)
        (d / f).write_text("{}") if "." in f else (d / f).mkdir()
    return d


def _junk_corpus(root: Path) -> Path:
    c = root / "camp"
    (c / "lmdb").mkdir(parents=True)
    (c / "lmdb" / "data.mdb").write_bytes(os.urandom(64))  # a truncated / damaged LMDB
    return c


@dataclass
class Case:
    name: str
    argv: Callable[[Path, Path], list[str]]  # (tmp_path, model) -> argv
    message: str  # in the error line
    rc: int = 2


def fuzz(*flags: str) -> list[str]:
    return ["fuzz", "--tests", "1", "--collector", "none", *flags]


def repro(**meta) -> Callable[[Path, Path], list[str]]:
    return lambda t, m: ["repro", str(_bundle(t, m, **meta))]


def repro_file(name: str, data: bytes | str) -> Callable[[Path, Path], list[str]]:
    def argv(t: Path, m: Path) -> list[str]:
        b = _bundle(t, m)
        (b / name).write_bytes(data.encode() if isinstance(data, str) else data)
        return ["repro", str(b)]

    return argv


def resume(config: object | str, *flags: str) -> Callable[[Path, Path], list[str]]:
    return lambda t, m: ["fuzz", "--resume", str(_campaign(t, config)), *flags]


CASES = [
    # -- flags ---------------------------------------------------------------------------
    Case("fuzz -o a file", lambda t, m: fuzz("-o", str(_file(t))), "not a folder"),
    Case("fuzz -o under a file", lambda t, m: fuzz("-o", str(_file(t) / "sub")), "cannot write"),
    Case("fuzz -o unwritable", lambda t, m: fuzz("-o", "/proc/nnsmith-cov-test/out"), "cannot create"),
    Case("fuzz -o lmdb, no config", lambda t, m: fuzz("-o", str(_dir(t, "lmdb"))), "already holds a campaign"),
    Case("fuzz -o a campaign", lambda t, m: fuzz("-o", str(_dir(t, "config.json"))), "already holds a campaign"),
    Case("fuzz -o findings only", lambda t, m: fuzz("-o", str(_dir(t, "findings.jsonl"))), "already holds"),
    Case("fuzz --nodes 5000", lambda t, m: fuzz("--nodes", "5000", "-o", str(t / "o")), "1..200"),
    Case("fuzz --nodes -3", lambda t, m: fuzz("--nodes", "-3", "-o", str(t / "o")), "1..200"),
    Case("fuzz --time 5x", lambda t, m: fuzz("--time", "5x", "-o", str(t / "o")), "not a duration"),
    Case("fuzz --time 0", lambda t, m: fuzz("--time", "0", "-o", str(t / "o")), "must be positive"),
    Case("fuzz --time -5m", lambda t, m: fuzz("--time", "-5m", "-o", str(t / "o")), "expected one argument"),
    Case("fuzz --tests -1", lambda t, m: ["fuzz", "--tests", "-1", "-o", str(t / "o")], "at least 1"),
    Case("fuzz --workers 0", lambda t, m: fuzz("--workers", "0", "-o", str(t / "o")), "at least 1"),
    Case("fuzz no stop", lambda t, m: ["fuzz", "--collector", "none", "-o", str(t / "o")], "say when to stop"),
    Case("fuzz --backends nosuch", lambda t, m: fuzz("--backends", "nosuch", "-o", str(t / "o")), "unknown backend"),
    Case("fuzz --backends ,", lambda t, m: fuzz("--backends", ",", "-o", str(t / "o")), "no backend named"),
    Case(
        "fuzz --collector nosuch",
        lambda t, m: ["fuzz", "--tests", "1", "--collector", "nosuch", "-o", str(t / "o")],
        "unknown collector",
    ),  # fmt: skip
    Case("fuzz --seed 2^64", lambda t, m: fuzz("--seed", str(2**64), "-o", str(t / "o")), "seed must be"),
    Case("fuzz --rtol -1", lambda t, m: fuzz("--rtol=-1", "-o", str(t / "o")), "must be a number >= 0"),
    Case("fuzz --rtol nan", lambda t, m: fuzz("--rtol", "nan", "-o", str(t / "o")), "must be a number >= 0"),
    Case("fuzz --opsets 5-99", lambda t, m: fuzz("--opsets", "5-99", "-o", str(t / "o")), "opsets must lie"),
    Case("fuzz --dynamic 2", lambda t, m: fuzz("--dynamic", "2", "-o", str(t / "o")), "in [0, 1]"),
    Case("fuzz --ops Nope", lambda t, m: fuzz("--ops", "Nope", "-o", str(t / "o")), "unknown operator"),
    Case("fuzz --feedback on, no collector", lambda t, m: fuzz("--feedback", "on", "-o", str(t / "o")), "needs a"),
    Case(
        "generate over a model", lambda t, m: ["generate", "--seed", "1", "-o", str(_dir(t, "graph.json"))], "--force"
    ),  # fmt: skip
    Case(
        "generate over an oracle", lambda t, m: ["generate", "--seed", "1", "-o", str(_dir(t, "oracle.npz"))], "--force"
    ),  # fmt: skip
    Case("generate -o a file", lambda t, m: ["generate", "--seed", "1", "-o", str(_file(t))], "not a folder"),
    Case(
        "generate --nodes 5000",
        lambda t, m: ["generate", "--seed", "1", "--nodes", "5000", "-o", str(t / "o")],
        "1..200",
    ),  # fmt: skip
    Case("generate --seed -1", lambda t, m: ["generate", "--seed", "-1", "-o", str(t / "o")], "seed must be"),
    Case("batch -o a file", lambda t, m: ["batch", "--count", "1", "-o", str(_file(t))], "not a folder"),
    Case(
        "batch over models",
        lambda t, m: ["batch", "--count", "2", "-o", str(_dir(t, "1/graph.json"))],
        "already holds the models",
    ),  # fmt: skip
    Case("batch --count 0", lambda t, m: ["batch", "--count", "0"], "at least 1"),
    # -- fuzz --resume: flags it does not take, and its stored config ------------------------
    Case("resume --collector llvm", resume(_config(), "--collector", "llvm"), "does not take --collector"),
    Case("resume --seed 9", resume(_config(), "--seed", "9"), "does not take --seed"),
    Case("resume --nodes (abbreviated)", resume(_config(), "--nod", "3"), "does not take --nodes"),
    Case("resume no config", lambda t, m: ["fuzz", "--resume", str(_dir(t, "lmdb"))], "no config.json"),
    Case("resume a file", lambda t, m: ["fuzz", "--resume", str(_file(t))], "not a folder"),
    Case(
        "resume backends 'nosuch'",
        resume(_config(backends="nosuch")),
        "backends must be a non-empty list of backends, not 'nosuch'",
    ),
    Case("resume backends [nosuch]", resume(_config(backends=["nosuch"])), "unknown backend 'nosuch'"),
    Case("resume plug-in backend", resume(_config(backends=["this:s"])), "--plugin this:s"),
    Case("resume plug-in collector", resume(_config(collector="os:system")), "--plugin os:system"),
    Case("resume config a list", resume([1, 2]), "expected an object"),
    Case("resume config empty", resume(""), "not valid JSON"),
    Case("resume config junk", resume("\x00\xff\x10garbage"), "not valid JSON"),
    Case("resume config deep", resume(DEEP), "nested too deep"),
    Case("resume seed 10^400", resume(_config(seed=HUGE)), "seed must be an integer in [0, 2^63)"),
    Case(
        "resume nodes 5000",
        resume(_config(generator=_config()["generator"] | {"nodes": 5000})),
        "nodes must be an integer in 1..200, not 5000",
    ),
    Case("resume generator missing", resume(_config(generator=None)), "lacks 'generator'"),
    Case("resume timeout_s -1", resume(_config(timeout_s=-1)), "timeout_s must be"),
    Case("resume search method", resume(_config(search={"method": "magic"})), "search method 'magic'"),
    Case("resume search kwargs", resume(_config(search={"lr": 5})), "unknown keys lr"),
    # -- bundles (repro) ---------------------------------------------------------------------
    Case("repro: not a bundle", lambda t, m: ["repro", str(_dir(t))], "not a bundle"),
    Case("repro: meta.json a list", repro_file("meta.json", "[1, 2]"), "holds a JSON list"),
    Case("repro: meta.json empty", repro_file("meta.json", ""), "not valid JSON"),
    Case("repro: meta.json junk", repro_file("meta.json", os.urandom(16) + b"\xff"), "not valid JSON"),
    Case("repro: meta.json deep", repro_file("meta.json", DEEP), "nested too deep"),
    Case("repro: schema 2", repro(schema=2), "schema 2"),
    Case("repro: no signature", repro(signature=None), "lacks 'signature'"),
    Case("repro: symptom a number", repro(symptom=3), "symptom must be a string"),
    Case("repro: seed 10^400", repro(seed=HUGE), "seed must be"),
    Case("repro: seed -1", repro(seed=-1), "seed must be"),
    Case("repro: plug-in backend", repro(backend="this:s"), "--plugin this:s"),
    Case("repro: unknown backend", repro(backend="nosuch"), "unknown backend"),
    Case("repro: backend a list", repro(backend=["ort"]), "backend must be a string"),
    Case("repro: settings a string", repro(settings="fast"), "settings must be an object"),
    Case("repro: timeout_s a string", repro(settings={"timeout_s": "abc"}), "timeout_s must be"),
    Case("repro: timeout_s 10^400", repro(settings={"timeout_s": HUGE}), "timeout_s must be"),
    Case("repro: rtol -1", repro(settings={"rtol": -1}), "rtol must be"),
    Case("repro: search kwargs", repro(settings={"search": {"lr": 5}}), "unknown keys lr"),
    Case("repro: search max_iters", repro(settings={"search": {"max_iters": 0}}), "max_iters"),
    Case("repro: graph.json deep", repro_file("graph.json", DEEP), "nested too deep"),
    Case("repro: graph.json empty", repro_file("graph.json", ""), "not valid JSON"),
    Case("repro: graph.json junk", repro_file("graph.json", b"\x89PNG\r\n\x1a\n\x00"), "not valid JSON"),
    Case("repro: graph.json a list", repro_file("graph.json", "[]"), "malformed GraphIR"),
    Case("repro: no graph.json", lambda t, m: ["repro", str(_rm(_bundle(t, m), "graph.json"))], "No such file"),
    Case("repro: inputs.npz junk", repro_file("inputs.npz", b"PK\x03\x04junk"), "inputs.npz"),
    Case("repro: meta.json links out", lambda t, m: ["repro", str(_link_meta(_bundle(t, m)))], "not valid JSON"),
    # -- graphs (attributes that no backend can carry) ------------------------------------------
    Case("attribute 10^400", lambda t, m: _repro_graph(t, m, '{"a": ' + str(HUGE) + "}"), "64-bit range"),
    Case("attribute 2^63", lambda t, m: _repro_graph(t, m, '{"a": 9223372036854775808}'), "64-bit range"),
    Case("attribute NaN", lambda t, m: _repro_graph(t, m, '{"a": NaN}'), "non-finite"),
    Case("attribute 1e400", lambda t, m: _repro_graph(t, m, '{"a": [1e400]}'), "non-finite"),
    Case("attribute 5000 digits", lambda t, m: _repro_graph(t, m, '{"a": ' + "9" * 5000 + "}"), "not valid JSON"),
    Case("attributes a list", lambda t, m: _repro_graph(t, m, "[1]"), "malformed instruction"),
    # -- replay sources --------------------------------------------------------------------------
    Case("replay: no source", lambda t, m: ["replay", str(t / "nope"), "-o", str(t / "o")], "no such file"),
    Case("replay: a .txt file", lambda t, m: ["replay", str(_file(t, "a.txt")), "-o", str(t / "o")], "not an .onnx"),
    Case("replay: empty folder", lambda t, m: ["replay", str(_dir(t)), "-o", str(t / "o")], "holds no campaign"),
    Case("replay: damaged LMDB", lambda t, m: ["replay", str(_junk_corpus(t)), "-o", str(t / "o")], "camp"),
    Case("replay -o a campaign", lambda t, m: ["replay", str(m), "-o", str(_dir(t, "lmdb"))], "already holds"),
    Case("replay -o a file", lambda t, m: ["replay", str(m), "-o", str(_file(t))], "not a folder"),
    Case(
        "replay --collector none",
        lambda t, m: ["replay", str(m), "-o", str(t / "o"), "--collector", "none"],
        "measures coverage",
    ),  # fmt: skip
    Case("replay --sym-dim 0", lambda t, m: ["replay", str(m), "-o", str(t / "o"), "--sym-dim", "0"], "at least 1"),
    # -- reports and coverage ----------------------------------------------------------------------
    Case("report: no corpus", lambda t, m: ["report", str(t / "nope"), "-o", str(t / "r")], "no corpus", rc=1),
    Case("report: damaged LMDB", lambda t, m: ["report", str(_junk_corpus(t)), "-o", str(t / "r")], "camp", rc=1),
    Case(
        "report: json deep",
        lambda t, m: ["report", "json:" + str(_file(t, "b.json", DEEP.encode())), "-o", str(t / "r")],
        "nested too deep",
        rc=1,
    ),  # fmt: skip
    Case(
        "report: json a list",
        lambda t, m: ["report", "json:" + str(_file(t, "b.json", b"[]")), "-o", str(t / "r")],
        "not an nnsmith-cov branch set",
        rc=1,
    ),  # fmt: skip
    Case(
        "coverage: record.json deep",
        lambda t, m: ["coverage", str(_model_copy(t, m, "record.json", DEEP))],
        "nested too deep",
    ),  # fmt: skip
    Case(
        "coverage: graph.json deep",
        lambda t, m: ["coverage", str(_model_copy(t, m, "graph.json", DEEP))],
        "nested too deep",
    ),  # fmt: skip
    Case("unknown command", lambda t, m: ["frobnicate"], "invalid choice"),
]


def _rm(folder: Path, name: str) -> Path:
    (folder / name).unlink()
    return folder


def _link_meta(bundle: Path) -> Path:
    """meta.json a link out of the bundle, to a file that is not JSON (it is read, as a file the
    user handed over, but never trusted)."""
    (bundle / "meta.json").unlink()
    (bundle / "meta.json").symlink_to(Path(__file__).resolve())
    return bundle


def _repro_graph(t: Path, m: Path, attrs_text: str) -> list[str]:
    b = _bundle(t, m)
    (b / "graph.json").write_text(_graph_with(m, attrs_text))
    return ["repro", str(b)]


def _model_copy(t: Path, m: Path, name: str, text: str) -> Path:
    out = t / "model"
    shutil.copytree(m, out)
    (out / name).write_text(text)
    return out


def _tree_hash(root: Path) -> str:
    """Names, kinds and contents of everything under `root` (links not followed)."""
    h = hashlib.sha256()
    for here, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            p = Path(here) / name
            h.update(str(p.relative_to(root)).encode() + b"\0")
            if p.is_symlink():
                h.update(b"L" + os.readlink(p).encode())
            elif p.is_file():
                h.update(b"F" + hashlib.sha256(p.read_bytes()).digest())
            else:
                h.update(b"D")
    return h.hexdigest()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gives_one_line_and_touches_nothing(case: Case, model: Path, tmp_path: Path, capsys) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv = case.argv(work, model)
    before, model_before = _tree_hash(work), _tree_hash(model)
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == case.rc, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("nnsmith-cov: error: "), err
    assert case.message in err, err
    assert _tree_hash(work) == before, "the command wrote to disk"
    assert _tree_hash(model) == model_before


def test_the_table_covers_enough_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)
