"""The commit thread (`campaign.commits`): commits run in the order queued, each under the
campaign's lock; `drain` runs what is left on the caller's thread and raises a commit's
error, once; after an error nothing more is committed."""

from __future__ import annotations

import threading

import pytest

from nnsmith_cov.campaign.commits import Committer


def test_commits_run_in_order_under_the_lock_and_drain_leaves_none_queued():
    lock = threading.RLock()
    committer = Committer(lock)
    done: list[int] = []
    gate = threading.Event()

    def commit(k: int):
        def run() -> None:
            if k == 0:
                gate.wait(10)  # the first commit holds the thread while more are queued
            assert lock._is_owned()  # type: ignore[attr-defined]
            done.append(k)

        return run

    for k in range(5):
        committer.put(commit(k))
    gate.set()
    committer.drain()
    assert done == [0, 1, 2, 3, 4]
    committer.put(commit(5))
    committer.close()  # what is queued runs before the thread stops
    assert done == [0, 1, 2, 3, 4, 5]


def test_a_failed_commit_is_raised_by_drain_and_nothing_after_it_runs():
    lock = threading.RLock()
    committer = Committer(lock)
    done: list[str] = []

    def broken() -> None:
        raise OSError("disk full")

    with lock:  # held: nothing runs on the thread until drain runs it here, in order
        committer.put(lambda: done.append("before"))
        committer.put(broken)
        committer.put(lambda: done.append("after"))
        with pytest.raises(OSError, match="disk full"):
            committer.drain()
    assert done == ["before"]
    committer.put(lambda: done.append("later"))
    committer.drain()  # raised once (the loop stopped on it): closing the campaign does not raise it again
    committer.close()
    assert done == ["before"]  # the store that failed took nothing more
