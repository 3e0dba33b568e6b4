"""Checks of what the command line names, before any command writes: output folders,
limits, the flags a resume takes, and a resumed campaign's stored settings.

Each check raises `CliError` (one line, exit status 2) and writes nothing.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Most operators per graph. Generation grows faster than linearly with the graph (one Z3
# solver holds every constraint): 100 operators take ~2 s here, 200 ~15 s, and 400 spend
# the default solver budget; past that a campaign would run for minutes without a test.
MAX_NODES = 200

# What a campaign folder holds; a new campaign refuses a folder holding any of them.
CAMPAIGN_FILES = ("config.json", "lmdb", "findings.jsonl", "findings", "stats.json")
# What a model folder from `generate` holds; replacing them needs --force.
MODEL_FILES = ("graph.json", "model.onnx", "record.json", "inputs.npz", "oracle.npz", "graph.txt")

# The `fuzz` flags a resume takes: when to stop, how many workers, the op-support cache, how
# status is printed, and which plug-ins to trust. Everything else is the campaign's own.
RESUME_FLAGS = (
    "resume",
    "time",
    "tests",
    "workers",
    "worker_mem_mb",
    "status_every",
    "support_cache",
    "no_support",
    "plugin",
)


def _error(message: str) -> Exception:
    from nnsmith_cov.cli import CliError  # (cli imports this module)

    return CliError(message)


def nodes(text: str) -> int:
    """--nodes: an integer in 1..MAX_NODES."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= n <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_NODES}: {text}")
    return n


def check_folder_path(path: Path, flag: str) -> None:
    """CliError unless `path` is a folder or could be created as one: neither it nor a parent
    is a file, and the nearest existing parent is writable (for non-root users)."""
    if path.exists() and not path.is_dir():
        raise _error(f"{flag} {path}: not a folder")
    here = path.absolute()
    while not here.exists():
        here = here.parent
    if not here.is_dir():
        raise _error(f"{flag} {path}: cannot write there ({here} is a file, not a folder)")
    if not os.access(here, os.W_OK | os.X_OK):
        raise _error(f"{flag} {path}: cannot write in {here}")


def make_folder(path: Path, flag: str) -> None:
    """Create `path` (the last check, after everything else was validated): what a root user
    or a read-only mount cannot create is an error here, not a traceback later."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _error(f"{flag} {path}: cannot create it ({e.strerror or e})") from None


def holding(path: Path, names: Sequence[str]) -> list[str]:
    """Which of `names` exist in the folder `path`."""
    return [n for n in names if (path / n).exists()] if path.is_dir() else []


def check_new_campaign(path: Path, flag: str) -> None:
    check_folder_path(path, flag)
    found = holding(path, CAMPAIGN_FILES)
    if found:
        raise _error(f"{path} already holds a campaign ({', '.join(found)}): --resume it, or choose another folder")


def check_model_folder(path: Path, force: bool) -> None:
    """`generate -o`: a folder holding a model is replaced only with --force."""
    check_folder_path(path, "-o")
    found = holding(path, MODEL_FILES)
    if found and not force:
        raise _error(f"{path} already holds a model ({', '.join(found[:3])}): --force to replace it")


def check_batch_folder(path: Path, seeds: range, force: bool) -> None:
    """`batch -o`: no model folder of these seeds is replaced without --force."""
    check_folder_path(path, "-o")
    if force or not path.is_dir():
        return
    try:
        names = [e.name for e in os.scandir(path) if e.name.isascii() and e.name.isdigit()]
    except OSError as e:
        raise _error(f"-o {path}: cannot read it ({e.strerror or e})") from None
    taken = sorted(int(n) for n in names if int(n) in seeds and holding(path / n, MODEL_FILES))
    if taken:
        raise _error(
            f"{path} already holds the models of seeds {', '.join(map(str, taken[:4]))}: --force to replace them"
        )


def given_flags(argv: Sequence[str], command: str) -> set[str]:
    """The dests of `command`'s options that `argv` names (not those left at their default)."""
    from nnsmith_cov.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        action.default = argparse.SUPPRESS  # unset unless given
    return set(vars(parser.parse_args(list(argv)))) - {"command"}


def check_resume_flags(argv: Sequence[str]) -> None:
    """`fuzz --resume` runs with the campaign's stored settings; a flag that would change them
    is refused, not dropped in silence."""
    extra = sorted(given_flags(argv, "fuzz") - set(RESUME_FLAGS))
    if extra:
        names = ", ".join("--" + d.replace("_", "-") for d in extra)
        takes = ", ".join("--" + d.replace("_", "-") for d in RESUME_FLAGS[1:])
        raise _error(f"fuzz --resume runs with the campaign's own settings; it does not take {names} (only {takes})")


def restore_fuzz_args(args: argparse.Namespace) -> None:
    """Fill `args` from the stored config of the campaign being resumed, each value checked for
    its type and range; --time and --tests given now replace the stored limits."""
    from nnsmith_cov.bounded_read import DataError, read_json_dict

    path = args.resume / "config.json"
    if not args.resume.is_dir():
        raise _error(f"{args.resume}: no campaign to resume (not a folder)")
    try:
        c = read_json_dict(path, max_bytes=16 << 20)
    except FileNotFoundError:
        raise _error(f"{args.resume}: no campaign to resume (no config.json)") from None
    except OSError as e:
        raise _error(f"{path}: unreadable campaign config ({e.strerror or e})") from None
    except DataError as e:
        raise _error(f"unreadable campaign config: {e}") from None
    try:
        _restore(args, c, args.plugin or [])
    except (ValueError, KeyError, TypeError) as e:
        what = f"lacks {e}" if isinstance(e, KeyError) else str(e)
        raise _error(f"{path}: unusable campaign config: {what}") from None
    args.output = args.resume


def _restore(args: argparse.Namespace, c: dict[str, Any], plugins: Sequence[str]) -> None:
    from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET
    from nnsmith_cov.bounded_read import shown
    from nnsmith_cov.campaign.stored import (
        StoredError,
        is_number,
        number,
        search_settings,
        timeout,
        trusted_backend,
        trusted_collector,
    )
    from nnsmith_cov.gen.generator import GenConfig

    def of(obj: dict, key: str, kind: type | tuple, default: Any = KeyError, ok=lambda v: True, rule: str = "") -> Any:
        if key not in obj:
            if default is KeyError:
                raise KeyError(key)
            return default
        v = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        bad_bool = isinstance(v, bool) and bool not in kinds
        if bad_bool or not isinstance(v, kinds) or not ok(v):
            raise StoredError(f"{key} must be {rule or ' or '.join(k.__name__ for k in kinds)}, not {shown(v)}")
        return v

    def strs(v: Any) -> bool:
        return isinstance(v, list) and all(isinstance(s, str) for s in v)

    pos_int = lambda v: v >= 1
    gen = of(c, "generator", dict)
    args.ops = of(gen, "ops", list, ok=strs, rule="a list of operator names")
    args.generator = of(gen, "name", str, "nnsmith", lambda v: v in ("nnsmith", "graphfuzzer", "lemon"), "a generator")
    args.nodes = of(gen, "nodes", int, ok=lambda v: 1 <= v <= MAX_NODES, rule=f"an integer in 1..{MAX_NODES}")
    args.no_binning = not of(gen, "binning", bool)
    args.max_elems = of(gen, "max_elems", int, ok=pos_int, rule="a positive integer")
    args.timeout_ms = of(gen, "timeout_ms", int, ok=pos_int, rule="a positive integer")
    args.solver_work = of(gen, "work_budget", int, GenConfig.work_budget, pos_int, "a positive integer")
    in_range = lambda v: bool(v) and all(type(o) is int and MIN_OPSET <= o <= MAX_OPSET for o in v)
    args.opsets = of(gen, "opsets", list, list(GenConfig.opsets), in_range, f"opsets in {MIN_OPSET}..{MAX_OPSET}")
    share = lambda v: v is None or (is_number(v) and 0 <= v <= 1)
    args.dynamic = of(gen, "dynamic_prob", (int, float, type(None)), 0.0, share, "a share in [0, 1]")
    args.roundtrip = of(gen, "roundtrip_prob", (int, float, type(None)), 0.0, share, "a share in [0, 1]")
    backends = of(c, "backends", list, ok=lambda v: bool(v), rule="a non-empty list of backends")
    args.backends = [trusted_backend(b, plugins, "backends") for b in backends]
    args.seed = of(c, "seed", int, ok=lambda v: 0 <= v < 2**63, rule="an integer in [0, 2^63)")
    args.rtol, args.atol = number(c, "rtol", "config", 1e-2), number(c, "atol", "config", 1e-3)
    args.half_rtol, args.half_atol = number(c, "half_rtol", "config", 5e-2), number(c, "half_atol", "config", 1e-2)
    args.timeout_s = timeout(c, "config", 60.0)
    args.search = search_settings(of(c, "search", dict), "config").get("method", "gradient")
    args.no_localize = not of(c, "localize", bool)
    args.collector = trusted_collector(of(c, "collector", (str, type(None))), plugins, "collector") or "none"
    args.cov_targets = of(c, "cov_targets", list, [], strs, "a list of strings")
    args.pass_filter = of(c, "pass_filters", (list, type(None)), None, lambda v: v is None or strs(v), "paths")
    args.feedback = "on" if of(c, "feedback", bool) else "off"
    args.mutation = "on" if of(c, "mutation", bool, False) else "off"  # campaigns from before mutation: off
    time_s = of(c, "time_s", (int, float, type(None)), None, lambda v: v is None or (is_number(v) and v > 0))
    tests = of(c, "max_tests", (int, type(None)), None, lambda v: v is None or v >= 1, "a positive integer")
    args.time = args.time if args.time is not None else time_s
    args.tests = args.tests if args.tests is not None else tests
