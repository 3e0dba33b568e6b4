"""repro.py: a reduced finding as a script one pastes into an upstream issue.

It needs numpy, onnx and the backend's own package (onnxruntime or tvm), nothing of
nnsmith-cov and no PyTorch; it reads model.onnx, inputs.npz and oracle.npz beside it, runs the
model as the finding ran it, and prints expected against actual (a crash raises as it did).
Exit status: 1 when the outputs disagree, 0 when they agree (or, for a crash, when none came).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnsmith_cov.oracle.finding import TORCH_STAGES

SCRIPT = "repro.py"

# The script's parts: a settings block written per finding, then these; one runner, its engine's.
_HEAD = """
import sys
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent


def arrays(name):
    path = HERE / name
    if not path.exists():
        return {}
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
"""

_RUN_ORT = """
def run(model, inputs):
    import onnxruntime as ort

    so = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    so.graph_optimization_level = level.ORT_ENABLE_ALL if OPTIMIZE else level.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(names, {i.name: inputs[i.name] for i in sess.get_inputs()})
    return dict(zip(names, (np.asarray(o) for o in outs)))
"""

_RUN_TVM = """
def run(model, inputs):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(model, keep_params_in_input=False)
    target = tvm.target.Target("llvm")
    if OPTIMIZE:
        with tvm.transform.PassContext(opt_level=3):
            mod = tvm.transform.Sequential([getattr(relax.transform, p)() for p in TVM_PASSES])(mod)
            pipeline = relax.backend.cpu_generic.get_default_pipeline(target)
            ex = relax.build(mod, target=target, relax_pipeline=pipeline)
    else:
        with tvm.transform.PassContext(opt_level=0, config=TVM_O0_CONFIG):
            ex = relax.build(mod, target=target, relax_pipeline="default")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    names = [i.name for i in model.graph.input]
    out = vm["main"](*(tvm.runtime.tensor(np.array(inputs[n], order="C")) for n in names if n in inputs))
    outs = [out] if hasattr(out, "numpy") else list(out)
    # An int64 result computed from constants alone comes back as a shape: its entries are the values.
    as_array = lambda o: np.asarray(o.numpy()) if hasattr(o, "numpy") else np.asarray(list(o), dtype=np.int64)
    return {o.name: as_array(t) for o, t in zip(model.graph.output, outs)}
"""

_TAIL = '''
def differs(e, a):
    """Why `a` is not `e` within tolerance (one line), or None."""
    if e.shape != a.shape:
        return f"shape: expected {e.shape}, got {a.shape}"
    if e.dtype != a.dtype:
        return f"dtype: expected {e.dtype}, got {a.dtype}"
    if e.dtype.kind not in "biufc":
        return None if np.array_equal(e, a) else "values differ"
    rtol, atol = (HALF_RTOL, HALF_ATOL) if e.dtype == np.float16 else (RTOL, ATOL)
    ew, aw = e.astype(np.float64), a.astype(np.float64)
    if (np.isnan(ew) != np.isnan(aw)).any():
        return "NaN at different positions"
    same_inf = np.isinf(ew) & np.isinf(aw) & (ew == aw)
    if ((np.isinf(ew) | np.isinf(aw)) & ~same_inf).any():
        return "Inf at different positions or with other signs"
    finite = np.isfinite(ew)
    diff = np.where(finite, np.abs(aw - ew), 0.0)
    bad = diff > atol + rtol * np.abs(np.where(finite, ew, 0.0))
    if not bad.any():
        return None
    at = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), e.shape)
    at = tuple(int(i) for i in at)
    return (f"{int(bad.sum())} of {bad.size} elements beyond rtol={rtol:g} atol={atol:g}; "
            f"worst at {at}: expected {e[at].item()!r}, got {a[at].item()!r}")


def main():
    model = onnx.load(str(HERE / "model.onnx"))
    inputs = {k: v for k, v in arrays("inputs.npz").items() if k.startswith("i")}
    expected = arrays("oracle.npz")
    print(f"{ENGINE} at {'full optimization' if OPTIMIZE else 'no optimization'}; finding: {SIGNATURE}")
    actual = run(model, inputs)  # a crash raises here
    if SYMPTOM != "inconsistency":
        print("no crash: the backend ran the model (the finding does not reproduce here)")
        return 0
    wrong = 0
    np.set_printoptions(threshold=20, edgeitems=3)
    for name, e in expected.items():
        a = actual.get(name)
        why = "missing from the outputs" if a is None else differs(e, np.asarray(a))
        if why is None:
            print(f"{name}: agrees")
            continue
        wrong += 1
        print(f"{name}: MISMATCH: {why}")
        print(f"  expected {e!r}")
        print(f"  actual   {a!r}")
    print(f"{wrong} of {len(expected)} outputs disagree with the reference")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def engine_of(backend: str) -> str | None:
    """The package a stand-alone script drives for `backend`: "onnxruntime", "tvm", or None
    when the backend is neither (nor a plug-in built on one of them)."""
    from nnsmith_cov.backends.ort import OrtBackend
    from nnsmith_cov.backends.registry import backend_class
    from nnsmith_cov.backends.tvm import TvmBackend

    try:
        cls = backend_class(backend)
    except (ImportError, AttributeError, ValueError):
        return None
    if issubclass(cls, TvmBackend):
        return "tvm"
    if issubclass(cls, OrtBackend):
        return "onnxruntime"
    return None


def write_script(out: Path, meta: Mapping[str, Any], roundtrip: bool = False) -> Path | None:
    """Write OUT/repro.py for a reduced bundle's `meta`; None (nothing written) when no
    stand-alone script can show it: a PyTorch-side finding, a backend of its own, or a model
    compiled from its IR printed and parsed back (`roundtrip`), which the script does not do."""
    from nnsmith_cov.backends.tvm import _O0_CONFIG, _OPT_PASSES

    engine = engine_of(meta["backend"])
    if engine is None or roundtrip or meta["stage"] in (*TORCH_STAGES, "roundtrip"):
        return None
    settings = meta.get("settings") or {}
    tol = lambda key, default: float(settings.get(key, default))  # read_bundle checked: finite numbers
    backend, symptom, stage, opt = (_plain(meta[k]) for k in ("backend", "symptom", "stage", "opt"))
    plugin = "" if backend in ("ort", "tvm") else f"\nFound with the plug-in backend {backend} (stock {engine} here)."
    lines = [
        "#!/usr/bin/env python3",
        f'"""{symptom} in {engine} at {stage} ({opt}), reduced by nnsmith-cov.{plugin}',
        "",
        "Needs numpy, onnx and " + engine + "; reads model.onnx, inputs.npz and oracle.npz beside this file.",
        "Prints expected against actual; exit status 1 when they disagree.",
        '"""',
        "",
        f"ENGINE = {json.dumps('tvm' if engine == 'tvm' else 'onnxruntime')}",
        f"OPTIMIZE = {meta['opt'] != 'O0'}",
        f"SYMPTOM = {json.dumps(meta['symptom'])}",
        f"SIGNATURE = {json.dumps(meta['signature'])}",
        f"RTOL, ATOL = {tol('rtol', 1e-2)!r}, {tol('atol', 1e-3)!r}",
        f"HALF_RTOL, HALF_ATOL = {tol('half_rtol', 5e-2)!r}, {tol('half_atol', 1e-2)!r}",
    ]
    if engine == "tvm":
        lines += [f"TVM_PASSES = {list(_OPT_PASSES)!r}", f"TVM_O0_CONFIG = {dict(_O0_CONFIG)!r}"]
    path = out / SCRIPT
    runner = _RUN_TVM if engine == "tvm" else _RUN_ORT
    path.write_text("\n".join(lines) + "\n" + _HEAD + runner + "\n" + _TAIL)
    return path


def _plain(text: str) -> str:
    """`text` as the script's docstring may hold it: bundle data never becomes code."""
    return re.sub(r"[^\w .:/+-]", "?", str(text))[:200]
