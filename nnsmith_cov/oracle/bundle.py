"""A finding on disk: everything needed to look at it and to re-run it.

<bundle>/model.onnx    the exported model (absent for export/reference findings)
<bundle>/graph.json    GraphIR; graph.txt its readable form (absent for a replayed foreign ONNX model)
<bundle>/inputs.npz    model inputs (i<v>) and weights (w<v>)
<bundle>/oracle.npz    PyTorch's outputs (o<v>), when the value search succeeded
<bundle>/actual.npz    the backend's outputs, for inconsistencies
<bundle>/error.log     traceback and worker output, for crashes and hangs; mismatch details otherwise
<bundle>/meta.json     BUNDLE_SCHEMA, e.g.
    {"schema": 1, "symptom": "crash", "backend": "tvm", "stage": "compile", "opt": "opt",
     "localized": "conversion", "signature": "tvm/compile/opt: InternalError: ...",
     "detail": "...", "seed": 17, "test": 3, "graph_hash": "e0739c7e22e691a2",
     "settings": {"rtol": 0.01, ...}, "versions": {"tvm": "0.27.0", ...},
     "search": {"ok": true, ...}, "generator": {...}, "draws": [["op", 4], ...]}
"""

from __future__ import annotations

import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov.gen.graph_ir import GraphIR, GraphIRError
from nnsmith_cov.materialize.model_dir import load_npz, npz_bytes
from nnsmith_cov.ops import is_op
from nnsmith_cov.oracle.finding import Finding

BUNDLE_SCHEMA = 1


class BundleError(Exception):
    """A bundle folder that cannot be read back (missing or malformed files)."""


@dataclass
class Bundle:
    path: Path
    meta: dict[str, Any]
    graph: GraphIR
    values: dict[str, np.ndarray]
    oracle: dict[str, np.ndarray] | None
    onnx: bytes | None


def write_bundle(
    path: Path,
    finding: Finding,
    graph: GraphIR | None,
    values: dict[str, np.ndarray],
    oracle: dict[str, np.ndarray] | None,
    onnx: bytes | None,
    meta: dict[str, Any],
) -> Path:
    """Write the bundle into `path` (created; written to a temporary folder first, then renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    record = (
        {"schema": BUNDLE_SCHEMA}
        | finding.header()
        | {
            "detail": finding.detail,
            "graph_hash": None if graph is None else graph.content_hash(),
        }
        | meta
    )
    (tmp / "meta.json").write_text(json.dumps(record, indent=1) + "\n")
    if graph is not None:
        (tmp / "graph.json").write_text(graph.dumps() + "\n")
        (tmp / "graph.txt").write_text(graph.text())
    (tmp / "inputs.npz").write_bytes(npz_bytes(values))
    if oracle is not None:
        (tmp / "oracle.npz").write_bytes(npz_bytes(oracle))
    if onnx is not None:
        (tmp / "model.onnx").write_bytes(onnx)
    if finding.actual:
        (tmp / "actual.npz").write_bytes(npz_bytes(finding.actual))
    (tmp / "error.log").write_text(f"{finding.signature}\n{finding.detail}\n\n{finding.log}")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def read_bundle(path: Path) -> Bundle:
    """Read and validate a bundle; BundleError says what is wrong in one line."""
    if not (path / "meta.json").is_file():
        raise BundleError(f"{path}: not a bundle (no meta.json)")
    try:
        meta = json.loads((path / "meta.json").read_text())
        if not isinstance(meta, dict) or meta.get("schema") != BUNDLE_SCHEMA:
            raise BundleError(f"{path}: meta.json has schema {meta.get('schema')!r}, expected {BUNDLE_SCHEMA}")
        for key in ("symptom", "backend", "stage", "opt", "signature", "seed"):
            if key not in meta:
                raise BundleError(f"{path}: meta.json lacks {key!r}")
        graph = GraphIR.loads((path / "graph.json").read_text(), known_op=is_op)
        values = load_npz(path / "inputs.npz")
        oracle = load_npz(path / "oracle.npz") if (path / "oracle.npz").exists() else None
        onnx = (path / "model.onnx").read_bytes() if (path / "model.onnx").exists() else None
    except BundleError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, GraphIRError) as e:  # JSONDecodeError is a ValueError
        raise BundleError(f"{path}: {type(e).__name__}: {e}") from None
    return Bundle(path, meta, graph, values, oracle, onnx)
