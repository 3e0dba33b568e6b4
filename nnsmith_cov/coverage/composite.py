"""A composite collector: several collectors measuring one test together, one map part each.

`--collector python+binary` measures TVM's Python (and the exporter) with coverage.py
and ORT's prebuilt C++ with the binary collector in the same worker, for the same
tests. The universe is the parts' universes laid end to end (`Universe.join`), so a
test's hits are one `Hits` whose indices fall in one part or another; reports split
them again (`Universe.split`).

Threads decide who sees what. coverage.py traces the worker's main thread; the binary
collector's agent follows its own measuring thread. So each backend call is routed:
a backend whose code the threaded part does not follow (its `native`) runs where it is
called, on the main thread; every other backend runs on the measuring thread, where the
agent counts its blocks. A thread-less part that measures such a backend's Python
(`claims`: TVM for the python part) goes along: its `carried` wrapper installs the test's
tracer on the measuring thread for the call, so one TVM compile is measured in its
Python and its C++ at once. A part that cannot be carried keeps its backends on the main
thread (they are then not followed). Calibration and masking concern the threaded part only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from nnsmith_cov.coverage.collector import Collector, CollectorError
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.declared import DeclaredBackend
from nnsmith_cov.coverage.universe import Universe

T = TypeVar("T")


def part_targets(name: str, targets: Sequence[str], first: bool, names: Sequence[str]) -> list[str]:
    """The targets meant for part `name`: those written `name=TARGET`, and the unaddressed
    ones when it is the first part (`python+binary` with `tvm,binary=libfoo.so*`)."""
    out = []
    for t in targets:
        head, eq, tail = t.partition("=")
        if eq and head not in names:
            raise CollectorError(f"coverage target {t!r} names no collector of {'+'.join(names)}")
        if eq and head == name:
            out.append(tail)
        elif not eq and first:
            out.append(t)
    return out


def slice_hits(hits: Hits, start: int, stop: int) -> Hits:
    """The hits in [start, stop), renumbered from 0."""
    lo, hi = np.searchsorted(hits.index, [start, stop])
    return Hits(hits.index[lo:hi] - np.uint32(start), hits.count[lo:hi])


def shift_hits(hits: Hits, offset: int) -> Hits:
    return Hits(hits.index + np.uint32(offset), hits.count)


class CompositeCollector:
    """The parts' coverage of the same tests, as one map laid end to end."""

    def __init__(self, parts: Sequence[Collector]) -> None:
        if len(parts) < 2:
            raise CollectorError("a composite collector needs two collectors or more")
        self.parts = list(parts)
        self.name = "+".join(p.name for p in self.parts)
        self._universe: Universe | None = None
        self.offsets: list[int] = []

    def universe(self) -> Universe:
        if self._universe is None:
            subs = [p.universe() for p in self.parts]
            self._universe = Universe.join(subs)
            self.offsets = [p.start for p in self._universe.parts]
        return self._universe

    def start(self) -> None:
        for p in self.parts:
            p.start()

    def stop(self) -> Hits:
        self.universe()
        pieces = [shift_hits(p.stop(), off) for p, off in zip(self.parts, self.offsets, strict=True)]
        return Hits(np.concatenate([h.index for h in pieces]), np.concatenate([h.count for h in pieces]))


class FollowedComposite(CompositeCollector):
    """A composite with one part that measures on its own thread (binary): routes backend calls
    and forwards that part's attach requests, calibration and masks (in the composite's numbering).
    `backends` are the worker's backends' declarations, which the thread-less parts judge."""

    def __init__(self, parts: Sequence[Collector], backends: Sequence[DeclaredBackend] = ()) -> None:
        super().__init__(parts)
        self.declared = {b.spec: b for b in backends}
        threaded = [p for p in self.parts if hasattr(p, "call")]
        if len(threaded) != 1:
            raise CollectorError(f"{self.name}: at most one collector may measure on its own thread")
        self.threaded: Any = threaded[0]
        self.index = self.parts.index(self.threaded)

    def _range(self) -> tuple[int, int]:
        u = self.universe()
        part = u.parts[self.index]
        return part.start, part.stop

    def _claimers(self, backend: str) -> list[Any]:
        """The thread-less parts that measure `backend`'s own package."""
        declared = self.declared.get(backend, DeclaredBackend(backend))
        return [p for p in self.parts if p is not self.threaded and getattr(p, "claims", lambda _: False)(declared)]

    def native(self, backend: str) -> bool:
        """Calls into this backend run where they are made: the threaded part would not follow
        it, or a part that measures it cannot be carried to the measuring thread."""
        return bool(backend) and (
            getattr(self.threaded, "native", lambda _: False)(backend)
            or any(not hasattr(p, "carried") for p in self._claimers(backend))
        )

    def call(self, fn: Callable[[], T], backend: str = "") -> T:
        if self.native(backend):
            return fn()
        for p in self._claimers(backend) if backend else ():
            fn = p.carried(fn)  # its Python is measured on the measuring thread too
        return self.threaded.call(fn)

    def follow_request(self) -> dict[str, Any]:
        return self.threaded.follow_request()

    def locate_request(self) -> dict[str, Any]:
        return self.threaded.locate_request()

    def settle(self, first: Hits, again: Callable[[], Hits] | None, key: str = "") -> np.ndarray:
        lo, hi = self._range()
        part = None if again is None else lambda: slice_hits(again(), lo, hi)
        flicker = self.threaded.settle(slice_hits(first, lo, hi), part, key)
        return (flicker.astype(np.int64) + lo).astype(np.uint32)

    def mask(self, slots: np.ndarray) -> None:
        lo, hi = self._range()
        slots = np.asarray(slots, dtype=np.int64)
        self.threaded.mask(slots[(slots >= lo) & (slots < hi)] - lo)
