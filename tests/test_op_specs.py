"""Every operator spec agrees with PyTorch and with ONNX on every value it makes.

Each op is generated alone into small graphs (so it is inserted forward and
backward, with binned attributes), materialized, run, exported with every
value exposed, and ONNX shape inference (with declared output types removed)
must derive exactly the GraphIR's shape and dtype for each value.
"""

from __future__ import annotations

import pytest

from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.materialize.validate import check_agreement
from nnsmith_cov.ops import ALL_OPS
from nnsmith_cov.search.sampling import sample_values

SEEDS = range(10)


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda o: o.name())
def test_spec_agrees_with_torch_and_onnx(op):
    directions: dict[str, int] = {"forward": 0, "backward": 0}
    for seed in SEEDS:
        try:
            gen = generate(GenConfig(nodes=3, ops=[op]), seed)
        except GenerationError:
            continue
        for name, d in zip(gen.record.ops, gen.record.directions):
            directions[d] += name == op.name()
        agreement = check_agreement(gen.graph, sample_values(gen.graph, seed))
        assert agreement.ok, f"seed {seed}: {agreement}\n{gen.graph.text()}"
    assert directions["forward"] > 0, f"{op.name()} was never inserted forward"
    if op.n_outputs() == 1:
        assert directions["backward"] > 0, f"{op.name()} was never inserted backward"
