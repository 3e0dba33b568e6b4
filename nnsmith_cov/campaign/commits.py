"""Test commits run in order on a thread of their own, beside the loop that drives the workers.

A test's commit (the corpus transaction: entry, blobs, virgin map, scheduler state; its
bundles and log lines) costs tens of milliseconds with a native collector's map. Run on the
loop's thread while the worker prepares the next test, it often outlasted the preparation,
and the worker's answer then waited for it. Here commits run on their own thread, one at a
time, in the order they were queued, each under the campaign's lock (they write what the
status screen and the next proposal read); the loop only queues them.

`drain` runs whatever is still queued on the caller's thread: before anything is written
out of that order (an internal error's record, a generation failure, the last test), and to
surface a commit's error there (once: the loop stops on it, and closing the campaign does not
raise it again). After an error no further commit runs: a store that failed takes nothing more.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class Committer:
    """Commits queued by the loop, run in order on one thread, each under `lock`."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._queue: deque[Callable[[], None] | None] = deque()
        self._wake = threading.Semaphore(0)
        self._error: BaseException | None = None
        self._raised = False  # the error goes up once; commits stay stopped after it
        self._thread: threading.Thread | None = None

    def put(self, commit: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="nncov-commit", daemon=True)
            self._thread.start()
        self._queue.append(commit)
        self._wake.release()

    def drain(self) -> None:
        """Run the commits still queued, here; raises the error a commit raised, once."""
        with self._lock:
            self._run_queued()
            if self._error is not None and not self._raised:
                self._raised = True
                raise self._error

    def close(self) -> None:
        """Run what is queued and stop the thread (errors are left to `drain`)."""
        if self._thread is not None:
            self._queue.append(None)
            self._wake.release()
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while True:
            self._wake.acquire()
            with self._lock:  # popped under the lock: a drain holding it never races a commit in flight
                if self._run_queued():
                    self._queue.popleft()
                    return

    def _run_queued(self) -> bool:
        """Run the queued commits (none after an error); True at the stop mark, left queued."""
        while self._queue:
            commit = self._queue[0]
            if commit is None:
                return True
            self._queue.popleft()
            if self._error is None:
                try:
                    commit()
                except BaseException as e:  # noqa: BLE001 - raised on the loop's thread by `drain`
                    self._error = e
        return False
