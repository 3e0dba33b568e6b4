#!/usr/bin/env python3
"""Cost of the binary collector (Frida Stalker on ORT's prebuilt module): start-up, per test, calibration.

Generates N 10-node models with ORT-supported operators, searches their values and
exports them in this process, then sends each model's ORT run (import + compile at
ORT_ENABLE_ALL + execute) to two workers: one plain, one measuring with the binary
collector. Prints the slot universe (functions, slots, labelled share, pass-only
share), worker start-up with and without the collector (attach, self-check and
warm-up included), per-run time on both (median and total, the worker's own
compile+execute time and the parent's round trip), blocks (slots) per model, and
the same models a second time (steady state: blocks compiled already), and
calibration: how many runs were re-run, what that cost, how many slots were masked.

    python scripts/bench_coverage_binary.py [--models 30] [--nodes 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from nnsmith_cov.backends.op_support import default_cache_dir, load_or_probe, restrict_ops
from nnsmith_cov.campaign.protocol import encode_arrays
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.coverage.collector import PASS_FILTERS
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.materialize.model_dir import materialize_and_export
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.search.valid_graphs import valid_graphs


def models(worker: WorkerHandle, count: int, nodes: int, seed: int) -> list[tuple[bytes, dict[str, np.ndarray]]]:
    tables = load_or_probe(worker, ["ort"], ALL_OPS, default_cache_dir())
    cfg = GenConfig(nodes=nodes, ops=restrict_ops(ALL_OPS, tables.values()))
    out = []
    for _, graph, search in valid_graphs(cfg, seed):
        if len(out) == count:
            break
        try:
            onnx_bytes = materialize_and_export(graph, search.values).onnx
        except Exception:  # an export finding: not what this benchmark measures
            continue
        out.append((onnx_bytes, {f"i{v}": search.values[v] for v in graph.inputs}))
    return out


def timed_start(worker: WorkerHandle) -> float:
    t0 = time.perf_counter()
    worker.start()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        plain = WorkerHandle(["ort"], Path(tmp) / "plain.log")
        binary = WorkerHandle(["ort"], Path(tmp) / "binary.log", collector="binary")
        try:
            plain_start = timed_start(plain)
            binary_start = timed_start(binary)
            u = binary.universe()
            cases = models(plain, args.models, args.nodes, args.seed)
            rows = [run_both(plain, binary, onnx_bytes, inputs) for onnx_bytes, inputs in cases]
            # The same models again: their blocks are compiled and calibrated already (steady state).
            again = [run_both(plain, binary, onnx_bytes, inputs) for onnx_bytes, inputs in cases]
            stats = binary.attachment.stats()
            masked = len(binary.unstable)
        finally:
            plain.close()
            binary.close()

    passes = u.file_mask(PASS_FILTERS["binary"])
    functions = len(np.unique(u.line))
    module_label = u.files.index(next(iter(u.build)))  # unlabelled functions carry the module's name
    labelled = len(np.unique(u.line[u.file_of != module_label]))
    print(f"universe {u.ident}: {len(u)} slots over {functions} functions of {', '.join(u.build)}")
    print(f"  functions with a source-path label: {labelled} ({100 * labelled / functions:.1f}%)")
    print(f"  pass-only ({PASS_FILTERS['binary'][0]}): {int(passes.sum())} slots")
    print(f"worker start: plain {plain_start:.1f} s, binary {binary_start:.1f} s (attach, self-check, warm-up)")

    ok = [r for r in rows if r is not None]
    med = statistics.median
    p_ms = [r["plain_ms"] for r in ok]
    b_ms = [r["binary_ms"] for r in ok]
    p_rt = [r["plain_rt"] for r in ok]
    b_rt = [r["binary_rt"] for r in ok]
    print(f"\n{len(ok)} of {len(rows)} models ran on ORT (import + compile at ORT_ENABLE_ALL + execute)")
    print(f"  worker time, plain:   median {med(p_ms):7.1f} ms   total {sum(p_ms) / 1e3:6.2f} s")
    print(f"  worker time, binary:  median {med(b_ms):7.1f} ms   total {sum(b_ms) / 1e3:6.2f} s")
    print(f"  round trip, plain:    median {med(p_rt):7.1f} ms   binary {med(b_rt):7.1f} ms (calibration included)")
    over = [b - p for b, p in zip(b_ms, p_ms)]
    print(f"  per-test overhead (worker time): median {med(over):+.1f} ms, total {sum(b_ms) / sum(p_ms) - 1:+.0%}")
    blocks = [r["slots"] for r in ok]
    print(f"  slots per model: median {med(blocks):.0f}, min {min(blocks)}, max {max(blocks)}")
    seen = [r for r in again if r is not None]
    print(
        f"  the same models again (blocks already compiled): plain median {med(r['plain_ms'] for r in seen):.1f} ms, "
        f"binary {med(r['binary_ms'] for r in seen):.1f} ms, {sum(r['reran'] for r in seen)} re-runs"
    )
    cal = [r["calibration_ms"] for r in ok if r["reran"]]
    print(
        f"  calibration: {len(cal)} of {len(ok)} runs re-run (new slots), "
        f"median {med(cal) if cal else 0:.1f} ms each, {sum(cal) / 1e3:.2f} s in all; {masked} slots masked"
    )
    vmap = VirginMap(len(u))
    for r in ok:
        vmap.update(r["hits"])
    print(f"  all together: {vmap.count()} slots, pass-only {vmap.count(passes)}")
    print(f"  agent: {stats.get('blocks')} blocks instrumented, {stats.get('outside')} outside every function range")


def run_both(plain: WorkerHandle, binary: WorkerHandle, onnx_bytes: bytes, inputs: dict) -> dict | None:
    request = {"kind": "run", "backend": "ort", "opt": "opt", "onnx": onnx_bytes, "inputs": encode_arrays(inputs)}
    a = plain.call(request, 120)
    b = binary.call(request, 120)
    if a.msg is None or b.msg is None or a.msg["kind"] != "outputs" or b.msg["kind"] != "outputs":
        return None
    hits = Hits.from_wire(b.msg["hits"])
    return {
        "plain_ms": sum(a.msg["ms"].values()),
        "binary_ms": sum(b.msg["ms"].values()),
        "plain_rt": a.elapsed_ms,
        "binary_rt": b.elapsed_ms,
        "slots": len(hits),
        "hits": hits,
        "reran": b.msg["calibration"]["reran"],
        "calibration_ms": b.msg["calibration"]["ms"],
    }


if __name__ == "__main__":
    main()
