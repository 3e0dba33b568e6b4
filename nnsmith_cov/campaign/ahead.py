"""Generation one test ahead, in a worker process of its own.

A test spends about half of a worker's time making its graph (Z3), the rest searching
values, exporting and running the systems under test. With a core to spare, a second,
backend-less worker (the generator) makes test k+1's graph while the test's worker
searches, exports and runs test k; the test's worker then takes the graph as made
(`Worker.propose` with "made"). Test k+1 is numbered and proposed before test k's result
is in, as it is with two workers: the scheduler sees every result but the last one.

The generator is a worker like any other (`WorkerHandle`): it dies, hangs and is replaced
the same way, and what it reports is what generation in the test's worker reports
(`testcase.propose` turns a "made" reply into the same outcomes). Nothing measured runs
in it, so a crash there is our own (an internal error), never a finding.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnsmith_cov.campaign.worker_handle import Reply, WorkerHandle


def generators_fit(workers: int, cores: int | None = None) -> bool:
    """Whether each of `workers` test workers can have a generator of its own beside it: one
    core each (with fewer, the processes would only take turns on the same cores)."""
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    return 2 * workers <= cores


@dataclass
class Pending:
    """A test taken ahead: what it is (the loop's own record of it), the request that makes its
    graph, and how that ended (the generator's reply, or our own error while proposing it)."""

    test: Any
    request: dict[str, Any] | None = None  # None: a probe's graph, given (nothing to generate)
    probe: Any = None
    reply: Reply | None = None
    error: BaseException | None = None


class Generator:
    """The generator worker of one test worker, and the test it is making ahead (at most one)."""

    def __init__(self, log_path: Path, backends: list[str], mem_limit_mb: int = 0) -> None:
        # No backend is served here, but a plug-in backend's module is imported as in the test's
        # worker: whatever it changes in generation (a test's injected faults) holds here too.
        plugins = [spec.split(":", 1)[0] for spec in backends if ":" in spec]
        self.handle = WorkerHandle([], log_path, mem_limit_mb=mem_limit_mb, plugins=plugins)
        self._pending: Pending | None = None
        self._thread: threading.Thread | None = None

    @property
    def deaths(self) -> int:
        return self.handle.deaths

    def start(self) -> None:
        self.handle.start()

    def busy(self) -> bool:
        """A test is taken ahead and not yet handed over."""
        return self._pending is not None

    def hold(self, pending: Pending, timeout_s: float = 0.0) -> None:
        """Take `pending` ahead; with a request, its graph is made now, on a thread of ours."""
        assert self._pending is None, "one test ahead at most"
        self._pending = pending
        if pending.request is None or pending.error is not None:
            return
        request = pending.request | {"kind": "generate"}

        def make() -> None:
            try:
                pending.reply = self.handle.call(request, timeout_s)
            except BaseException as e:  # noqa: BLE001 - handed to the loop with the test (WorkerFault)
                pending.error = e

        self._thread = threading.Thread(target=make, name="nncov-generate", daemon=True)
        self._thread.start()

    def take(self) -> Pending:
        """The test taken ahead, its graph made (or its error)."""
        assert self._pending is not None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        pending, self._pending = self._pending, None
        return pending

    def close(self) -> None:
        """Stop the generator; a test taken ahead and not handed over is dropped (its number unused)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._pending = None
        self.handle.close()
