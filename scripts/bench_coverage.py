#!/usr/bin/env python3
"""Cost of coverage collection: per-test overhead of a collector, map bookkeeping, universe size.

--collector python (default): generated 10-node models (ops TVM accepts, per the cached
op-support probe), each exported with torch.onnx and compiled + run by TVM at OPT, in
this process, once plain and once under the collector, alternating, after a warm-up
pass. Prints the universe (size, files, pass-only share, time to analyse and to load
from cache), median and total time with and without the collector, arcs per test.

--collector binary (Frida Stalker on ORT's prebuilt module): generated 10-node models
(ops ORT accepts), exported in this process; each model's ORT run (import + session
creation at ORT_ENABLE_ALL + execute) goes to two workers, one plain, one measuring
with the binary collector. Prints the slot universe (functions, slots, labelled share,
pass-only share), worker start-up with and without the collector (attach, self-check and
warm-up included), the per-run time on both (median and total of the worker's own time,
split into session creation and execution, and the parent's round trip), slots per model,
calibration (runs re-run, their cost, slots masked), and the same models a second time
(steady state: blocks compiled and calibrated already). With --backend tvm the same for TVM's
compiler (libtvm_compiler.so; models of ops TVM accepts, compiled at OPT and run), with the
median compile time natively and under the collector.

Both print the parent's per-test bookkeeping (wire decode, map update).

    python scripts/bench_coverage.py [--collector python|binary] [--models 40] [--nodes 10] [--seed 0]
        [--models-file PATH]   # binary: load the exported models from PATH, or save them there
        [--backend ort|tvm]    # binary: ORT's module (default) or TVM's compiler (libtvm_compiler.so)

Native (llvm) collection of a real graph optimizer: scripts/bench_coverage_llvm.py.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from nnsmith_cov.campaign.op_support import default_cache_dir, load_or_probe, restrict_ops
from nnsmith_cov.campaign.protocol import decode_arrays, encode_arrays
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.coverage.collector import PASS_FILTERS
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.search.valid_graphs import valid_graphs

DEFAULT_MODELS = {"python": 40, "binary": 30}
med = statistics.median


def supported_ops(worker: WorkerHandle, backend: str) -> list:
    """ALL_OPS narrowed to what `backend` accepts (the cached probe, run by `worker` when missing)."""
    tables = load_or_probe(worker, [backend], ALL_OPS, default_cache_dir())
    return restrict_ops(ALL_OPS, tables.values())


def searched_graphs(ops: list, count: int, nodes: int, seed: int) -> list[tuple[Any, dict, dict]]:
    """(graph, values, oracle) of the first `count` generated graphs the value search solved."""
    cfg = GenConfig(nodes=nodes, ops=ops)
    found = valid_graphs(cfg, seed)
    return [(graph, search.values, search.oracle) for _, graph, search in itertools.islice(found, count)]


def bookkeeping(hits: Sequence[Hits], size: int) -> tuple[VirginMap, list[float], list[float], list[int]]:
    """The parent's work per test: decode the wire form, update the virgin map."""
    vmap = VirginMap(size)
    wire_ms, update_ms, new = [], [], []
    for h in hits:
        t0 = time.perf_counter()
        back = Hits.from_wire(h.to_wire(), size)
        t1 = time.perf_counter()
        novelty = vmap.update(back)
        t2 = time.perf_counter()
        wire_ms.append((t1 - t0) * 1e3)
        update_ms.append((t2 - t1) * 1e3)
        new.append(novelty.new_branches)
    return vmap, wire_ms, update_ms, new


def print_bookkeeping(wire_ms: list[float], update_ms: list[float]) -> None:
    print(f"parent bookkeeping per test: wire decode {med(wire_ms):.3f} ms, map update {med(update_ms):.3f} ms")


# -- python ------------------------------------------------------------------------


def bench_python(args: argparse.Namespace) -> None:
    from nnsmith_cov.backends.base import Opt
    from nnsmith_cov.backends.registry import load_backend
    from nnsmith_cov.coverage.python_collector import PythonCollector
    from nnsmith_cov.materialize.model_dir import materialize_and_export

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        PythonCollector([], cache_dir=Path(tmp)).universe()
        analyse_s = time.perf_counter() - t0
    collector = PythonCollector([])
    t0 = time.perf_counter()
    u = collector.universe()
    load_s = time.perf_counter() - t0
    passes = u.file_mask(PASS_FILTERS["python"])
    print(f"universe {u.ident}: {len(u)} arcs in {len(u.files)} files of {', '.join(collector.packages)}")
    print(f"  pass-only: {int(passes.sum())} arcs ({100 * passes.mean():.1f}%)")
    print(f"  analysis from scratch {analyse_s:.1f} s, from the cache {load_s * 1e3:.0f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        worker = WorkerHandle(["tvm"], Path(tmp) / "worker.log")
        try:
            worker.start()
            ops = supported_ops(worker, "tvm")
        finally:
            worker.close()
    tvm = load_backend("tvm")
    cases = searched_graphs(ops, args.models, args.nodes, args.seed)

    def one(graph, values) -> None:
        onnx_bytes = materialize_and_export(graph, values).onnx
        try:
            exe = tvm.compile(tvm.load(onnx_bytes), Opt.OPT)
            inputs = {f"i{v}": values[v] for v in graph.inputs}
            tvm.run(exe, inputs)
        except Exception:  # a TVM finding: the time it took still counts
            pass

    for graph, values, _ in cases:  # warm-up: lazy imports and caches out of the measurement
        one(graph, values)
    plain, covered, arcs, stop_ms = [], [], [], []
    for graph, values, _ in cases:
        t0 = time.perf_counter()
        one(graph, values)
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        collector.start()
        one(graph, values)
        t1 = time.perf_counter()
        hits = collector.stop()
        covered.append(time.perf_counter() - t0)
        stop_ms.append((time.perf_counter() - t1) * 1e3)
        arcs.append(hits)

    vmap, wire_ms, update_ms, new = bookkeeping(arcs, len(u))
    print(f"\n{len(cases)} models of {args.nodes} nodes: export + TVM import/compile/run, in process")
    print(f"  plain:            median {med(plain) * 1e3:7.1f} ms   total {sum(plain):6.2f} s")
    print(f"  under collector:  median {med(covered) * 1e3:7.1f} ms   total {sum(covered):6.2f} s")
    overhead = [c / p - 1 for c, p in zip(covered, plain)]
    print(
        f"  overhead: total {100 * (sum(covered) / sum(plain) - 1):+.1f}%, "
        f"median per model {100 * med(overhead):+.1f}%  (of which stop(): median {med(stop_ms):.1f} ms)"
    )
    sizes = [len(h) for h in arcs]
    print(f"  arcs per test: median {med(sizes):.0f}, min {min(sizes)}, max {max(sizes)}")
    print(f"  all {len(cases)} together: {vmap.count()} arcs ({100 * vmap.count() / len(u):.2f}%), ")
    print(f"    pass-only {vmap.count(passes)}; tests that found new arcs: {int(np.count_nonzero(new))}")
    print_bookkeeping(wire_ms, update_ms)


# -- binary ------------------------------------------------------------------------


def exported_models(worker: WorkerHandle, args: argparse.Namespace) -> list[tuple[bytes, dict[str, np.ndarray]]]:
    """(ONNX bytes, inputs) of the benchmark's models: from --models-file when it exists, else
    generated for the backend (and saved there), so that runs on different code measure the same models."""
    from nnsmith_cov.materialize.model_dir import materialize_and_export

    path = Path(args.models_file) if args.models_file else None
    if path is not None and path.exists():
        try:
            saved = msgpack.unpackb(path.read_bytes(), raw=False)
            return [(m["onnx"], decode_arrays(m["inputs"])) for m in saved][: args.models]
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            raise SystemExit(f"bench_coverage: {path} is not a models file of this script ({e})") from None
    out = []
    ops = supported_ops(worker, args.backend)
    for _, graph, search in valid_graphs(GenConfig(nodes=args.nodes, ops=ops), args.seed):
        if len(out) == args.models:
            break
        try:
            onnx_bytes = materialize_and_export(graph, search.values).onnx
        except Exception:  # an export finding: not what this benchmark measures
            continue
        out.append((onnx_bytes, {f"i{v}": search.values[v] for v in graph.inputs}))
    if path is not None:
        # msgpack, not pickle: the file is read back.
        path.write_bytes(msgpack.packb([{"onnx": o, "inputs": encode_arrays(i)} for o, i in out], use_bin_type=True))
    return out


def cpu_s(worker: WorkerHandle) -> float:
    """CPU seconds the worker process has used, all threads (from /proc: robust to other load
    on the machine, unlike wall-clock stage times; 10 ms ticks, so read it over many runs)."""
    assert worker.proc is not None
    with open(f"/proc/{worker.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_pass(
    plain: WorkerHandle, binary: WorkerHandle, cases: list, backend: str = "ort"
) -> tuple[list[dict | None], dict[str, float]]:
    """Every model once on each worker; with each worker's CPU time per run over the pass."""
    before = {"plain": cpu_s(plain), "binary": cpu_s(binary)}
    rows = [run_both(plain, binary, onnx_bytes, inputs, backend) for onnx_bytes, inputs in cases]
    cpu = {"plain": cpu_s(plain) - before["plain"], "binary": cpu_s(binary) - before["binary"]}
    return rows, {k: 1e3 * v / max(1, len(cases)) for k, v in cpu.items()}


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_both(
    plain: WorkerHandle, binary: WorkerHandle, onnx_bytes: bytes, inputs: dict, backend: str = "ort"
) -> dict | None:
    """One run of a model on each worker: the worker's own stage times, the round trip, the hits."""
    request = {"kind": "run", "backend": backend, "opt": "opt", "onnx": onnx_bytes, "inputs": encode_arrays(inputs)}
    a = plain.call(request, 600)
    b = binary.call(request, 600)
    if a.msg is None or b.msg is None or a.msg["kind"] != "outputs" or b.msg["kind"] != "outputs":
        return None
    return {
        "plain": a.msg["ms"],
        "binary": b.msg["ms"],
        "plain_rt": a.elapsed_ms,
        "binary_rt": b.elapsed_ms,
        "hits": Hits.from_wire(b.msg["hits"]),
        "reran": b.msg["calibration"]["reran"],
        "calibration_ms": b.msg["calibration"]["ms"],
    }


def print_runs(title: str, rows: list[dict], cpu: dict[str, float]) -> None:
    """Median and total of the worker's time per run, plain and under the collector, by stage."""
    print(title)
    for side in ("plain", "binary"):
        total = [sum(r[side].values()) for r in rows]
        stages = "  ".join(
            f"{stage} {med(r[side].get(stage, 0.0) for r in rows):6.1f}" for stage in ("compile", "execute")
        )
        print(f"  worker time, {side + ':':7} median {med(total):6.1f} ms  ({stages})  total {sum(total) / 1e3:5.2f} s")
    plain = [sum(r["plain"].values()) for r in rows]
    binary = [sum(r["binary"].values()) for r in rows]
    over = med(b - p for b, p in zip(binary, plain))
    print(f"  per-run overhead: median {over:+.1f} ms, x{med(binary) / med(plain):.1f} (medians)")
    native_c, followed_c = (med(r[side].get("compile", 0.0) for r in rows) for side in ("plain", "binary"))
    ratio = med(r["binary"].get("compile", 0.0) / max(r["plain"].get("compile", 0.0), 1e-9) for r in rows)
    print(
        f"  compile: median {native_c:.1f} ms native, {followed_c:.1f} ms under the collector "
        f"(x{followed_c / max(native_c, 1e-9):.2f} of the medians; median per-model ratio x{ratio:.2f})"
    )
    print(
        f"  round trip: plain median {med(r['plain_rt'] for r in rows):.1f} ms, "
        f"binary {med(r['binary_rt'] for r in rows):.1f} ms (calibration included), "
        f"{sum(r['reran'] for r in rows)} of {len(rows)} re-run to calibrate"
    )
    print(
        f"  worker process CPU per run (calibration and bookkeeping included): plain {cpu['plain']:.1f} ms, "
        f"binary {cpu['binary']:.1f} ms"
    )


def bench_binary(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain = WorkerHandle([args.backend], Path(tmp) / "plain.log")
        binary = WorkerHandle([args.backend], Path(tmp) / "binary.log", collector="binary")
        try:
            plain_start = timed(plain.start)
            binary_start = timed(binary.start)
            u = binary.universe()
            cases = exported_models(plain, args)
            rows, rows_cpu = run_pass(plain, binary, cases, args.backend)
            # The same models again: their blocks are compiled and calibrated already (steady state).
            again, again_cpu = run_pass(plain, binary, cases, args.backend)
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
    print(f"  pass-only ({', '.join(PASS_FILTERS['binary'])}): {int(passes.sum())} slots")
    print(f"worker start: plain {plain_start:.1f} s, binary {binary_start:.1f} s (attach, self-check, warm-up)")

    ok = [r for r in rows if r is not None]
    seen = [r for r in again if r is not None]
    what = "ORT (session creation at ORT_ENABLE_ALL + execute)" if args.backend == "ort" else "TVM (OPT + execute)"
    title = f"\n{len(ok)} of {len(rows)} models ran on {what}, new:"
    print_runs(title, ok, rows_cpu)
    print_runs("the same models again (blocks compiled and calibrated already):", seen, again_cpu)
    cal = [r["calibration_ms"] for r in ok if r["reran"]]
    print(
        f"calibration of the new models: {len(cal)} of {len(ok)} re-run (new slots), "
        f"median {med(cal) if cal else 0:.1f} ms each, {sum(cal) / 1e3:.2f} s in all; {masked} slots masked"
    )
    sizes = [len(r["hits"]) for r in ok]
    print(f"slots per model: median {med(sizes):.0f}, min {min(sizes)}, max {max(sizes)}")
    vmap, wire_ms, update_ms, _ = bookkeeping([r["hits"] for r in ok], len(u))
    print(f"all {len(ok)} together: {vmap.count()} slots, pass-only {vmap.count(passes)}")
    print(
        f"agent: {stats.get('blocks')} blocks counted, {stats.get('outside')} outside every function range, "
        f"{stats.get('fast_returns', 0)} returns with a direct path"
    )
    print_bookkeeping(wire_ms, update_ms)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collector", choices=("python", "binary"), default="python")
    ap.add_argument("--models", type=int, default=None, help="models to measure (python 40, binary 30)")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models-file", default="", help="binary: load the exported models here, or save them here")
    ap.add_argument("--backend", choices=("ort", "tvm"), default="ort", help="binary: the compiler measured")
    args = ap.parse_args(argv)
    args.models = args.models or DEFAULT_MODELS[args.collector]
    (bench_binary if args.collector == "binary" else bench_python)(args)


if __name__ == "__main__":
    main()
