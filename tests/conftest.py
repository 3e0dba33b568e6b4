"""Shared fixtures: small generation configs over the whole op library."""

from __future__ import annotations

import pytest

from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.ops import ALL_OPS


@pytest.fixture
def cfg10() -> GenConfig:
    return GenConfig(nodes=10, ops=ALL_OPS)
