"""Generation ahead of the tests, in a worker process of its own.

A test spends about half of a worker's time making its graph (Z3), the rest searching
values, exporting and running the systems under test. With a core to spare, a second,
backend-less worker (the generator) makes the graphs of tests k+1 and k+2 while the test's
worker searches, exports and runs test k; the test's worker then takes each graph as made
(`Worker.propose` with "made"). Test k+2 is numbered and proposed before the results of
tests k and k+1 are in, as it is with three workers: a proposal reads every result but the
last two.

The generator is a worker like any other (`WorkerHandle`): it dies, hangs and is replaced
the same way, and what it reports is what generation in the test's worker reports
(`testcase.propose` turns a "made" reply into the same outcomes). Nothing measured runs
in it, so a crash there is our own (an internal error), never a finding.
"""

from __future__ import annotations

import os
import threading
from collections import deque
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
    """The generator worker of one test worker, and the tests it makes ahead (`depth` at most, in
    the order they were taken; its graphs are made one after another, as one worker makes them).

    Two ahead, not one: a graph's time has a long tail (Z3 on products of symbolic dims), and
    with one ahead each slow graph held the test's worker, which had finished its test and
    waited for the next; with two, a slow graph is made while the worker still runs the one
    before. The cost: a test is proposed two results late instead of one."""

    def __init__(self, log_path: Path, backends: list[str], mem_limit_mb: int = 0, depth: int = 2) -> None:
        # No backend is served here, but a plug-in backend's module is imported as in the test's
        # worker: whatever it changes in generation (a test's injected faults) holds here too.
        plugins = [spec.split(":", 1)[0] for spec in backends if ":" in spec]
        self.handle = WorkerHandle([], log_path, mem_limit_mb=mem_limit_mb, plugins=plugins)
        self.depth = depth
        self._ahead: deque[tuple[Pending, threading.Thread | None]] = deque()

    @property
    def deaths(self) -> int:
        return self.handle.deaths

    def start(self) -> None:
        self.handle.start()

    def busy(self) -> bool:
        """A test is taken ahead and not yet handed over."""
        return bool(self._ahead)

    def full(self) -> bool:
        """As many tests are taken ahead as it makes."""
        return len(self._ahead) >= self.depth

    def hold(self, pending: Pending, timeout_s: float = 0.0) -> None:
        """Take `pending` ahead; with a request, its graph is made once the graphs taken before
        it are, on a thread of ours."""
        assert not self.full(), f"{self.depth} tests ahead at most"
        thread = None
        if pending.request is not None and pending.error is None:
            request = pending.request | {"kind": "generate"}
            before = next((t for _, t in reversed(self._ahead) if t is not None), None)

            def make() -> None:
                if before is not None:
                    before.join()  # one call at a time on the generator's worker
                try:
                    pending.reply = self.handle.call(request, timeout_s)
                except BaseException as e:  # noqa: BLE001 - handed to the loop with the test (WorkerFault)
                    pending.error = e

            thread = threading.Thread(target=make, name="nncov-generate", daemon=True)
            thread.start()
        self._ahead.append((pending, thread))

    def take(self) -> Pending:
        """The first test taken ahead, its graph made (or its error)."""
        pending, thread = self._ahead.popleft()
        if thread is not None:
            thread.join()
        return pending

    def close(self) -> None:
        """Stop the generator; tests taken ahead and not handed over are dropped (their numbers unused)."""
        for _, thread in self._ahead:
            if thread is not None:
                thread.join()
        self._ahead.clear()
        self.handle.close()
