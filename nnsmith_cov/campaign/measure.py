"""Run one saved model under a collector: the `nnsmith-cov coverage` command's engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nnsmith_cov.bounded_read import read_json
from nnsmith_cov.campaign.testcase import CaseResult, CaseSettings, run_test
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.gen.graph_ir import GraphIR, GraphIRError
from nnsmith_cov.ops import is_op


class MeasureError(Exception):
    """The model folder cannot be measured (one line)."""


@dataclass
class Measured:
    universe: Universe
    result: CaseResult


def read_model_dir(path: Path) -> tuple[GraphIR, int]:
    """The graph and seed of a folder written by `nnsmith-cov generate` (or a bug bundle)."""
    meta = path / "record.json" if (path / "record.json").is_file() else path / "meta.json"
    try:
        graph = GraphIR.loads((path / "graph.json").read_text(), known_op=is_op)
        seed = read_json(meta)["seed"]
    except FileNotFoundError as e:
        raise MeasureError(f"{path}: not a model folder ({Path(e.filename).name} is missing)") from None
    except (ValueError, KeyError, TypeError, GraphIRError) as e:
        raise MeasureError(f"{path}: unreadable model folder ({type(e).__name__}: {e})") from None
    if not isinstance(seed, int):
        raise MeasureError(f"{path}: {meta.name} has no integer seed")
    return graph, seed


def measure(path: Path, settings: CaseSettings, collector: str, targets: list[str], log: Path) -> Measured:
    """Search values, export and run every backend on the model in `path`, under `collector`."""
    graph, seed = read_model_dir(path)
    worker = WorkerHandle(settings.backends, log, collector=collector, cov_targets=targets)
    try:
        hello = worker.start()
        missing = {b: why for b, why in hello["unavailable"].items() if b in settings.backends}
        if missing:
            raise MeasureError("; ".join(f"backend {b} is unavailable: {why}" for b, why in missing.items()))
        universe = worker.universe()
        result = run_test(worker, graph, seed, settings)
    finally:
        worker.close()
    return Measured(universe, result)
