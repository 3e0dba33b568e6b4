"""Re-running a Tzer finding's bundle: the TIR stored in meta.json (TVMScript text), its pass
sequence and inputs.npz, through the same worker path as in the campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nnsmith_cov.bounded_read import DataError, read_json
from nnsmith_cov.campaign.repro import ReproError, ReproResult


def is_tzer_bundle(path: Path) -> bool:
    """Whether `path` holds a bundle of a Tzer test (its meta.json carries a "tzer" record)."""
    try:
        meta = read_json(path / "meta.json")
    except (OSError, DataError, ValueError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("tzer"), dict)


def reproduce(path: Path, log_path: Path, timeout_s: float | None = None) -> tuple[dict[str, Any], ReproResult]:
    """The bundle's meta and whether a re-run shows its signature again; ReproError for a bad bundle."""
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.tir_request import BACKEND
    from nnsmith_cov.campaign.worker_handle import WorkerHandle
    from nnsmith_cov.materialize.model_dir import load_npz
    from nnsmith_cov.oracle.signature import same_signature
    from nnsmith_cov.tzer.case import run_case

    try:
        meta = read_json(path / "meta.json")
        expected, record = str(meta["signature"]), meta["tzer"]
        script, passes = str(record["tir"]), [str(p) for p in record["passes"]]
        args = load_npz(path / "inputs.npz")
        saved = meta.get("settings") or {}
        settings = CaseSettings([BACKEND], rtol=float(saved.get("rtol", 1e-2)), atol=float(saved.get("atol", 1e-3)),
                                timeout_s=float(timeout_s or saved.get("timeout_s", 60.0)))  # fmt: skip
    except (OSError, DataError, ValueError, KeyError, TypeError) as e:
        raise ReproError(f"{path}: not a readable Tzer bundle ({type(e).__name__}: {e})") from None
    worker = WorkerHandle([BACKEND], log_path)
    try:
        hello = worker.start()
        if BACKEND in hello["unavailable"]:
            raise ReproError(f"backend {BACKEND} is unavailable here: {hello['unavailable'][BACKEND]}")
        result, _ = run_case(worker, script, passes, args, settings)
    finally:
        worker.close()
    found = next((f for f in result.findings + result.unsupported if same_signature(expected, f.signature)),
                 None)  # fmt: skip
    first = found or (result.findings[0] if result.findings else None)
    return meta, ReproResult(found is not None, first)
