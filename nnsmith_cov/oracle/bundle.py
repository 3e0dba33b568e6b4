"""A finding on disk: everything needed to look at it and to re-run it.

<bundle>/model.onnx    the exported model (absent for export/reference findings)
<bundle>/graph.json    GraphIR; graph.txt its readable form (absent for a replayed foreign ONNX model)
<bundle>/inputs.npz    model inputs (i<v>) and weights (w<v>); the .npz files are deflated
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
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov.bounded_read import MAX_JSON_BYTES, DataError, json_type, read_json, shown
from nnsmith_cov.gen.graph_ir import GraphIR, GraphIRError
from nnsmith_cov.materialize.model_dir import load_npz, npz_bytes
from nnsmith_cov.ops import is_op
from nnsmith_cov.oracle.finding import TORCH_STAGES, Finding
from nnsmith_cov.stored import StoredError, number, search_settings, timeout, trusted_backend

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
    (tmp / "inputs.npz").write_bytes(npz_bytes(values, compress=True))
    if oracle is not None:
        (tmp / "oracle.npz").write_bytes(npz_bytes(oracle, compress=True))
    if onnx is not None:
        (tmp / "model.onnx").write_bytes(onnx)
    if finding.actual:
        (tmp / "actual.npz").write_bytes(npz_bytes(finding.actual, compress=True))
    (tmp / "error.log").write_text(f"{finding.signature}\n{finding.detail}\n\n{finding.log}")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def read_bundle(path: Path, plugins: Collection[str] = ()) -> Bundle:
    """Read and validate a bundle; BundleError says what is wrong in one line. The bundle is
    data: its backend must be built in or one of `plugins` (named on the command line), and
    every setting it stores is checked for type and range before anything runs it."""
    if not (path / "meta.json").is_file():
        raise BundleError(f"{path}: not a bundle (no meta.json)")
    try:
        meta = read_json((path / "meta.json"), max_bytes=MAX_META_BYTES)
        _check_meta(meta, path, plugins)
        try:
            graph = GraphIR.loads(_data(path / "graph.json"), known_op=is_op)
        except GraphIRError as e:
            raise BundleError(f"{path}/graph.json: {_one_line(e).removeprefix('graph.json: ')}") from None
        values = _arrays(path / "inputs.npz")
        oracle = _arrays(path / "oracle.npz") if (path / "oracle.npz").exists() else None
        onnx = (path / "model.onnx").read_bytes() if (path / "model.onnx").exists() else None
    except BundleError:
        raise
    except StoredError as e:
        raise BundleError(f"{path}/meta.json: {e}") from None
    except DataError as e:  # (names the file)
        raise BundleError(str(e)) from None
    except (OSError, ValueError, zipfile.BadZipFile, GraphIRError) as e:  # DataError is a ValueError
        raise BundleError(f"{path}: {type(e).__name__}: {_one_line(e)}") from None
    return Bundle(path, meta, graph, values, oracle, onnx)


MAX_META_BYTES = 16 << 20  # detail and versions; the graph and arrays live in their own files


def _data(path: Path) -> bytes:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise BundleError(f"{path}: larger than {MAX_JSON_BYTES} bytes")
    return path.read_bytes()


def _arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        return load_npz(path)
    except (ValueError, zipfile.BadZipFile, EOFError) as e:
        raise BundleError(f"{path}: unreadable arrays ({type(e).__name__}: {_one_line(e)})") from None


def _check_meta(meta: Any, path: Path, plugins: Collection[str]) -> None:
    """BundleError / StoredError unless meta.json has the fields a re-run reads, of their types."""
    if not isinstance(meta, dict):
        raise BundleError(f"{path}: meta.json holds a JSON {json_type(meta)}, expected an object")
    if meta.get("schema") != BUNDLE_SCHEMA:
        raise BundleError(f"{path}: meta.json has schema {meta.get('schema')!r}, expected {BUNDLE_SCHEMA}")
    for key in ("symptom", "backend", "stage", "opt", "signature", "seed"):
        if key not in meta:
            raise BundleError(f"{path}: meta.json lacks {key!r}")
    for key in ("symptom", "stage", "opt", "signature"):
        if not isinstance(meta[key], str):
            raise BundleError(f"{path}: meta.json {key} must be a string, not {json_type(meta[key])}")
    seed = meta["seed"]
    if type(seed) is not int or not 0 <= seed < 2**63:
        raise BundleError(f"{path}: meta.json seed must be an integer in [0, 2^63), not {shown(seed)}")
    if meta["stage"] not in TORCH_STAGES:  # PyTorch's findings run no backend
        trusted_backend(meta["backend"], plugins, "backend")
    settings = meta.get("settings", {})
    if not isinstance(settings, dict):
        raise BundleError(f"{path}: meta.json settings must be an object, not {json_type(settings)}")
    for key, default in (("rtol", 1e-2), ("atol", 1e-3), ("half_rtol", 5e-2), ("half_atol", 1e-2)):
        number(settings, key, "settings", default)
    timeout(settings, "settings", 60.0)
    if settings.get("search") is not None:
        search_settings(settings["search"], "settings")
    if meta.get("search") is not None and not isinstance(meta["search"], dict):
        raise BundleError(f"{path}: meta.json search must be an object, not {json_type(meta['search'])}")


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
