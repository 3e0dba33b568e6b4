"""The worker process: imports the heavy libraries once, then serves requests from the parent.

Run as `python -m nnsmith_cov.campaign.worker --fd-in R --fd-out W --backends ort,tvm`.
Everything that can crash (PyTorch running a model, the exporter, the compilers)
runs here, so a segfault, an abort or a hang costs only this process. The wire
format is in `protocol.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from nnsmith_cov.campaign.protocol import (
    FrameReader,
    decode_arrays,
    encode_arrays,
    read_frame_blocking,
    write_frame,
)

Emit = Callable[[dict[str, Any]], None]


def error_record(stage: str, e: BaseException) -> dict[str, str]:
    cause = e.__cause__ or e
    return {
        "stage": stage,
        "type": type(cause).__name__,
        "message": str(cause),
        "traceback": "".join(traceback.format_exception(cause)),
    }


class Worker:
    """Request handlers; `emit` sends a message to the parent.

    With a collector, the stages that exercise the systems under test (export, and
    every backend step) run under it, and each reply carries their `hits`.
    """

    def __init__(self, specs: list[str], emit: Emit, collector: str = "", cov_targets: list[str] | None = None) -> None:
        from nnsmith_cov.backends.registry import load_backend
        from nnsmith_cov.coverage.collector import CollectorError, make_collector

        self.emit = emit
        self.collector = None
        self.collector_error: str | None = None
        if collector:  # before the backends: a native collector's runtime must be loaded first
            try:
                self.collector = make_collector(collector, cov_targets or [])
            except CollectorError as e:
                self.collector_error = str(e)
        self.backends: dict[str, Any] = {}
        self.unavailable: dict[str, str] = {}
        for spec in specs:
            try:
                backend = load_backend(spec)
                reason = backend.unavailable()
            except (ImportError, AttributeError) as e:
                backend, reason = None, f"cannot load backend {spec}: {e}"
            if reason:
                self.unavailable[spec] = reason.splitlines()[0]
            else:
                self.backends[spec] = backend

    def stage(self, stage: str) -> None:
        self.emit({"kind": "stage", "stage": stage})

    def hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        import torch

        versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
        versions |= {spec: b.version() for spec, b in self.backends.items()}
        reply = {"kind": "ready", "pid": os.getpid(), "versions": versions, "unavailable": self.unavailable}
        return reply | {"collector": self.collector_info()}

    def warm_up(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Export and run a small fixed model once, unmeasured: the first test in a process
        would otherwise also cover one-time set-up code (lazy imports, registries, caches),
        and a test's coverage would depend on whether its worker was fresh."""
        from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
        from nnsmith_cov.ops import select_ops

        done = {"kind": "warm"}
        try:
            graph = generate(GenConfig(nodes=3, ops=select_ops(["Add", "MatMul", "Relu"])), 0).graph
        except GenerationError:
            return done
        request = {"graph": graph.to_json(), "seed": 0, "search": {"method": "sampling", "max_iters": 8}}
        prepared = self.prepare(request, covered=False)
        if prepared.get("onnx") is None:
            return done
        inputs = {k: v for k, v in prepared["values"].items() if k.startswith("i")}
        for spec in msg.get("backends", []):
            if spec in self.backends:
                for opt in ("opt", "O0"):
                    run = {"backend": spec, "opt": opt, "onnx": prepared["onnx"], "inputs": inputs}
                    self.run(run, covered=False)
        return done

    def collector_info(self) -> dict[str, Any] | None:
        from nnsmith_cov.coverage.collector import CollectorError

        if self.collector_error is not None:
            return {"error": self.collector_error}
        if self.collector is None:
            return None
        try:
            u = self.collector.universe()
        except CollectorError as e:
            self.collector_error = str(e)
            return {"error": self.collector_error}
        return {"name": self.collector.name, "ident": u.ident, "size": len(u), "build": u.build}

    def universe(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.collector is not None and self.collector_error is None, "no collector in this worker"
        return {"kind": "universe", "data": self.collector.universe().to_bytes()}

    @contextlib.contextmanager
    def covered(self, reply: dict[str, Any], on: bool = True) -> Iterator[None]:
        """Run the body under the collector; its hits go into `reply["hits"]` however it ends."""
        if not on or self.collector is None or self.collector_error is not None:
            yield
            return
        self.collector.start()
        try:
            yield
        finally:
            reply["hits"] = self.collector.stop().to_wire()

    def prepare(self, msg: dict[str, Any], covered: bool = True) -> dict[str, Any]:
        from nnsmith_cov.gen.graph_ir import GraphIR
        from nnsmith_cov.materialize.model_dir import materialize_and_export, value_arrays
        from nnsmith_cov.materialize.onnx_export import ExportError
        from nnsmith_cov.materialize.torch_module import output_name
        from nnsmith_cov.ops import is_op
        from nnsmith_cov.search.gradient import search_values

        graph = GraphIR.from_json(msg["graph"], known_op=is_op)
        reply: dict[str, Any] = {"kind": "prepared", "search": None, "values": {}, "oracle": None, "onnx": None}
        self.stage("reference")
        t0 = time.perf_counter()
        try:
            search = search_values(graph, msg["seed"], **msg.get("search", {}))
        except Exception as e:  # PyTorch itself failed on a valid graph: a finding
            return reply | {"error": error_record("reference", e)}
        reply["search"] = search.summary()
        reply["values"] = encode_arrays(value_arrays(graph, search.values))
        if not search.ok:
            return reply | {"error": None}
        reply["oracle"] = encode_arrays({output_name(v): a for v, a in search.oracle.items()})
        self.stage("export")
        t1 = time.perf_counter()
        try:
            with self.covered(reply, covered):
                reply["onnx"] = materialize_and_export(graph, search.values).onnx
        except ExportError as e:
            return reply | {"error": error_record("export", e)}
        reply["ms"] = {"search": (t1 - t0) * 1e3, "export": (time.perf_counter() - t1) * 1e3}
        return reply | {"error": None}

    def run(self, msg: dict[str, Any], covered: bool = True) -> dict[str, Any]:
        from nnsmith_cov.backends.base import BackendError, Opt

        backend = self.backends[msg["backend"]]
        inputs = decode_arrays(msg["inputs"])
        steps = (
            ("import", lambda _: backend.load(msg["onnx"])),
            ("compile", lambda model: backend.compile(model, Opt(msg["opt"]))),
            ("execute", lambda exe: backend.run(exe, inputs)),
        )
        ms: dict[str, float] = {}
        result: Any = None
        reply: dict[str, Any] = {}
        with self.covered(reply, covered):
            for stage, step in steps:
                self.stage(stage)
                t0 = time.perf_counter()
                try:
                    result = step(result)
                except BackendError as e:
                    reply |= {"kind": "error", "error": error_record(e.stage.value, e)}
                    break
                except Exception as e:  # a plug-in backend that does not tag its errors
                    reply |= {"kind": "error", "error": error_record(stage, e)}
                    break
                ms[stage] = (time.perf_counter() - t0) * 1e3
        if "error" in reply:
            return reply
        return reply | {"kind": "outputs", "outputs": encode_arrays(result), "ms": ms}


def serve(fd_in: int, fd_out: int, specs: list[str], collector: str = "", cov_targets: list[str] | None = None) -> int:
    emit = lambda m: write_frame(fd_out, m)
    worker = Worker(specs, emit, collector, cov_targets)
    handlers = {
        "hello": worker.hello,
        "prepare": worker.prepare,
        "run": worker.run,
        "universe": worker.universe,
        "warm_up": worker.warm_up,
    }
    reader = FrameReader()
    while True:
        msg = read_frame_blocking(fd_in, reader)
        if msg is None or msg["kind"] == "exit":
            return 0
        handler = handlers.get(msg["kind"])
        if handler is None:
            emit({"kind": "fault", "message": f"unknown request {msg['kind']!r}"})
            continue
        try:
            emit(handler(msg))
        except Exception as e:  # a fault of ours, not of the system under test: report it, keep serving
            emit({"kind": "fault", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


def main() -> int:
    ap = argparse.ArgumentParser(prog="nnsmith-cov-worker")
    ap.add_argument("--fd-in", type=int, required=True)
    ap.add_argument("--fd-out", type=int, required=True)
    ap.add_argument("--backends", default="")
    ap.add_argument("--collector", default="")
    ap.add_argument("--cov-targets", default="")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # one core per worker; parallelism comes from more workers
    split = lambda text: [s for s in text.split(",") if s]
    return serve(args.fd_in, args.fd_out, split(args.backends), args.collector, split(args.cov_targets))


if __name__ == "__main__":
    sys.exit(main())
