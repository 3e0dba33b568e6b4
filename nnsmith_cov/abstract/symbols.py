"""Z3 symbols of the graph being generated, made in a Z3 context of its own.

Z3's models depend on every term its context has seen (term ids order the
search), so graphs sharing one context would depend on what the process
generated before them: the same seed would give another graph after a
different history. Each graph therefore gets a fresh context.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator

import z3

_local = threading.local()


class _SpareContexts:
    """Contexts made one ahead on a helper thread. Making one is milliseconds of Z3's C code
    (2-7 ms, a tenth of a small graph's generation) during which ctypes releases the GIL, so
    it runs while the process waits for its next request, runs a backend, or on another
    core. A new context is the same whichever thread made it: graphs do not change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._ready: queue.Queue[z3.Context] = queue.Queue(maxsize=1)

    def take(self) -> z3.Context:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child (the helper did not come along)
                self._pid, self._ready = os.getpid(), queue.Queue(maxsize=1)
                threading.Thread(target=self._fill, args=(self._ready,), name="z3-contexts", daemon=True).start()
            ready = self._ready
        return ready.get()

    @staticmethod
    def _fill(ready: queue.Queue[z3.Context]) -> None:
        while True:
            ready.put(z3.Context())


_spares = _SpareContexts()


@contextlib.contextmanager
def fresh_context() -> Iterator[z3.Context]:
    prev = getattr(_local, "ctx", None)
    _local.ctx = _spares.take()
    try:
        yield _local.ctx
    finally:
        _local.ctx = prev


def context() -> z3.Context:
    """The current graph's context (Z3's main context outside generation)."""
    return getattr(_local, "ctx", None) or z3.main_ctx()


def int_sym(name: str) -> z3.ArithRef:
    """A symbolic integer in the current context; specs never call z3.Int directly."""
    return z3.Int(name, context())
