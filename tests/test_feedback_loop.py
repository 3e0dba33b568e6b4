"""Feedback with mutation against the same choices drawn at random, in the real campaign loop.

The coverage (tests/fake_chain.py) needs a rare combination: Tanh-Sin-Neg-Abs as a chain, each
op reading the one before. Uniform generation over the four ops at 4 nodes makes it about once
in 800 graphs (measured on 800 fresh graphs: Tanh-Sin 1 in 6, Tanh-Sin-Neg 1 in 67); a fuzzer
that keeps the shorter chains it stumbles on (each a new branch) and mutates or grows them, and
steers op weights and graph sizes toward what paid, should need far fewer tests.

Measured in this loop (tests to the goal, seeds 1-6; ">": not within that many): on (feedback
with mutation) 90, 70, >200, >200, 49, 93; off-var 177, >200, >200, 94, >200, >200. Within 100
tests: on 4 seeds of 6, off-var 1. For the
three-op chain alone the two are alike (on 23, 17, 112, 62, 25, 81; off-var 5, 172, 130, 8, 95,
46): the advantage comes from building on kept steps, so it grows with the depth of the goal.
"""

from __future__ import annotations

from pathlib import Path

import fake_chain
import pytest
from campaign_helpers import f32_only

from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
from nnsmith_cov.campaign.run_dir import RunDir
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.feedback.scheduler import Scheduler
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import select_ops

BACKEND = "fake_chain:ChainPays"
SEEDS = (1, 2, 3, 4, 5, 6)
BUDGET = 100  # tests per campaign


OPS = [f32_only(op) for op in select_ops(list(fake_chain.GOAL))]


def goal_after(folder: Path, worker: WorkerHandle, mode: str, seed: int) -> int | None:
    """The number of the first test that reached the whole chain; None when none of BUDGET did."""
    settings = CaseSettings([BACKEND], search={"method": "none", "max_iters": 2}, localize=False)
    gen = GenConfig(nodes=4, ops=OPS, max_elems=64, binning=False)
    on = mode == "on"
    cfg = FuzzConfig(gen, settings, seed=seed, max_tests=BUDGET, feedback=on, mutation=on)
    fuzzer = Fuzzer(cfg, RunDir(folder), worker, lambda ev: None, corpus=True)
    try:
        fuzzer.start()
        while not fuzzer.done():
            result = fuzzer.step()
            if result is not None and result.hits is not None and fake_chain.GOAL_BRANCH in result.hits.index:
                return fuzzer.stats.tests
        return None
    finally:
        fuzzer.close()


@pytest.mark.slow
def test_feedback_with_mutation_finds_a_rare_chain_in_far_fewer_tests_than_off_var(tmp_path, monkeypatch):
    # Rates per test, not per second: the proposals then depend on the seed alone, not the machine.
    monkeypatch.setattr(Scheduler, "cost", lambda self, seconds: 1.0)
    worker = WorkerHandle([BACKEND], tmp_path / "worker.log", collector="fake_chain:ChainCollector")
    try:  # one worker for every campaign: the collector keeps no state between tests
        on = [goal_after(tmp_path / f"on-{s}", worker, "on", s) for s in SEEDS]
        off = [goal_after(tmp_path / f"off-{s}", worker, "off-var", s) for s in SEEDS]
    finally:
        worker.close()
    # Within the same number of tests, on finds the chain in most seeds and in at least twice as
    # many as off-var (counts of seeds rather than a median of a few censored numbers: a change
    # of the generator's draws moves single campaigns a lot, the counts less).
    found_on, found_off = sum(n is not None for n in on), sum(n is not None for n in off)
    assert found_on > len(SEEDS) / 2 and found_on >= 2 * max(found_off, 1), (on, off)
