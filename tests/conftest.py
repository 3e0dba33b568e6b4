"""Shared fixtures: small generation configs over the whole op library."""

from __future__ import annotations

import pytest

from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import ALL_OPS


@pytest.fixture
def cfg10() -> GenConfig:
    return GenConfig(nodes=10, ops=ALL_OPS)


@pytest.fixture
def every_test_steered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler made without params steers every test (hedge 0): for tests of the bandit's
    steering; the hedge, tests drawn as without feedback, has tests of its own."""
    from nnsmith_cov.feedback import scheduler
    from nnsmith_cov.feedback.params import BanditParams

    monkeypatch.setattr(scheduler, "DEFAULT_PARAMS", BanditParams(hedge=0.0))
