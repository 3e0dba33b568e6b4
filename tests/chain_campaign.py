"""One short campaign against the fake chain collector (tests/fake_chain.py): how many tests to the goal.

Shared by tests/test_feedback_loop.py and scripts/bench_chain.py. Modes: ``on`` (feedback with
mutation of kept tests: grown, or extended at the op that made them interesting), ``on-nomut``
(feedback, kept tests only grown), ``off-var`` (no feedback,
the graph size drawn uniformly from the sizes `on` chooses among: the same choice space at random),
``off`` (no feedback, the configured size: plain NNSmith).
"""

from __future__ import annotations

from pathlib import Path

import fake_chain
from campaign_helpers import f32_only

from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.feedback.scheduler import Scheduler
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import select_ops

BACKEND = "fake_chain:ChainPays"
COLLECTOR = "fake_chain:ChainCollector"
MODES = ("on", "on-nomut", "off-var", "off")
NODES = 4

OPS = [f32_only(op) for op in select_ops(list(fake_chain.GOAL))]


def chain_worker(log: Path) -> WorkerHandle:
    """A worker for every campaign: the collector keeps no state between tests."""
    return WorkerHandle([BACKEND], log, collector=COLLECTOR)


def per_test_cost() -> None:
    """Rates per test, not per second: proposals then depend on the seed alone, not the machine."""
    Scheduler.cost = lambda self, seconds: 1.0  # type: ignore[method-assign]


def goal_after(folder: Path, worker: WorkerHandle, mode: str, seed: int, budget: int) -> int | None:
    """The number of the first test that reached the whole chain; None when none of `budget` did."""
    settings = CaseSettings([BACKEND], search={"method": "none", "max_iters": 2}, localize=False)
    gen = GenConfig(nodes=NODES, ops=OPS, max_elems=64, binning=False)
    on = mode in ("on", "on-nomut")
    cfg = FuzzConfig(gen, settings, seed=seed, max_tests=budget, feedback=on, mutation=mode == "on")
    fuzzer = Fuzzer(cfg, RunDir(folder), worker, lambda ev: None, corpus=True)
    try:
        fuzzer.start()
        assert fuzzer.scheduler is not None
        if mode == "off-var":
            fuzzer.scheduler.vary = True
        while not fuzzer.done():
            result = fuzzer.step()
            if result is not None and result.hits is not None and fake_chain.GOAL_BRANCH in result.hits.index:
                return fuzzer.stats.tests
        return None
    finally:
        fuzzer.close()
