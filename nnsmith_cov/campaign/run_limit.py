"""How long a backend run may take under a collector: a limit calibrated from the campaign's own runs.

A collector slows some runs far more than others: Stalker translating a kernel's inner loop
made one ORT run take over 60 s under the binary collector where it finished natively in a
fraction of that, and the campaign ran no test for 85 s (the whole `--timeout-s`, then the
native re-run). AFL answers this with a timeout calibrated from the target's own runs (a
multiple of the typical run); here a run under coverage gets SLOWEST_FACTOR times the slowest
of the backend's last WINDOW finished runs, at least FLOOR_S and at most `--timeout-s`. A run
past it is killed and run again natively with the whole `--timeout-s` (`confirmed_hang`), so
what counts as a hang, and every finding, is decided as before; only the coverage of a run
several times slower than any recent one is given up, as AFL gives up a slow input's.

The slowest recent run, not a mean: compile times spread widely (a 20-node TVM graph takes
ten times a 5-node one), and a limit must not cut the campaign's ordinary slow tests.
Until MIN_RUNS runs of a backend have finished the limit is the whole timeout: the first
runs warm the collector up and are the slowest of all.
"""

from __future__ import annotations

import collections
import threading

WINDOW = 200  # recent finished runs per backend the limit is taken from
MIN_RUNS = 20  # runs before the first calibrated limit
SLOWEST_FACTOR = 3.0
FLOOR_S = 10.0


class RunLimits:
    """Per backend, the calibrated limit of its next run under coverage; shared by a campaign's
    worker threads. `calibrate` False: always the whole timeout (`fuzz --coverage-timeout full`)."""

    def __init__(self, calibrate: bool = True) -> None:
        self.calibrate = calibrate
        self._runs: dict[str, collections.deque[float]] = collections.defaultdict(
            lambda: collections.deque(maxlen=WINDOW)
        )
        self._lock = threading.Lock()

    def record(self, backend: str, seconds: float) -> None:
        """A run of `backend` that finished (returned outputs or an error) in `seconds`."""
        with self._lock:
            self._runs[backend].append(seconds)

    def limit(self, backend: str, timeout_s: float) -> float:
        """The limit of `backend`'s next run under coverage, within `timeout_s`."""
        with self._lock:
            runs = self._runs.get(backend)
            if not self.calibrate or runs is None or len(runs) < MIN_RUNS:
                return timeout_s
            slowest = max(runs)
        return min(timeout_s, max(FLOOR_S, SLOWEST_FACTOR * slowest))

    def limits(self, timeout_s: float) -> dict[str, float]:
        """The current limit of every backend that has run (for the status screen)."""
        with self._lock:
            backends = list(self._runs)
        return {b: self.limit(b, timeout_s) for b in backends}
