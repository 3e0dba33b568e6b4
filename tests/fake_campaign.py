"""A campaign folder written straight into a corpus, for the tests of the analysis scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nnsmith_cov.corpus import CorpusStore, TestEntry, TestRecord
from nnsmith_cov.coverage.covmap import Hits, Novelty
from nnsmith_cov.coverage.universe import Universe


@dataclass
class FakeTest:
    """One kept test: when it ran, the choices its record holds, what it reached and added."""

    elapsed_s: float
    ops: list[str]
    opset: int
    branches: list[int]
    new: int = 0
    dtypes: list[str] = field(default_factory=lambda: ["f32"])


def write_campaign(folder: Path, tests: Sequence[FakeTest], branches: int = 100) -> None:
    """folder/lmdb holding `tests` as kept tests (python arcs 0..branches-1), and a stats.json
    whose op_tests count the ops they held."""
    index = np.arange(branches, dtype=np.int32)
    universe = Universe("python", "arc", {"pkg": "1.0"}, ["pkg/m.py"], index * 0, index, index + 1)
    folder.mkdir(parents=True)
    store = CorpusStore.create(folder / "lmdb", {"seed": 1}, {"pkg": "1.0"}, universe)
    virgin = store.virgin()
    for test_id, test in enumerate(tests):
        record = TestRecord(
            seed=test_id,
            status="pass",
            graph={
                "schema": 1,
                "values": [{"dtype": d} for d in test.dtypes],
                "inputs": [],
                "weights": [],
                "insts": [],
            },
            gen={"seed": test_id, "ops": test.ops, "opset": test.opset, "dynamic": False, "roundtrip": False},
            draws=[],
            timings={},
            elapsed_s=test.elapsed_s,
            novelty=Novelty(test.new, 1),
        )
        hits = Hits.from_arrays(np.array(test.branches or [0]), np.ones(len(test.branches or [0])))
        virgin.update(hits)  # the map a commit with hits needs; the record's novelty is what is read
        store.commit(test_id, TestEntry(record, hits, {}, []), elapsed_s=test.elapsed_s, virgin=virgin)
    store.close()
    op_tests: dict[str, int] = {}
    for test in tests:
        for op in set(test.ops):
            op_tests[op] = op_tests.get(op, 0) + 1
    (folder / "stats.json").write_text(json.dumps({"op_tests": op_tests}))
