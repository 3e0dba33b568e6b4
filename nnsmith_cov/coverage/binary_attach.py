"""The binary collector, parent side: attach Frida to a worker and answer its attach requests.

A worker measuring with the binary collector sends {"kind": "attach", "phase": ...}
frames while it starts (see `binary_collector`); `WorkerHandle` hands each one to the
worker's `Attachment` and sends back {"kind": "attached"} (with "error" when it failed):

    att = Attachment()
    att.handle(follow_request)    # frida.attach(pid), load the agent, follow the thread
    att.handle(locate_request)    # the module is loaded: count its blocks from now on
    att.close()                   # the worker exits or died; a fresh worker gets a fresh one
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

from nnsmith_cov.coverage.binary_agent import agent_source
from nnsmith_cov.coverage.collector import CollectorError

ATTACH_TIMEOUT_S = 30.0


class Attachment:
    """One Frida session into one worker process."""

    def __init__(self) -> None:
        self.session: Any = None
        self.script: Any = None
        self.pid = 0

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one attach request; failures become one line under "error"."""
        try:
            if request["phase"] == "follow":
                self.follow(request)
            elif request["phase"] == "locate":
                self.locate(request)
            else:
                raise CollectorError(f"binary collector: unknown attach phase {request['phase']!r}")
        except CollectorError as e:
            return {"kind": "attached", "error": str(e)}
        return {"kind": "attached"}

    def follow(self, params: dict[str, Any]) -> None:
        try:
            import frida
        except ImportError:
            raise CollectorError("binary collector: the frida package is not installed (pip install frida)") from None
        self.close()
        self.pid = int(params["pid"])
        try:
            self.session = frida_attach(self.pid)
            self.script = self.session.create_script(agent_source())
            self.script.load()
            self.script.exports_sync.init(_agent_params(params))
        except (frida.InvalidOperationError, frida.ProcessNotFoundError, frida.PermissionDeniedError) as e:
            raise CollectorError(f"binary collector: cannot attach to worker {self.pid}: {e}") from None
        except frida.core.RPCException as e:
            raise CollectorError(f"binary collector: the agent failed in worker {self.pid}: {_first(e)}") from None

    def locate(self, params: dict[str, Any]) -> None:
        if self.script is None:
            raise CollectorError("binary collector: locate before follow")
        import frida

        try:
            self.script.exports_sync.locate(_agent_params(params))
        except (frida.InvalidOperationError, frida.core.RPCException) as e:
            raise CollectorError(f"binary collector: the agent failed in worker {self.pid}: {_first(e)}") from None

    def stats(self) -> dict[str, int]:
        """Blocks the agent instrumented so far, and module blocks outside every function range."""
        return dict(self.script.exports_sync.stats()) if self.script is not None else {}

    def close(self) -> None:
        """Detach (harmless when the worker is gone already)."""
        session, self.session, self.script = self.session, None, None
        if session is not None:
            try:
                session.detach()
            except Exception:  # frida raises its own types for a process that has gone; nothing to keep
                pass


_frida_dir: str | None = None  # this process's folder for Frida's helper files, once it has one


def frida_attach(pid: int) -> Any:
    """`frida.attach(pid)`, with Frida's helper files in a folder of this process's own that goes at exit.

    Frida unpacks its injector daemon (10 MB) into a fresh folder under the temp dir on its
    first attach and never removes it: one left behind per campaign. GLib reads TMPDIR once,
    on that first attach, so pointing it at a private folder for that call is enough; the
    window is short and comes before a campaign starts its worker threads.
    """
    import frida

    global _frida_dir
    if _frida_dir is not None:
        return frida.attach(pid)
    _frida_dir = tempfile.mkdtemp(prefix="nncov-frida-")
    atexit.register(_remove, _frida_dir, os.getpid())
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = _frida_dir
    try:
        return frida.attach(pid)
    finally:
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old


def _remove(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child exiting leaves its parent's daemon its files
        shutil.rmtree(folder, ignore_errors=True)


def _agent_params(request: dict[str, Any]) -> dict[str, Any]:
    keys = ("tid", "base", "lo", "hi", "map", "n", "start", "length", "slot_base", "slot_mask", "clear_avx512")
    return {k: request[k] for k in keys} | {"exclude": request.get("exclude", [])}


def _first(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
