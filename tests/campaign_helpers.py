"""What the tests that drive a short campaign in-process share."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.corpus.store import CorpusStore


def f32_only(op: type) -> type:
    """`op` restricted to its all-float32 signatures: cheap to search and accepted by every backend."""
    sigs = [s for s in op.sigs if all(d is DType.float32 for d in (*s[0], *s[1]))]
    return type(op.__name__, (op,), {"sigs": sigs})


def run_to_budget(fuzzer, worker) -> None:
    """Start the campaign, step it until its budget is spent, write its stats, close it and its worker."""
    try:
        fuzzer.start()
        while not fuzzer.done():
            fuzzer.step()
        fuzzer.write_stats()
    finally:
        fuzzer.close()
        worker.close()


def stored_records(folder: Path) -> tuple[list, list]:
    """Per kept test: id, graph hash, status, parent and hits; per finding: test, symptom, signature."""
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        assert store.check() == []
        tests = []
        for i, record in store.entries(include_finding_only=True):
            graph = hashlib.sha256(json.dumps(record.graph, sort_keys=True).encode()).hexdigest()
            hits = store.hits(i)
            hits_key = None if hits is None else (hits.index.tolist(), hits.count.tolist())
            tests.append((i, graph, record.status, record.parent, hits_key))
        findings = sorted((i, h["symptom"], h.get("signature")) for i, h in store.findings())
        return tests, findings
