"""The worker's side of a Tzer test: parse the mutant's TVMScript, apply its optional passes,
build it for llvm and run it on the given buffers, under the worker's collector.

`handle(worker, msg)` serves the worker's "tir" request:
    {"kind": "tir", "script": "<TVMScript>", "passes": ["StmtSimplify", ...],
     "args": <encoded arrays, one per parameter, by name>, "covered": true}
and answers like a backend run: {"kind": "outputs", "outputs": <every parameter buffer after
the call>, "ms": {...}} or {"kind": "error", "error": {...}}. The stages are "import" (parse),
"compile" (the optional passes and the build) and "execute".
"""

from __future__ import annotations

import time
from typing import Any

BACKEND = "tvm"


def handle(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    from nnsmith_cov.campaign.protocol import decode_arrays, encode_arrays
    from nnsmith_cov.campaign.worker import error_record

    args = decode_arrays(msg["args"])
    reply: dict[str, Any] = {}
    ms: dict[str, float] = {}
    out: dict[str, Any] = {}

    def once() -> None:
        import tvm

        from nnsmith_cov.tir import passes, seeds

        stage = "import"
        try:
            worker.stage(stage)
            t0 = time.perf_counter()
            func = seeds.parse(msg["script"])
            ms[stage] = (time.perf_counter() - t0) * 1e3
            stage = "compile"
            worker.stage(stage)
            t0 = time.perf_counter()
            mod = tvm.IRModule({"main": func})
            if msg.get("passes"):
                mod = passes.make(msg["passes"])(mod)
            lib = tvm.tirx.build(mod, target="llvm")
            ms[stage] = (time.perf_counter() - t0) * 1e3
            stage = "execute"
            worker.stage(stage)
            t0 = time.perf_counter()
            names = [p.name for p in func.params]
            tensors = [tvm.runtime.tensor(args[n].copy()) for n in names]
            lib["main"](*tensors)
            out.update({n: t.numpy() for n, t in zip(names, tensors)})
            ms[stage] = (time.perf_counter() - t0) * 1e3
        except Exception as e:  # noqa: BLE001 - the compiler's error is the test's result
            reply.update(kind="error", error=error_record(stage, e))

    with worker.covered(reply, bool(msg.get("covered", True))):
        worker.measured(once, BACKEND)
    if "error" in reply:
        return reply
    return reply | {"kind": "outputs", "outputs": encode_arrays(out), "ms": ms}
