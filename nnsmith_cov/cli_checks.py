"""Checks of what the command line names, before any command writes: output folders,
limits, the flags a resume takes, and a resumed campaign's stored settings.

Each check raises `CliError` (one line, exit status 2) and writes nothing.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nnsmith_cov.flag_values import MAX_NODES as MAX_NODES  # (its home is the flag values; named here too)
from nnsmith_cov.flags import RESUME_FLAGS, CliError, command_parser

if TYPE_CHECKING:
    from nnsmith_cov.campaign.fuzz_config import FuzzConfig

# What a campaign folder holds; a new campaign refuses a folder holding any of them.
CAMPAIGN_FILES = ("config.json", "lmdb", "findings.jsonl", "findings", "stats.json")
# What a model folder from `generate` holds; replacing them needs --force.
MODEL_FILES = ("graph.json", "model.onnx", "record.json", "inputs.npz", "oracle.npz", "graph.txt")


def _error(message: str) -> Exception:
    return CliError(message)


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
    parser = command_parser(command)
    for action in parser._actions:
        action.default = argparse.SUPPRESS  # unset unless given
    rest = list(argv)[1:] if list(argv[:1]) == [command] else list(argv)
    return set(vars(parser.parse_args(rest)))


def check_resume_flags(argv: Sequence[str]) -> None:
    """`fuzz --resume` runs with the campaign's stored settings; a flag that would change them
    is refused, not dropped in silence."""
    extra = sorted(given_flags(argv, "fuzz") - set(RESUME_FLAGS))
    if extra:
        names = ", ".join("--" + d.replace("_", "-") for d in extra)
        takes = ", ".join("--" + d.replace("_", "-") for d in RESUME_FLAGS if d != "resume")
        raise _error(f"fuzz --resume runs with the campaign's own settings; it does not take {names} (only {takes})")


def restore_fuzz_args(args: argparse.Namespace) -> None:
    """Fill `args` from the stored config of the campaign being resumed (read back by
    `FuzzConfig.from_json`, every value checked); --time and --tests given now replace the
    stored limits."""
    from nnsmith_cov.bounded_read import DataError, read_json_dict
    from nnsmith_cov.campaign.fuzz_config import FuzzConfig

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
        cfg = FuzzConfig.from_json(c, args.plugin or [])
    except (ValueError, TypeError) as e:
        raise _error(f"{path}: unusable campaign config: {e}") from None
    _to_args(cfg, args)
    args.output = args.resume


def _to_args(cfg: FuzzConfig, args: argparse.Namespace) -> None:
    """The flags that would have started the campaign `cfg` describes."""
    gen, settings = cfg.gen, cfg.settings
    args.ops = [op.name() for op in gen.ops]
    args.generator = cfg.generator
    args.nodes, args.no_binning, args.max_elems = gen.nodes, not gen.binning, gen.max_elems
    args.timeout_ms, args.solver_work, args.opsets = gen.timeout_ms, gen.work_budget, list(gen.opsets)
    args.dynamic = None if cfg.dynamic_arm else gen.dynamic_prob
    args.roundtrip = None if cfg.roundtrip_arm else gen.roundtrip_prob
    args.backends, args.seed = list(settings.backends), cfg.seed
    args.rtol, args.atol = settings.rtol, settings.atol
    args.half_rtol, args.half_atol = settings.half_rtol, settings.half_atol
    args.timeout_s = settings.timeout_s
    args.search = settings.search.get("method", "gradient")
    args.no_localize = not settings.localize
    args.collector = cfg.collector or "none"
    args.cov_targets, args.pass_filter = cfg.cov_targets, cfg.pass_filters
    args.feedback = "on" if cfg.feedback else "off"
    args.mutation = "on" if cfg.mutation else "off"
    args.hedge = cfg.hedge if cfg.feedback else None
    args.grow_max = cfg.grow_max if cfg.feedback and cfg.grow_max else None
    args.vary_size = cfg.vary_size
    args.time = args.time if args.time is not None else cfg.time_s
    args.tests = args.tests if args.tests is not None else cfg.max_tests
