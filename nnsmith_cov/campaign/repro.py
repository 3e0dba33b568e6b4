"""Re-run a bug bundle and say whether it still shows the same signature."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nnsmith_cov.campaign.testcase import CaseSettings, Prepared, judge, prepare, run_backend
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.oracle.bundle import Bundle
from nnsmith_cov.oracle.finding import TORCH_STAGES, Finding
from nnsmith_cov.oracle.signature import same_signature


class ReproError(Exception):
    """The bundle's backend cannot run here."""


@dataclass
class ReproResult:
    reproduced: bool
    finding: Finding | None  # what the re-run found (None: it passed)


def bundle_settings(meta: dict, timeout_s: float | None = None, localize: bool = True) -> CaseSettings:
    """The case settings a bundle was found under (its meta's `settings`, defaults where absent), on
    its backend alone, or on none when PyTorch's side failed; `timeout_s` overrides the saved one."""
    saved = meta.get("settings", {})
    return CaseSettings(
        backends=[] if meta["stage"] in TORCH_STAGES else [meta["backend"]],
        rtol=saved.get("rtol", 1e-2),
        atol=saved.get("atol", 1e-3),
        half_rtol=saved.get("half_rtol", 5e-2),
        half_atol=saved.get("half_atol", 1e-2),
        timeout_s=timeout_s or saved.get("timeout_s", 60.0),
        search=saved.get("search") or CaseSettings([]).search,
        localize=localize,
    )


def reproduce(bundle: Bundle, log_path: Path, timeout_s: float | None = None) -> ReproResult:
    meta = bundle.meta
    backend = meta["backend"]
    on_torch = meta["stage"] in TORCH_STAGES
    settings = bundle_settings(meta, timeout_s)
    worker = WorkerHandle(settings.backends, log_path)
    try:
        hello = worker.start()
        if backend in hello["unavailable"]:
            raise ReproError(f"backend {backend} is unavailable here: {hello['unavailable'][backend]}")
        if on_torch:
            _, finding = prepare(worker, bundle.graph, meta["seed"], settings)
        else:
            if bundle.onnx is None or bundle.oracle is None:
                raise ReproError(f"{bundle.path}: a {meta['stage']} finding needs model.onnx and oracle.npz")
            search = meta.get("search")
            prepared = Prepared(bundle.graph, meta["seed"], bundle.values, bundle.oracle, bundle.onnx, search)
            reply = run_backend(worker, prepared, backend, meta["opt"], settings.timeout_s)
            finding = judge(prepared, backend, meta["opt"], reply, settings)
    finally:
        worker.close()
    # same_signature: a bundle recorded under an older normalization still matches its symptom
    return ReproResult(finding is not None and same_signature(meta["signature"], finding.signature), finding)
