"""A backend and a collector, for testing feedback, whose coverage depends on one operator.

`SigmoidPays` (backend `fake_coverage:SigmoidPays`) is ONNX Runtime that notes the op
types of each model it loads; `OpCollector` (collector `fake_coverage:OpCollector`)
reports, per test, one branch per op type seen and, when a Sigmoid was among them,
a branch no test reached before. So only tests holding a Sigmoid keep finding new
coverage, deterministically.

`FollowedCollector` runs measured calls on a thread of its own, as the binary collector
does, and the `_Recorded` backends note (in `EVENTS`) on which thread they were loaded.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

import numpy as np
import onnx

from nnsmith_cov.backends.ort import OrtBackend
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.universe import Universe

SEEN: set[str] = set()
OP_SLOTS = 256
SIZE = 1 << 16


class SigmoidPays(OrtBackend):
    name = "sigmoid-pays"

    def load(self, onnx_bytes: bytes) -> Any:
        SEEN.update(n.op_type for n in onnx.load_from_string(onnx_bytes).graph.node)
        return super().load(onnx_bytes)


class OpCollector:
    name = "fake-ops"

    def __init__(self, targets: list[str]) -> None:
        self.fresh = OP_SLOTS  # next never-reached branch

    def universe(self) -> Universe:
        n = np.arange(SIZE, dtype=np.int32)
        return Universe("fake-ops", "edge", {"fake": "1"}, ["ops.txt"], np.zeros(SIZE, np.int32), n, n)

    def start(self) -> None:
        SEEN.clear()

    def stop(self) -> Hits:
        # (crc32, not hash(): a salted hash makes op types collide differently in each process)
        index = sorted({zlib.crc32(op.encode()) % OP_SLOTS for op in SEEN})
        if "Sigmoid" in SEEN and self.fresh < SIZE:
            index.append(self.fresh)
            self.fresh += 1
        return Hits.from_arrays(np.array(index, np.uint32), np.ones(len(index), np.uint32))


FLAKY = SIZE - 1  # the branch a calibration rerun never reaches


class FlakyCollector(OpCollector):
    """OpCollector with a calibration: every first run also reaches FLAKY, a different number of
    times each, and the rerun never does (as ORT's set-up code that runs now and then on a
    thread of its own). `settle` flags it; without the flag its counts make every test new."""

    name = "fake-flaky"

    def __init__(self, targets: list[str]) -> None:
        super().__init__(targets)
        self.rerun = False
        self.runs = 0
        self.flagged: set[int] = set()

    def stop(self) -> Hits:
        hits = super().stop()
        if self.rerun:
            return hits
        self.runs += 1
        return hits + Hits(np.array([FLAKY], np.uint32), np.array([1 << (self.runs % 8)], np.uint32))

    def settle(self, first: Hits, again: Any, key: str = "") -> np.ndarray:
        if again is None:  # the worker's calibration budget is spent
            return np.zeros(0, np.uint32)
        self.rerun = True
        try:
            second = again()
        finally:
            self.rerun = False
        fresh = set(np.setxor1d(first.index, second.index).tolist()) - self.flagged
        self.flagged |= fresh
        return np.array(sorted(fresh), np.uint32)

    def mask(self, slots: np.ndarray) -> None:
        self.flagged |= set(np.asarray(slots).tolist())


class UncalibratedFlaky(FlakyCollector):
    """The same branch, never flagged: the control."""

    name = "fake-flaky-uncalibrated"

    def settle(self, first: Hits, again: Any, key: str = "") -> np.ndarray:
        return np.zeros(0, np.uint32)


# -- a collector driven from the parent, with a thread of its own (as the binary one) ----------------

EVENTS: list[tuple[str, ...]] = []  # what the worker did while starting, in order, with the thread


def _event(*what: str) -> None:
    EVENTS.append((*what, threading.current_thread().name))


class FollowedCollector(OpCollector):
    """OpCollector whose measured calls run on a thread of its own, started at `follow_request`
    and replaced at `locate_request`, as the binary collector's import and measuring threads."""

    name = "fake-followed"

    def follow_request(self) -> dict[str, Any]:
        _event("follow")
        self.thread = "nncov-import"
        return {"kind": "attach", "phase": "follow"}

    def locate_request(self) -> dict[str, Any]:
        _event("locate")
        self.thread = "nncov-measure"
        return {"kind": "attach", "phase": "locate"}

    def call(self, fn: Any, backend: str = "") -> Any:
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(fn()), name=self.thread)
        t.start()
        t.join()
        return box[0]


class _Recorded(OrtBackend):
    def unavailable(self) -> str | None:
        _event("import", type(self).__name__)
        return super().unavailable()


class LibrariesAlone(_Recorded):
    """Loads its libraries without its package (as TVM does)."""

    @staticmethod
    def load_libraries() -> None:
        _event("load_libraries", "LibrariesAlone")


class LibrariesFail(_Recorded):
    """Says it can load its libraries alone, but they are not found."""

    @staticmethod
    def load_libraries() -> None:
        _event("load_libraries", "LibrariesFail")
        raise OSError("libmissing.so: cannot open shared object file")


class NoLibraries(_Recorded):
    """Has no `load_libraries`: imported whole on the followed thread (as ORT)."""
