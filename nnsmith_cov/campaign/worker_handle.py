"""The parent's handle on one worker process: start it, call it with a timeout, replace it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nnsmith_cov.campaign.protocol import FrameReader, ProtocolError, write_frame
from nnsmith_cov.campaign.resources import rss_kb
from nnsmith_cov.campaign.worker import CALIBRATION_SHARE

if TYPE_CHECKING:
    from nnsmith_cov.coverage.universe import Universe

# Worker libraries get one thread each: results do not depend on the pool size,
# and N workers on N cores do not fight.
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "TVM_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
LOG_LIMIT = 8 << 20  # a worker log past this is cut at the next call
START_TRIES = 5  # starts of a worker that keeps dying before its hello (see `WorkerHandle.start`)
# One backend's warm-up (three runs of a 3-node model, natively): past this it is hung there
# and left out of later warm-ups, so a backend that hangs on the fixed model costs a campaign
# this once rather than a worker start's whole limit.
WARM_UP_TIMEOUT_S = 120.0
_TEST_START = ("prepare", "propose", "generate", "export")  # a test's first request: where a worker is recycled


class WorkerStartError(Exception):
    """The worker could not start (its log tail says why)."""


class WorkerFault(Exception):
    """The worker hit an error in nnsmith-cov's own code (not in a system under test)."""


@dataclass
class Reply:
    """How a call ended: with a message, with the worker's death, or with a timeout."""

    msg: dict[str, Any] | None
    stage: str | None  # the last stage the worker announced
    died: str | None = None  # "SIGSEGV", "SIGABRT", "exit status 3"
    hung: bool = False
    log: str = ""  # what the worker printed during the call (its tail)
    elapsed_ms: float = 0.0
    # A proposal's graph, announced before its search (it survives the worker's death there)
    generated: dict[str, Any] | None = None


def death_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class WorkerHandle:
    """One worker subprocess serving `backends`; replaced transparently after a death or hang."""

    def __init__(
        self,
        backends: list[str],
        log_path: Path,
        startup_timeout_s: float = 300.0,
        collector: str = "",
        cov_targets: list[str] | None = None,
        mem_limit_mb: int = 0,
        recycle_after: int = 0,
        max_rss_mb: int = 0,
        plugins: list[str] | None = None,
        warm_up_timeout_s: float = WARM_UP_TIMEOUT_S,
        calibration_share: float = CALIBRATION_SHARE,
    ) -> None:
        self.backends = backends
        # Plug-in modules the worker imports without serving their backends (a generator's: what
        # they change in the generator where they run, they change there too; see `campaign.ahead`)
        self.plugins = plugins or []
        # Recycling (AFL++'s fork mode, libFuzzer's -rss_limit_mb): a fresh worker after this
        # many tests, or once the worker's resident memory passes max_rss_mb (0: never).
        self.recycle_after, self.max_rss_mb = recycle_after, max_rss_mb
        self.tests = 0  # tests begun on the current worker process
        self.recycles = 0
        self.mem_limit_mb = mem_limit_mb  # the worker's address-space limit (0: none)
        self.collector = collector
        self.cov_targets = cov_targets or []
        self.calibration_share = calibration_share  # the worker's budget for calibration reruns
        self.warm_backends = list(backends)
        self.log_path = log_path
        # The current test's model side, written by the worker (see `Worker.propose`): a worker
        # started after a crash reads it to run the rest of the test.
        self.held_path = log_path.with_name(log_path.name + ".held")
        self.startup_timeout_s = startup_timeout_s
        self.warm_up_timeout_s = warm_up_timeout_s
        self.warm_exports = True  # the warm-up's exports (see `_warm_up`)
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.deaths = 0  # crashes and hangs; each is followed by a fresh worker at the next call
        self.start_retries = 0  # workers that died while starting and were started again
        self.ready: dict[str, Any] = {}
        self._to_child = self._from_child = -1
        self._reader = FrameReader()
        self.attachment: Any = None  # the binary collector's Frida session into the worker
        self.unstable = np.zeros(0, np.uint32)  # slots calibration found flaky, handed to every new worker

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Start the worker if it is not running; returns its hello reply. A worker that dies
        while starting (before its hello) is started again, START_TRIES times in all: a safety
        net. Under the binary collector following TVM's library, about two starts in five died
        in Frida's translated code (Stalker linked jumps between slabs placed over 2 GB apart)
        until the agent kept each context's slabs together (`coverage/binary_agent.py`)."""
        if self.proc is not None and self.proc.poll() is None:
            return self.ready
        for tries in range(1, START_TRIES + 1):
            reply = self._spawn()
            if reply.msg is not None or not reply.died or tries == START_TRIES:
                break
            self.deaths -= 1  # a death while starting is no test's
            self.start_retries += 1
            self.close()
        if reply.msg is None or reply.msg.get("kind") != "ready":
            how = "did not answer in time" if reply.hung else (reply.died or "answered wrongly")
            tail = reply.log.strip().splitlines()[-1:] or ["(no output)"]
            self.close()
            retried = f" (started {START_TRIES} times)" if reply.died else ""
            raise WorkerStartError(f"worker {how}{retried}: {tail[0]}")
        problem = (reply.msg.get("collector") or {}).get("error")
        if problem:
            self.close()
            raise WorkerStartError(problem)
        self.ready = reply.msg
        if (reply.msg.get("collector") or {}).get("self_check"):
            self._self_check()
        if self.collector:
            self._warm_up()
        return self.ready

    def _spawn(self) -> Reply:
        """A fresh worker process, and its answer to hello."""
        self._reap()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = os.environ | _WORKER_ENV | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            cmd = [sys.executable, "-m", "nnsmith_cov.campaign.worker", "--fd-in", str(req_r), "--fd-out", str(rep_w)]
            if self.collector:
                cmd += ["--collector", self.collector, "--cov-targets", ",".join(self.cov_targets)]
                cmd += ["--calibration-share", repr(self.calibration_share)]
            if self.mem_limit_mb > 0:
                cmd += ["--mem-limit-mb", str(self.mem_limit_mb)]
            cmd += ["--held", str(self.held_path)]
            if self.plugins:
                cmd += ["--plugins", ",".join(self.plugins)]
            self.proc = subprocess.Popen(
                [*cmd, "--backends", ",".join(self.backends)],
                pass_fds=(req_r, rep_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches the parent only
            )
        os.close(req_r)
        os.close(rep_w)
        self._to_child, self._from_child = req_w, rep_r
        self._reader = FrameReader()
        self.starts += 1
        self.tests = 0
        return self.call({"kind": "hello"}, self.startup_timeout_s)

    def _self_check(self) -> None:
        """A collector that rewrites code must leave the numbers alone: refuse a worker where it does not."""
        if len(self.unstable):
            self.call({"kind": "mask", "slots": self.unstable.astype("<u4").tobytes()}, self.startup_timeout_s)
        reply = self.call({"kind": "self_check"}, self.startup_timeout_s)
        if reply.msg is None:
            self.deaths -= 1  # a death on the fixed check model is no test's finding
        if reply.msg is None or not reply.msg.get("ok"):
            how = reply.msg["detail"] if reply.msg else f"worker {reply.died or 'hung'} during the self-check"
            self.close()
            raise WorkerStartError(f"{self.collector} collector self-check failed: {how}")

    def _warm_up(self) -> None:
        """Let a measuring worker run set-up code unmeasured (see `Worker.warm_up`): the exports
        first, then each backend in a call of its own. What kills the worker or hangs on the
        warm-up model (the exports, or one backend) is left out of later warm-ups, alone."""
        # None stands for the exports; each backend is a step of its own.
        steps: list[str | None] = ([None] if self.warm_exports else []) + list(self.warm_backends)
        for spec in steps:
            request = {"kind": "warm_up", "backends": [] if spec is None else [spec], "exports": spec is None}
            reply = self.call(request, self.startup_timeout_s if spec is None else self.warm_up_timeout_s)
            if reply.msg is None:
                self.deaths -= 1  # a death on the fixed warm-up model is no test's finding
                if spec is None:
                    self.warm_exports = False
                else:
                    self.warm_backends.remove(spec)
                self.start()  # warms the fresh worker with what is left
                return

    def rss_kb(self) -> int:
        """The worker's resident memory in KiB (0 when none runs)."""
        return rss_kb(self.proc.pid) if self.proc is not None and self.proc.poll() is None else 0

    def _recycle_due(self) -> str | None:
        if self.proc is None or self.proc.poll() is not None or self.tests == 0:
            return None  # a fresh worker already over the memory limit is not replaced again and again
        if self.recycle_after and self.tests >= self.recycle_after:
            return f"after {self.tests} tests"
        if self.max_rss_mb and self.rss_kb() > self.max_rss_mb << 10:
            return f"at {self.rss_kb() >> 10} MiB resident"
        return None

    def recycle(self) -> None:
        """Replace a live worker by a fresh one, as after a crash but counted apart: the
        fresh one is warmed up the same way, so what the next test measures does not
        depend on when the worker was replaced."""
        self.close()
        self.recycles += 1
        self.start()

    def universe(self, timeout_s: float = 300.0) -> Universe:
        """The branch universe of the worker's collector."""
        from nnsmith_cov.coverage.universe import Universe

        self.start()
        reply = self.call({"kind": "universe"}, timeout_s)
        if reply.msg is None or reply.msg.get("kind") != "universe":
            how = "timed out" if reply.hung else (reply.died or f"answered {reply.msg and reply.msg.get('kind')!r}")
            raise WorkerStartError(f"worker sent no branch universe ({how})")
        return Universe.from_bytes(reply.msg["data"])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                write_frame(self._to_child, {"kind": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._kill()
        self._reap()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _reap(self) -> None:
        if self.attachment is not None:
            self.attachment.close()
        self.attachment = None
        for fd in (self._to_child, self._from_child):
            if fd >= 0:
                os.close(fd)
        self._to_child = self._from_child = -1
        self.proc = None

    # -- calls -------------------------------------------------------------------
    def call(
        self,
        request: dict[str, Any],
        timeout_s: float,
        meanwhile: Callable[[], None] | None = None,
        then_s: float | None = None,
    ) -> Reply:
        """Send `request`, wait for its final reply for at most `timeout_s` seconds; `meanwhile`
        runs once the request is sent, before the wait (the caller's own work, beside the worker's);
        `then_s`: once the worker says its graph is made, at most that many seconds more."""
        if self.proc is None and request["kind"] != "hello":
            self.start()
        if request["kind"] in _TEST_START:
            if self._recycle_due() is not None:
                self.recycle()
            self.tests += 1
        log_start = self._log_size()
        if log_start > LOG_LIMIT:
            os.truncate(self.log_path, 0)  # the child appends (O_APPEND), so cutting is safe
            log_start = 0
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        stage = None
        generated = None
        try:
            write_frame(self._to_child, request)
            sent = True
        except BrokenPipeError:
            sent = False
        if meanwhile is not None:
            try:
                meanwhile()
            except BaseException:
                self._kill()  # its reply would be read as the next call's: the next call starts afresh
                self._reap()
                raise
        if not sent:
            return self._dead(stage, log_start, t0)
        while True:
            try:
                msg = self._reader.next()
            except ProtocolError:
                self._kill()
                return self._dead(stage, log_start, t0, generated)
            if msg is not None:
                if msg["kind"] == "stage":
                    stage = msg["stage"]
                    continue
                if msg["kind"] == "generated":
                    generated = msg
                    if then_s is not None:
                        deadline = min(deadline, time.monotonic() + then_s)
                    continue
                if msg["kind"] == "attach":  # the worker asks to be followed (binary collector)
                    write_frame(self._to_child, self._attach(msg))
                    continue
                if "unstable" in msg:  # kept in the reply too: the test's result carries it to the ledger
                    self.unstable = np.union1d(self.unstable, np.frombuffer(msg["unstable"], "<u4"))
                if msg["kind"] == "fault":
                    raise WorkerFault(msg["message"] + "\n" + msg.get("traceback", ""))
                elapsed = (time.monotonic() - t0) * 1e3
                return Reply(msg, stage, log=self._log_since(log_start), elapsed_ms=elapsed, generated=generated)
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                reply = self._dead(stage, log_start, t0, generated)
                reply.died, reply.hung = None, True
                return reply
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                data = os.read(self._from_child, 1 << 20)
                if not data:
                    return self._dead(stage, log_start, t0, generated)
                self._reader.feed(data)

    def _attach(self, request: dict[str, Any]) -> dict[str, Any]:
        from nnsmith_cov.coverage.binary_attach import Attachment

        if self.attachment is None:
            self.attachment = Attachment()
        return self.attachment.handle(request)

    def _dead(self, stage: str | None, log_start: int, t0: float, generated: dict[str, Any] | None = None) -> Reply:
        assert self.proc is not None
        self.deaths += 1
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # closed its pipe but lives on: finish it
            self._kill()
            code = self.proc.returncode
        self._reap()
        elapsed = (time.monotonic() - t0) * 1e3
        log = self._log_since(log_start)
        return Reply(None, stage, died=death_name(code), log=log, elapsed_ms=elapsed, generated=generated)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _log_since(self, offset: int, limit: int = 64 << 10) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(offset, self._log_size() - limit))
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""


def recycling(handle: object, after_tests: int, max_rss_mb: int) -> None:
    """Set a worker's recycling points (--recycle-after, --worker-max-rss-mb): a local handle
    applies them itself, a Ray handle hands them to the handle its actor hosts."""
    if hasattr(handle, "recycle_after") and hasattr(handle, "max_rss_mb"):
        handle.recycle_after, handle.max_rss_mb = after_tests, max_rss_mb
