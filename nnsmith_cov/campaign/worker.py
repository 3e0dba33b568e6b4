"""The worker process: imports the heavy libraries once, then serves requests from the parent.

Run as `python -m nnsmith_cov.campaign.worker --fd-in R --fd-out W --backends ort,tvm`.
Everything that can crash (PyTorch running a model, the exporter, the compilers)
runs here, so a segfault, an abort or a hang costs only this process. The wire
format is in `protocol.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import resource
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.campaign.protocol import (
    FrameReader,
    decode_arrays,
    encode_arrays,
    read_frame_blocking,
    write_frame,
)

Emit = Callable[[dict[str, Any]], None]

# Calibration reruns may take at most this share of the worker's other busy time, by default
# (`fuzz --calibration-share`; AFL++ also bounds its calibration: AFL_FAST_CAL). TVM's C++
# differs between two runs of one model in tens to hundreds of blocks nearly every time (caches
# filled by the first run), and 53 of a 10-minute TVM campaign's 61 runs reached unseen blocks:
# rerunning each doubled a test's time for flags that only mute hit counts. ORT's runs are short
# beside the export: the budget binds less there.
CALIBRATION_SHARE = 0.25


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

    def __init__(
        self,
        specs: list[str],
        emit: Emit,
        collector: str = "",
        cov_targets: list[str] | None = None,
        ask: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        held_path: str = "",
        calibration_share: float = CALIBRATION_SHARE,
    ) -> None:
        from nnsmith_cov.backends.registry import declare
        from nnsmith_cov.coverage.collector import CollectorError
        from nnsmith_cov.coverage.factory import make_collector

        self.emit = emit
        # The current test's model side (see `propose`), also written to `held_path` so that the
        # worker that replaces this one after a crash can still run the test's other requests.
        self.held: dict[str, Any] | None = None
        self.held_path = held_path
        self._warm_model: tuple[Any, dict[str, Any]] | None = None  # see `_warm_up_model`
        self.busy_s = 0.0  # time spent in requests (`serve`), calibration reruns included
        self.calibration_s = 0.0  # of that, in calibration reruns (see CALIBRATION_SHARE)
        self.calibration_share = calibration_share  # 0: never rerun; inf: every run that reached unseen slots
        self.collector = None
        self.collector_error: str | None = None
        if collector:  # before the backends: a native collector's runtime must be loaded first
            try:
                self.collector = make_collector(collector, cov_targets or [], [declare(s) for s in specs])
            except CollectorError as e:
                self.collector_error = str(e)
        self.backends: dict[str, Any] = {}
        self.unavailable: dict[str, str] = {}
        if self.collector is not None and hasattr(self.collector, "follow_request"):
            self._load_followed(specs, ask)
        else:
            self._load_backends(specs)

    def _load_followed(self, specs: list[str], ask: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
        """Under a collector driven from the parent (binary): have the parent follow the import
        thread, load the backends on it (so the agent sees the module load), then say where it lies."""
        from nnsmith_cov.coverage.collector import CollectorError

        collector = self.collector
        assert collector is not None
        if ask is None:
            self.collector_error = f"{collector.name} collector: needs a parent that attaches to the worker"
            return self._load_backends(specs)
        # Backends that run natively (TVM: measured by a composite's python part, or outside the
        # followed module) load first, here: importing TVM after the agent began following the
        # measuring thread leaves that thread unfollowed (no blocks counted).
        native = [s for s in specs if getattr(collector, "native", lambda _: False)(s)]
        self._load_backends(native)
        followed = [s for s in specs if s not in native]
        answer = ask(collector.follow_request())
        if answer.get("error"):
            self.collector_error = answer["error"]
            return self._load_backends(followed)
        # Backends that can load their libraries alone do only that on the followed thread, and
        # import their packages natively once it is let go (`Backend.load_libraries`).
        later = collector.call(lambda: self._load_libraries(followed))
        try:
            answer = ask(collector.locate_request())
        except CollectorError as e:
            answer = {"error": str(e)}
        if answer.get("error"):
            self.collector_error = answer["error"]
        self._load_backends(later)

    def _load_libraries(self, specs: list[str]) -> list[str]:
        """On the followed import thread: each backend's libraries alone where it can, else the
        whole backend; returns the backends whose packages are still to import."""
        later = [spec for spec in specs if _loaded_libraries(spec)]
        self._load_backends([spec for spec in specs if spec not in later])
        return later

    def measured(self, fn: Callable[[], Any], backend: str = "") -> Any:
        """Run `fn` (a call into `backend`) where the collector sees it: on its measuring thread
        when it has one, unless a composite's thread-less part measures that backend here."""
        if self.collector is not None and self.collector_error is None and hasattr(self.collector, "call"):
            return self.collector.call(fn, backend)
        return fn()

    def _load_backends(self, specs: list[str]) -> None:
        from nnsmith_cov.backends.registry import load_backend

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
        from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET
        from nnsmith_cov.materialize.model_dir import leaf_values

        done = {"kind": "warm"}
        model = self._warm_up_model()
        if model is None:
            return done
        graph, prepared = model
        # The exporter sets itself up anew on its first export at each opset and with symbolic
        # dims: do all of that here too (`graph` itself was exported at MAX_OPSET, static).
        values = leaf_values(graph, decode_arrays(prepared["values"]))
        first = graph.inputs[0]
        for opset in range(MIN_OPSET, MAX_OPSET + 1) if msg.get("exports", True) else ():
            dynamic = [(first, 0)] if opset == MAX_OPSET and graph.types[first].shape else []
            self._export_into({}, dataclasses.replace(graph, opset=opset, dynamic=dynamic), values, covered=False)
        inputs = {k: v for k, v in prepared["values"].items() if k.startswith("i")}
        for spec in msg.get("backends", []):
            if spec in self.backends:  # both levels, and the IR text round trip where there is one
                for opt, trip in (("opt", False), ("O0", False), ("opt", True)):
                    run = {"backend": spec, "opt": opt, "onnx": prepared["onnx"], "inputs": inputs, "roundtrip": trip}
                    self.run(run, covered=False)
        return done

    def _warm_up_model(self) -> tuple[Any, dict[str, Any]] | None:
        """The fixed warm-up model and its prepared side, made on the first warm-up request and
        kept: a worker is warmed in one request per backend (see `WorkerHandle._warm_up`)."""
        from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
        from nnsmith_cov.ops import select_ops

        if self._warm_model is None:
            try:
                graph = generate(GenConfig(nodes=3, ops=select_ops(["Add", "MatMul", "Relu"])), 0).graph
            except GenerationError:
                return None
            request = {"graph": graph.to_json(), "seed": 0, "search": {"method": "sampling", "max_iters": 8}}
            prepared = self.prepare(request, covered=False)
            if prepared.get("onnx") is None:
                return None
            self._warm_model = (graph, prepared)
        return self._warm_model

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
        info = {"name": self.collector.name, "ident": u.ident, "size": len(u), "build": u.build}
        return info | {"self_check": hasattr(self.collector, "call")}

    def self_check(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Run a fixed model natively (this thread) and under the collector (its thread): a collector
        that changes the numbers it observes (Stalker and AVX-512 state) must not feed the oracle."""
        from nnsmith_cov.backends.base import Opt
        from nnsmith_cov.coverage.self_check import compare_runs, fixed_model

        onnx_bytes, inputs = fixed_model()
        runs_natively = getattr(self.collector, "native", lambda _: False)  # run where called: nothing to compare
        for spec, backend in self.backends.items():
            if runs_natively(spec):
                continue
            run = lambda b=backend: b.run(b.compile(b.load(onnx_bytes), Opt.OPT), inputs)
            assert self.collector is not None
            self.collector.start()
            # Followed runs first: the backend's first session makes its lazy CPU checks (ORT's
            # kernel choice), which must happen where the agent hides AVX-512 from them.
            followed = [self.measured(run, spec) for _ in range(2)]
            hits = self.collector.stop()
            problem = compare_runs(run(), followed)
            if problem is None and not len(hits):
                problem = (
                    "the collector counted no blocks (the backend does not run the followed module, "
                    "or the agent lost the measuring thread)"
                )
            if problem is not None:
                return {"kind": "checked", "ok": False, "detail": f"{spec}: {problem}"}
        return {"kind": "checked", "ok": True, "detail": ""}

    def mask(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Slots calibration flagged flaky in earlier workers of the same handle."""
        if self.collector is not None and hasattr(self.collector, "mask"):
            self.collector.mask(np.frombuffer(msg["slots"], dtype="<u4"))
        return {"kind": "masked"}

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
        from nnsmith_cov.materialize.model_dir import value_arrays
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
        search_ms = (time.perf_counter() - t0) * 1e3
        export_ms = self._export_into(reply, graph, search.values, covered)
        if export_ms is None:
            return reply
        return reply | {"ms": {"search": search_ms, "export": export_ms}, "error": None}

    def generate(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Make a proposed test's graph (see `campaign.proposal`) and nothing more: a "made" reply
        (the graph and its record), "gen_failed" or "gen_error". A worker that only generates
        makes the next test's graph while another runs this one (`campaign.ahead`)."""
        from nnsmith_cov.campaign.proposal import call_from_json, config_from_json, generate_proposed, record_json

        self.stage("generate")  # on this (native) thread: a followed measuring thread never generates
        calls = [call_from_json(c) for c in msg["calls"]]
        out = generate_proposed(msg["generator"], calls, config_from_json(msg["fresh"]), msg["seed"])
        if out.error is not None:
            e = out.error
            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            error = {"type": type(e).__name__, "message": str(e), "traceback": text}
            return {"kind": "gen_error", "index": out.index} | error
        if out.gen is None:
            return {"kind": "gen_failed"}
        record, graph = record_json(out.gen.record), out.gen.graph.to_json()
        return {"kind": "made", "index": out.index, "record": record, "graph": graph}

    def propose(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Generate a proposed test's graph (`generate`; or take the one `msg["made"]` carries,
        made ahead elsewhere), then search and export it as `prepare` does. The values and the
        model are held here too (`held`, also on disk): the backend runs of the test name it
        rather than send them back, and a worker that replaces this one after a crash in a run
        still has them. They go back in the reply as well, so that a test the driver keeps
        costs no further round trip before the worker can take the next one."""
        self._drop_held()
        made = msg.get("made") or self.generate(msg)
        if made["kind"] != "made":
            return made
        # Announced before the search: a death there is a finding on this graph.
        self.emit({"kind": "generated", "index": made["index"], "record": made["record"], "graph": made["graph"]})
        reply = self.prepare({"graph": made["graph"], "seed": msg["seed"], "search": msg.get("search", {})})
        self._hold({"test": msg["test"], "values": reply["values"], "onnx": reply["onnx"]})
        return reply

    def _hold(self, held: dict[str, Any]) -> None:
        import msgpack

        self.held = held
        if self.held_path:
            write_atomic(self.held_path, msgpack.packb(held, use_bin_type=True))

    def _drop_held(self) -> None:
        self.held = None
        if self.held_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.held_path)

    def _held(self, test: int) -> dict[str, Any]:
        """Test `test`'s model side: this worker's, or the one a crashed predecessor wrote."""
        from nnsmith_cov.bounded_read import unpack_msgpack

        if self.held is None and self.held_path and os.path.exists(self.held_path):
            with open(self.held_path, "rb") as f:
                self.held = unpack_msgpack(f.read(), "held test")
        if self.held is None or self.held.get("test") != test:
            raise LookupError(f"test {test} is not held by this worker")
        return self.held

    def export(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Export a graph with the values it was stored with (a replay): no search, so the
        model is the stored one even where another PyTorch would search differently."""
        from nnsmith_cov.gen.graph_ir import GraphIR
        from nnsmith_cov.materialize.model_dir import leaf_values
        from nnsmith_cov.ops import is_op

        graph = GraphIR.from_json(msg["graph"], known_op=is_op)
        values = leaf_values(graph, decode_arrays(msg["values"]))
        reply: dict[str, Any] = {"kind": "prepared", "onnx": None}
        export_ms = self._export_into(reply, graph, values)
        if export_ms is None:
            return reply
        return reply | {"ms": {"export": export_ms}, "error": None}

    def _export_into(
        self, reply: dict[str, Any], graph: Any, values: dict[int, Any], covered: bool = True
    ) -> float | None:
        """Export `graph` with `values` (measured) into reply["onnx"]; the time it took in ms,
        or None after an export error, which is then in reply["error"]."""
        from nnsmith_cov.materialize.model_dir import materialize_and_export
        from nnsmith_cov.materialize.onnx_export import ExportError

        self.stage("export")
        t0 = time.perf_counter()
        try:
            with self.covered(reply, covered):
                reply["onnx"] = materialize_and_export(graph, values).onnx
        except ExportError as e:
            reply["error"] = error_record("export", e)
            return None
        return (time.perf_counter() - t0) * 1e3

    def run(self, msg: dict[str, Any], covered: bool = True) -> dict[str, Any]:
        from nnsmith_cov.backends.base import BackendError, Opt, has_roundtrip

        if "test" in msg and "onnx" not in msg:  # a run of the held test
            held = self._held(msg["test"])
            inputs_wire = {k: v for k, v in held["values"].items() if k.startswith("i")}
            msg = msg | {"onnx": held["onnx"], "inputs": inputs_wire}
        backend = self.backends[msg["backend"]]
        inputs = decode_arrays(msg["inputs"])
        steps: list[tuple[str, Callable[[Any], Any]]] = [("import", lambda _: backend.load(msg["onnx"]))]
        if msg.get("roundtrip") and has_roundtrip(backend):
            steps.append(("roundtrip", backend.roundtrip))
        steps += [
            ("compile", lambda model: backend.compile(model, Opt(msg["opt"]))),
            ("execute", lambda exe: backend.run(exe, inputs)),
        ]
        ms: dict[str, float] = {}
        reply: dict[str, Any] = {}

        def once() -> Any:
            result: Any = None
            ms.clear()
            reply.pop("error", None)
            for stage, step in steps:
                self.stage(stage)
                t0 = time.perf_counter()
                try:
                    result = step(result)
                except BackendError as e:
                    reply.update(kind="error", error=error_record(e.stage.value, e))
                    return None
                except Exception as e:  # a plug-in backend that does not tag its errors
                    reply.update(kind="error", error=error_record(stage, e))
                    return None
                ms[stage] = (time.perf_counter() - t0) * 1e3
            return result

        native = bool(msg.get("native"))  # a hang's confirmation: this thread, no collector (see testcase)
        covered = covered and not native
        with self.covered(reply, covered):
            result = once() if native else self.measured(once, msg["backend"])
        if covered and "hits" in reply and hasattr(self.collector, "settle"):
            first_ms = dict(ms)
            rerun_ms = self._calibrate(reply, once, _input_key(msg), msg["backend"])
            ms.clear()
            ms.update(first_ms)  # the timings of the run whose outputs are reported
            if rerun_ms:
                ms["calibrate"] = rerun_ms  # the test's time in its rerun, a stage of its own
        if "error" in reply:
            return reply
        return reply | {"kind": "outputs", "outputs": encode_arrays(result), "ms": ms}

    def _calibrate(self, reply: dict[str, Any], once: Callable[[], Any], key: str, backend: str) -> float:
        """Run again what reached unseen blocks, within the budget (`calibration_share`); the slots
        that differ go back as "unstable" (see `settle`). Returns the rerun's ms (0: none)."""
        from nnsmith_cov.coverage.covmap import Hits

        collector = self.collector
        assert collector is not None

        reran = []

        def again() -> Hits:
            reran.append(True)
            kept = dict(reply)
            collector.start()
            self.measured(once, backend)
            reply.clear()
            reply.update(kept)  # the reply reports the first run
            return collector.stop()

        t0 = time.perf_counter()
        share, spent = self.calibration_share, self.calibration_s
        within = share > 0 and spent / share <= self.busy_s - spent  # (divided: an inf share is always within)
        flicker = collector.settle(Hits.from_wire(reply["hits"]), again if within else None, key)
        took_s = time.perf_counter() - t0
        if reran:
            self.calibration_s += took_s
        reply["calibration"] = {"ms": took_s * 1e3, "reran": bool(reran)}
        if len(flicker):
            reply["unstable"] = flicker.astype("<u4").tobytes()
        return took_s * 1e3 if reran else 0.0


def _input_key(msg: dict[str, Any]) -> str:
    """Identity of one backend run's input (model, inputs, backend, setting)."""
    import hashlib

    h = hashlib.sha256(msg["onnx"])
    h.update(f"\0{msg['backend']}\0{msg['opt']}\0".encode())
    for name in sorted(msg["inputs"]):
        h.update(name.encode() + b"\0" + msg["inputs"][name]["data"])
    return h.hexdigest()[:24]


def _tzer_handle(worker: Worker, msg: dict[str, Any]) -> dict[str, Any]:
    from nnsmith_cov.campaign.tir_request import handle

    return handle(worker, msg)


def _loaded_libraries(spec: str) -> bool:
    """Whether backend `spec` loaded its libraries without its package (`load_libraries`); False
    where it has no such method or the libraries were not found or not loadable alone: the
    package's own import then says why."""
    from nnsmith_cov.backends.registry import library_loader

    load = library_loader(spec)
    if load is None:
        return False
    try:
        load()
    except (ImportError, OSError, RuntimeError):
        return False
    return True


def serve(
    fd_in: int,
    fd_out: int,
    specs: list[str],
    collector: str = "",
    cov_targets: list[str] | None = None,
    held_path: str = "",
    calibration_share: float = CALIBRATION_SHARE,
) -> int:
    emit = lambda m: write_frame(fd_out, m)
    reader = FrameReader()
    early: deque[dict[str, Any]] = deque()  # requests that arrived while the worker waited on the parent

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        """Ask the parent something while starting (the binary collector's attach requests)."""
        emit(request)
        while True:
            msg = read_frame_blocking(fd_in, reader)
            if msg is None:
                sys.exit(0)
            if msg["kind"] == "attached":
                return msg
            early.append(msg)

    worker = Worker(specs, emit, collector, cov_targets, ask, held_path, calibration_share)
    handlers = {
        "hello": worker.hello,
        "prepare": worker.prepare,
        "propose": worker.propose,
        "generate": worker.generate,
        "export": worker.export,
        "run": worker.run,
        "universe": worker.universe,
        "warm_up": worker.warm_up,
        "self_check": worker.self_check,
        "mask": worker.mask,
        "tir": lambda msg: _tzer_handle(worker, msg),  # the Tzer baseline's TIR tests
    }
    while True:
        msg = early.popleft() if early else read_frame_blocking(fd_in, reader)
        if msg is None or msg["kind"] == "exit":
            return 0
        handler = handlers.get(msg["kind"])
        if handler is None:
            emit({"kind": "fault", "message": f"unknown request {msg['kind']!r}"})
            continue
        t0 = time.perf_counter()
        try:
            reply = handler(msg)
            worker.busy_s += time.perf_counter() - t0  # what calibration's budget is a share of
            emit(reply)
        except Exception as e:  # a fault of ours, not of the system under test: report it, keep serving
            emit({"kind": "fault", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


def main() -> int:
    ap = argparse.ArgumentParser(prog="nnsmith-cov-worker")
    ap.add_argument("--fd-in", type=int, required=True)
    ap.add_argument("--fd-out", type=int, required=True)
    ap.add_argument("--backends", default="")
    ap.add_argument("--collector", default="")
    ap.add_argument("--cov-targets", default="")
    ap.add_argument("--mem-limit-mb", type=int, default=0)
    ap.add_argument("--held", default="", help="where the current test's model side is kept")
    ap.add_argument("--plugins", default="", help="plug-in modules to import, their backends not served")
    ap.add_argument("--calibration-share", type=float, default=CALIBRATION_SHARE)
    args = ap.parse_args()
    # Crashing the systems under test is the point: a core file per segfault (hundreds of MB
    # each, in the campaign's working folder) would fill the disk over a long campaign.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if args.mem_limit_mb > 0:
        # A system under test that exhausts memory fails its allocation here (MemoryError,
        # std::bad_alloc: an "oom" finding) instead of taking the machine's memory from the campaign.
        limit = args.mem_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import torch

    torch.set_num_threads(1)  # one core per worker; parallelism comes from more workers
    split = lambda text: [s for s in text.split(",") if s]
    for module in split(args.plugins):
        importlib.import_module(module)
    targets = split(args.cov_targets)
    return serve(
        args.fd_in, args.fd_out, split(args.backends), args.collector, targets, args.held, args.calibration_share
    )


if __name__ == "__main__":
    sys.exit(main())
