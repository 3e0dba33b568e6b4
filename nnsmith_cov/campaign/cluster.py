"""Workers on a Ray cluster: each worker is a Ray actor that hosts one worker process.

The driver (the `fuzz` process) keeps the one map, scheduler, ledger and corpus; an actor
stands where a local `WorkerHandle`'s subprocess stands. Requests and replies cross the
Ray boundary as msgpack bytes (the wire format of `protocol`), so nothing of the campaign
is pickled and a reply is the same message a local worker gives: records do not depend on
where a test ran.

Faults: a death of the worker process inside an actor (the system under test crashed) comes
back as the local handle reports it, a finding. A death of the actor itself (its node went
away, it was killed) costs the test in flight as a `WorkerFault` (an internal error of the
campaign, never a finding); the next call goes to a fresh actor, wherever Ray places it.

Ray is optional (`pip install 'nnsmith-cov[ray]'`): nothing here imports it before a
campaign asks for a cluster.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from nnsmith_cov.bounded_read import unpack_msgpack
from nnsmith_cov.campaign.worker import CALIBRATION_SHARE
from nnsmith_cov.campaign.worker_handle import Reply, WorkerFault, WorkerHandle, WorkerStartError
from nnsmith_cov.flag_values import cluster_parts

if TYPE_CHECKING:
    from nnsmith_cov.coverage.universe import Universe

INSTALL_HINT = "pip install 'nnsmith-cov[ray]'"
# Seconds a call may take beyond its own timeout before the driver gives up on the actor:
# the hosted handle enforces the timeout itself; this only covers a lost node or a stuck actor.
GRACE_S = 60.0


_owned = False  # whether `connect` started or joined the Ray instance this process is in


class ClusterError(Exception):
    """The cluster cannot be used (Ray missing, no cluster at the address): one line."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where a campaign's workers run: `local` processes, or Ray actors."""

    kind: str  # "local" | "ray"
    address: str | None = None  # ray: None starts a local Ray instance; "auto" or "ray://host:port" joins one

    @property
    def ray(self) -> bool:
        return self.kind == "ray"


def parse_cluster(text: str) -> ClusterSpec:
    """`local`, `ray`, `ray:auto` or `ray://HOST:PORT`; ValueError with the reason otherwise."""
    return ClusterSpec(*cluster_parts(text))


def import_ray() -> Any:
    """The ray module, or ClusterError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--cluster ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def connect(spec: ClusterSpec, num_cpus: int | None = None) -> int:
    """Join (or start) the Ray instance `spec` names; returns its CPUs. A fresh local instance
    gets `num_cpus` (default: this machine's) and this process's import path, so that plug-in
    backends the command line names import in the actors as they do here."""
    global _owned
    ray = import_ray()
    if not ray.is_initialized():
        _owned = True
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "error"}
        try:
            if spec.address is None:
                path = os.pathsep.join(p for p in sys.path if p)
                env = {"env_vars": {"PYTHONPATH": path}}
                ray.init(num_cpus=num_cpus, runtime_env=env, **options)
            else:
                ray.init(address=spec.address, **options)
        except (ConnectionError, RuntimeError, ValueError, ImportError, TimeoutError) as e:
            where = spec.address or "a local instance"
            raise ClusterError(f"cannot use the Ray cluster at {where}: {_first_line(e)}") from None
    return int(ray.cluster_resources().get("CPU", 0))


def worker_kind(cluster: str, workers: int | None) -> tuple[type, int]:
    """The handle class for `--cluster` and how many workers to start: `--workers`, else one
    locally and one per CPU on a Ray cluster (connected here; ClusterError when it cannot be)."""
    spec = parse_cluster(cluster)
    if not spec.ray:
        return WorkerHandle, workers or 1
    cpus = connect(spec, workers if spec.address is None else None)
    return RayWorkerHandle, workers or max(cpus, 1)


def shutdown() -> None:
    """Leave the Ray instance `connect` joined (a local one stops with it); one this process
    had joined before (a test's, a script's) is left to its owner."""
    global _owned
    if _owned and "ray" in sys.modules:
        import ray

        ray.shutdown()
    _owned = False


class WorkerHost:
    """The actor's body: one `WorkerHandle` on the actor's node, called with msgpack bytes."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.handle = WorkerHandle(
            options["backends"],
            Path(options["log_path"]),
            startup_timeout_s=options["startup_timeout_s"],
            collector=options["collector"],
            cov_targets=options["cov_targets"],
            mem_limit_mb=options["mem_limit_mb"],
            calibration_share=options.get("calibration_share", CALIBRATION_SHARE),
        )
        # Recycling points (--recycle-after, --worker-max-rss-mb), kept by the hosted handle.
        self.handle.recycle_after = options.get("recycle_after", 0)
        self.handle.max_rss_mb = options.get("max_rss_mb", 0)

    def pid(self) -> int:
        return os.getpid()

    def start(self) -> bytes:
        return self._guarded(lambda: {"ready": self.handle.start()})

    def universe(self, timeout_s: float) -> bytes:
        return self._guarded(lambda: {"universe": self.handle.universe(timeout_s).to_bytes()})

    def call(self, request: bytes, timeout_s: float, then_s: float | None = None) -> bytes:
        def serve() -> dict[str, Any]:
            reply = self.handle.call(unpack_msgpack(request, "request"), timeout_s, then_s=then_s)
            fields = ("msg", "stage", "died", "hung", "log", "elapsed_ms", "generated")
            return {"reply": {k: getattr(reply, k) for k in fields}}

        return self._guarded(serve)

    def close(self) -> None:
        self.handle.close()

    def _guarded(self, body: Any) -> bytes:
        """The body's answer, or the handle's own exceptions as data (they mean the same on the
        driver's side), with the hosted worker's death count."""
        try:
            out = body()
        except WorkerFault as e:
            out = {"fault": str(e)}
        except WorkerStartError as e:
            out = {"start_error": str(e)}
        counts = {"deaths": self.handle.deaths, "recycles": self.handle.recycles}
        return msgpack.packb(out | counts, use_bin_type=True)


_actor_class: Any = None


def _remote_host() -> Any:
    """WorkerHost as a Ray actor class (made once, when a campaign first asks for one). A
    call is never retried (a test is the driver's to account for), and a lost actor is not
    restarted in place: the handle asks for a new one, which Ray may place on another node
    (a restart in place would fail the calls sent while it is under way)."""
    global _actor_class
    if _actor_class is None:
        ray = import_ray()
        _actor_class = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(WorkerHost)
    return _actor_class


class RayWorkerHandle:
    """The driver's handle on one Ray actor: the calls of `WorkerHandle` (start, call, universe,
    close, deaths), so the campaign, the op-support probe and `run_test` use either alike."""

    def __init__(
        self,
        backends: list[str],
        log_path: Path,
        startup_timeout_s: float = 300.0,
        collector: str = "",
        cov_targets: list[str] | None = None,
        mem_limit_mb: int = 0,
        calibration_share: float = CALIBRATION_SHARE,
    ) -> None:
        self.backends = backends
        self.collector = collector
        self.log_path = log_path  # on the actor's node
        self.startup_timeout_s = startup_timeout_s
        self.options = {
            "backends": list(backends),
            "log_path": str(log_path),
            "startup_timeout_s": startup_timeout_s,
            "collector": collector,
            "cov_targets": list(cov_targets or []),
            "mem_limit_mb": mem_limit_mb,
            "calibration_share": calibration_share,
        }
        self.recycle_after = self.max_rss_mb = 0  # handed to each new actor's worker (0: never)
        self.actor: Any = None
        self.ready: dict[str, Any] = {}
        self.starts = 0
        self.actor_deaths = 0  # actors lost (killed, node gone, unresponsive); Ray made new ones
        self._hosted_deaths = 0  # worker deaths the current actor reported
        self._banked_deaths = 0  # ... and those of the actors before it
        self._hosted_recycles = self._banked_recycles = 0  # recycled worker processes, alike

    @property
    def deaths(self) -> int:
        return self._banked_deaths + self._hosted_deaths + self.actor_deaths

    @property
    def recycles(self) -> int:
        return self._banked_recycles + self._hosted_recycles

    def actor_pid(self) -> int:
        """The process id of the actor (tests kill it)."""
        return int(self._get(self._actor().pid.remote(), self.startup_timeout_s, "pid"))

    def start(self) -> dict[str, Any]:
        try:
            out = self._get(self._actor().start.remote(), self.startup_timeout_s + GRACE_S, "start")
        except WorkerFault as e:
            raise WorkerStartError(str(e)) from None
        self.starts += 1
        self.ready = out["ready"]
        return self.ready

    def universe(self, timeout_s: float = 300.0) -> Universe:
        from nnsmith_cov.coverage.universe import Universe

        try:
            out = self._get(self._actor().universe.remote(timeout_s), timeout_s + GRACE_S, "universe")
        except WorkerFault as e:
            raise WorkerStartError(str(e)) from None
        return Universe.from_bytes(out["universe"])

    def call(
        self,
        request: dict[str, Any],
        timeout_s: float,
        meanwhile: Callable[[], None] | None = None,
        then_s: float | None = None,
    ) -> Reply:
        data = msgpack.packb(request, use_bin_type=True)
        ref = self._actor().call.remote(data, timeout_s, then_s)
        if meanwhile is not None:  # as WorkerHandle.call: the caller's work beside the actor's
            meanwhile()
        out = self._get(ref, timeout_s + GRACE_S, request["kind"])
        return Reply(**out["reply"])

    def close(self) -> None:
        if self.actor is None:
            return
        ray = import_ray()
        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - an actor already gone has nothing left to close
            pass
        ray.kill(self.actor, no_restart=True)
        self.actor = None

    def _actor(self) -> Any:
        if self.actor is None:
            recycle = {"recycle_after": self.recycle_after, "max_rss_mb": self.max_rss_mb}
            self.actor = _remote_host().remote(self.options | recycle)
        return self.actor

    def _get(self, ref: Any, timeout_s: float, what: str) -> Any:
        """The decoded answer of an actor call. A lost actor is a WorkerFault (the test in
        flight is the campaign's loss, not a finding); one that does not answer in time is
        given up too, and the next call gets a new actor."""
        ray = import_ray()
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            data = ray.get(ref, timeout=timeout_s)
        except RayActorError as e:
            self._lost()
            raise WorkerFault(f"Ray actor lost during {what!r}: {_first_line(e)}") from None
        except GetTimeoutError:
            self._lost()
            raise WorkerFault(f"Ray actor did not answer {what!r} in {timeout_s:.0f} s; replaced") from None
        if isinstance(data, int):
            return data
        out = unpack_msgpack(data, "actor reply")
        self._hosted_deaths = out.pop("deaths", 0)
        self._hosted_recycles = out.pop("recycles", 0)
        if "fault" in out:
            raise WorkerFault(out["fault"])
        if "start_error" in out:
            raise WorkerStartError(out["start_error"])
        return out

    def _lost(self) -> None:
        """Give the actor up (killed if it lingers); the next call starts a new one."""
        ray = import_ray()
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)
        self.actor = None
        self.actor_deaths += 1
        self._banked_deaths += self._hosted_deaths
        self._banked_recycles += self._hosted_recycles
        self._hosted_deaths = self._hosted_recycles = 0


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
