"""One Tzer test from the parent: the mutant built and run with its optional passes ("opt") and
without them ("O0") in the worker, judged by the crash/hang oracle and by comparing the two runs."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from nnsmith_cov.campaign.protocol import decode_arrays, encode_arrays
from nnsmith_cov.campaign.testcase import CaseResult, CaseSettings, failure
from nnsmith_cov.campaign.tir_request import BACKEND
from nnsmith_cov.campaign.worker_handle import Reply, WorkerHandle
from nnsmith_cov.oracle.compare import compare_outputs
from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.signature import mismatch_signature


def arguments(func: Any, seed: int) -> dict[str, np.ndarray]:
    """Values for every parameter buffer of `func`, drawn from `seed` (outputs too: a mutant
    that no longer writes all of an output then reads the same garbage in both runs)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        shape, dtype = tuple(int(d) for d in p.shape), str(p.dtype)
        if dtype.startswith("float"):
            out[p.name] = rng.uniform(-2.0, 2.0, shape).astype(dtype)
        elif dtype == "bool":
            out[p.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[p.name] = rng.integers(-8, 9, shape).astype(dtype)
    return out


def run_tir(
    worker: WorkerHandle,
    script: str,
    passes: list[str],
    args: dict[str, np.ndarray],
    timeout_s: float,
    covered: bool = True,
) -> Reply:
    request = {"kind": "tir", "script": script, "passes": passes, "args": encode_arrays(args), "covered": covered}
    return worker.call(request, timeout_s)


def warm_up(worker: WorkerHandle, func: Any, timeout_s: float) -> None:
    """Parse, build and run `func` once unmeasured (with every optional pass): a fresh worker's
    first TIR test would otherwise also cover one-time set-up (the parser, the llvm target)."""
    from nnsmith_cov.tir.passes import MENU

    run_tir(worker, func.script(), list(MENU), arguments(func, 0), timeout_s, covered=False)


def run_case(
    worker: WorkerHandle, script: str, passes: list[str], args: dict[str, np.ndarray], settings: CaseSettings
) -> tuple[CaseResult, dict[str, np.ndarray] | None]:
    """With passes first; without them when that ran (the reference) or failed (localization).
    Also returns the run without passes' outputs (the bundle's oracle), when it had any."""
    ms: dict[str, float] = {}
    result = CaseResult("pass", None, [], ms)
    t0 = time.perf_counter()
    opt = run_tir(worker, script, passes, args, settings.timeout_s)
    result.add_run(BACKEND, opt)
    ms["tvm.run"] = (time.perf_counter() - t0) * 1e3
    found = failure(BACKEND, "opt", opt)
    if found is not None and (found.category == "unsupported" or found.symptom == "hang"):
        _file(result, found)
        return result, None
    base = run_tir(worker, script, [], args, settings.timeout_s)
    result.add_hits(base.msg)
    base_failed = failure(BACKEND, "O0", base)
    if found is not None:
        found.localized = "optimization" if base_failed is None else "conversion"
        _file(result, found)
        return result, None
    if base_failed is not None:  # only the build without optional passes fails
        _file(result, base_failed)
        return result, None
    expected, actual = decode_arrays(base.msg["outputs"]), decode_arrays(opt.msg["outputs"])
    mismatches = compare_outputs(expected, actual, settings.rtol, settings.atol,
                                 {"float16": (settings.half_rtol, settings.half_atol)})  # fmt: skip
    if mismatches:
        first = mismatches[0]
        result.findings.append(
            Finding(
                symptom="inconsistency",
                backend=BACKEND,
                stage="execute",
                opt="opt",
                signature=mismatch_signature(BACKEND, "opt", first.reason, ["tir"]),
                detail=f"{first.name}: {first.reason}: {first.detail} (with passes {','.join(passes)})",
                log="".join(f"{m.name}: {m.reason}: {m.detail}\n" for m in mismatches),
                actual=actual,
                localized="optimization",
            )
        )
        result.status = "finding"
    return result, expected


def _file(result: CaseResult, finding: Finding) -> None:
    if finding.category == "unsupported":
        result.unsupported.append(finding)
        result.status = "unsupported"
    else:
        result.findings.append(finding)
        result.status = "finding"
