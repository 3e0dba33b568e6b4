"""`nnsmith-cov repro`: re-run a finding's bundle (or an internal error's record) and say
whether it reproduces (exit 0) or not (exit 1)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from nnsmith_cov.flags import CliError, add_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("repro", help="re-run a finding's bundle and say whether it reproduces")
    add_flags(p, "repro")


def main(args: argparse.Namespace) -> int:
    from nnsmith_cov.campaign.repro import ReproError, reproduce
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.oracle.bundle import BundleError, read_bundle

    if _is_internal_record(args.bundle):
        return _repro_internal(args.bundle)
    from nnsmith_cov.tzer.repro import is_tzer_bundle

    if is_tzer_bundle(args.bundle):  # a TIR test of the Tzer baseline: no graph, its TIR in meta.json
        return _repro_tzer(args)
    try:
        bundle = read_bundle(args.bundle, args.plugin or [])
    except BundleError as e:
        raise CliError(str(e)) from None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = reproduce(bundle, Path(tmp) / "worker.log", args.timeout_s)
        except (ReproError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    print(f"expected: {bundle.meta['signature']}")
    now = result.finding.signature if result.finding else "no finding (the test passes)"
    print(f"now:      {now}")
    print("reproduces" if result.reproduced else "does not reproduce")
    return 0 if result.reproduced else 1


def _is_internal_record(path: Path) -> bool:
    from nnsmith_cov.bounded_read import read_json

    try:
        meta = read_json(path / "meta.json")  # bounded: a hostile meta.json is read_bundle's to report
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("symptom") == "internal"


def _repro_internal(path: Path) -> int:
    """Replay an internal error's record (RUN/internal/...): exit 0 when it still shows."""
    from nnsmith_cov.campaign.internal import InternalReplayError, read_internal, replay_internal
    from nnsmith_cov.campaign.worker_handle import WorkerStartError

    with tempfile.TemporaryDirectory() as tmp:
        try:
            meta = read_internal(path)
            now = replay_internal(path, meta, Path(tmp) / "worker.log")
        except (InternalReplayError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    expected = meta["signature"]
    print(f"expected: {expected}")
    print(f"now:      {now or 'no internal error (the steps run clean)'}")
    print("reproduces" if now == expected else "does not reproduce")
    return 0 if now == expected else 1


def _repro_tzer(args: argparse.Namespace) -> int:
    from nnsmith_cov.campaign.repro import ReproError
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.tzer.repro import reproduce

    with tempfile.TemporaryDirectory() as tmp:
        try:
            meta, result = reproduce(args.bundle, Path(tmp) / "worker.log", args.timeout_s)
        except (ReproError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    print(f"expected: {meta['signature']}")
    print(f"now:      {result.finding.signature if result.finding else 'no finding (the test passes)'}")
    print("reproduces" if result.reproduced else "does not reproduce")
    return 0 if result.reproduced else 1
