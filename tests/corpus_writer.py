"""A stand-in campaign for the corpus kill test: commits fake tests until told to stop, or killed.

    python tests/corpus_writer.py CORPUS [--tests N] [--map-size BYTES]

Creates CORPUS, or resumes it from its stored counters, prints `ready <next test id>`,
then for each test prints `<id> corpus|finding|-` (flushed) after its commit returned.
Everything a test holds derives from its id, so a checker can recompute it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from nnsmith_cov.corpus import DEFAULT_MAP_SIZE, CorpusStore, TestEntry, TestRecord, TimelineRow
from nnsmith_cov.coverage.covmap import Hits, Novelty
from nnsmith_cov.coverage.universe import Universe

BRANCHES = 3000
HOT = 200  # two tests in three reach only these, once each: they soon stop adding anything


def fake_universe() -> Universe:
    files = [f"pkg/mod{i}.py" for i in range(10)]
    index = np.arange(BRANCHES, dtype=np.int32)
    return Universe("python", "arc", {"pkg": "1.0"}, files, index % 10, index, index + 1)


def fake_hits(test_id: int) -> Hits:
    rng = np.random.default_rng(test_id)
    if test_id % 3:
        return Hits.from_arrays(rng.choice(HOT, 20, replace=False), np.ones(20))
    return Hits.from_arrays(rng.choice(BRANCHES, 30, replace=False), rng.integers(1, 300, 30))


def fake_blobs(test_id: int) -> dict[str, bytes]:
    rng = np.random.default_rng(1_000_000 + test_id)
    # up to 200 KB: a run of a few dozen tests outgrows a small initial map
    return {"model.onnx": rng.bytes(int(rng.integers(1, 200_000))), "inputs.npz": rng.bytes(100)}


def fake_findings(test_id: int) -> list[dict[str, str | None]]:
    if test_id % 5:
        return []
    return [
        {"symptom": "crash", "backend": "tvm", "stage": "compile", "opt": "opt", "localized": None, "signature": "s"}
    ]


def fake_record(test_id: int, novelty: Novelty, elapsed_s: float) -> TestRecord:
    return TestRecord(
        seed=test_id * 7919,
        status="finding" if fake_findings(test_id) else "pass",
        graph={"schema": 1, "values": [], "inputs": [], "weights": [], "insts": [], "outputs": []},
        gen={"seed": test_id * 7919, "ops": ["Add"] * (test_id % 4)},
        draws=[("op", test_id % 11), ("ratio", 0.5)],
        timings={"generate": 1.0, "compile:tvm": 2.5},
        elapsed_s=elapsed_s,
        novelty=novelty,
        parent=test_id - 1 if test_id % 2 and test_id else None,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--tests", type=int, default=None)
    ap.add_argument("--map-size", type=int, default=DEFAULT_MAP_SIZE)
    args = ap.parse_args()
    universe = fake_universe()
    if args.corpus.exists():
        store = CorpusStore.open(args.corpus, universe.ident, expect_collector="python", map_size=args.map_size)
    else:
        store = CorpusStore.create(args.corpus, {"seed": 1}, {"pkg": "1.0"}, universe, map_size=args.map_size)
    counters = store.counters()
    virgin = store.virgin()
    assert virgin is not None
    test_id, run = counters.next_test_id, counters.tests_run
    started = time.monotonic() - counters.elapsed_s
    print(f"ready {test_id}", flush=True)
    while args.tests is None or run < counters.tests_run + args.tests:
        hits = fake_hits(test_id)
        novelty = virgin.update(hits)
        findings = fake_findings(test_id)
        elapsed = time.monotonic() - started
        entry, kind = None, "-"
        if novelty.interesting or findings:
            kind = "corpus" if novelty.interesting else "finding"
            entry = TestEntry(
                fake_record(test_id, novelty, elapsed),
                hits if novelty.interesting else None,
                fake_blobs(test_id),
                findings,
            )
        row = None
        if test_id % 4 == 0:
            row = TimelineRow(elapsed, run + 1, virgin.count(), 0, 0, 0)
        store.commit(
            test_id,
            entry,
            elapsed_s=elapsed,
            virgin=virgin if novelty.interesting else None,
            scheduler={"steps": run + 1},
            timeline=row,
        )
        print(f"{test_id} {kind}", flush=True)
        test_id += 1
        run += 1
    store.close()


if __name__ == "__main__":
    sys.exit(main())
