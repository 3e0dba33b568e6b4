"""What a replay re-runs: the tests of campaign corpora, bug bundles, model folders and ONNX files.

A SOURCE path is one of
  - a campaign folder (`RUN/lmdb/data.mdb`) or a bare corpus folder (`data.mdb`): every kept
    test, in the order the campaign committed them (its `elapsed_s`), with its time stamp;
  - a folder of our own tests: bug bundles (`meta.json` + `graph.json`, oracle/bundle.py) and
    `generate` model folders (`record.json` + `graph.json`), replayed from graph and values;
  - ONNX files from any tool (LEMON, GraphFuzzer, NNSmith), or a folder holding them at any
    depth: run with random inputs, without a PyTorch oracle.
Items are read lazily, one at a time, so a broken one costs only itself (`ReplayInputError`).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov.bounded_read import DataError, read_json
from nnsmith_cov.corpus.records import CorpusError
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.gen.graph_ir import GraphIR, GraphIRError
from nnsmith_cov.materialize.model_dir import leaf_names
from nnsmith_cov.ops import is_op
from nnsmith_cov.replay.foreign import ForeignModel, read_foreign
from nnsmith_cov.stored import StoredError, search_settings


class SourceError(Exception):
    """A SOURCE path that cannot be replayed at all (missing, empty, damaged corpus): one line."""


class ReplayInputError(Exception):
    """One item of a source that cannot be read (corrupt file, damaged entry): one line."""


@dataclass
class NativeTest:
    """A test of our own: its graph, seed and stored values (i<v>, w<v>); empty values or no
    oracle mean the replay searches them again from the seed, as the campaign did."""

    graph: GraphIR
    seed: int
    values: dict[str, np.ndarray]
    oracle: dict[str, np.ndarray] | None
    gen: dict[str, Any] = field(default_factory=dict)  # GenRecord.to_json(), kept so entries can be grown
    draws: list[tuple[str, int | float]] = field(default_factory=list)


Loaded = NativeTest | ForeignModel


@dataclass
class Item:
    """One test to replay; `load` reads it (raises ReplayInputError)."""

    origin: str  # where it comes from, for people: "camp/lmdb#17", "models/a.onnx"
    kind: str  # "corpus" | "bundle" | "model-dir" | "onnx"
    load: Callable[[int], Loaded]  # the argument is the seed for anything drawn at random
    source_s: float | None  # campaign time stamp (offset by earlier corpora), corpus items only
    mtime: float  # file modification time; a corpus item: creation time + its campaign time
    source_tests: int | None = None  # tests the campaign had run with this one (offset likewise)


@dataclass
class Source:
    """One resolved SOURCE path and its items, in the source's own order."""

    path: Path
    kind: str  # "corpus" | "folder" | "onnx"
    items: list[Item]
    elapsed_s: float = 0.0  # a corpus's campaign time
    tests: int = 0  # a corpus's test numbering (next_test_id)
    config: dict[str, Any] | None = None  # a campaign's config.json, when there is one
    store: CorpusStore | None = None  # open (read-only) while its items are replayed

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def open_sources(paths: list[Path], sym_dim: int) -> list[Source]:
    """Resolve every SOURCE; on a bad one, close what was opened and raise SourceError."""
    sources: list[Source] = []
    try:
        offset_s, offset_tests = 0.0, 0
        for path in paths:
            source = open_source(path, sym_dim, offset_s, offset_tests)
            offset_s, offset_tests = offset_s + source.elapsed_s, offset_tests + source.tests
            sources.append(source)
    except BaseException:
        for s in sources:
            s.close()
        raise
    return sources


def open_source(path: Path, sym_dim: int, offset_s: float = 0.0, offset_tests: int = 0) -> Source:
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix.lower() != ".onnx":
            raise SourceError(f"{path}: not an .onnx file, campaign corpus or folder of tests")
        return Source(path, "onnx", [_onnx_item(path, path.name, sym_dim)])
    lmdb_dir = path / "lmdb" if (path / "lmdb" / "data.mdb").exists() else path
    if (lmdb_dir / "data.mdb").exists():
        return _corpus(path, lmdb_dir, offset_s, offset_tests)
    items = _folder_items(path, sym_dim)
    if not items:
        raise SourceError(f"{path}: holds no campaign corpus, bundles, model folders or .onnx files")
    return Source(path, "folder", items)


# -- campaign corpora ----------------------------------------------------------------------


def _corpus(root: Path, lmdb_dir: Path, offset_s: float, offset_tests: int) -> Source:
    try:
        store = CorpusStore.open(lmdb_dir, readonly=True)
    except CorpusError as e:
        raise SourceError(str(e)) from None
    try:
        created = store.meta.created
        counters = store.counters()
        # Finding-only tests are replayed too: they are kept tests, and may reach new branches here.
        records = list(store.entries(include_finding_only=True))
    except CorpusError as e:
        store.close()
        raise SourceError(str(e)) from None
    config = None
    try:
        config = read_json(root / "config.json")
    except FileNotFoundError:
        config = store.meta.config or None
    except (OSError, DataError) as e:
        store.close()
        raise SourceError(f"{root}: unreadable config.json ({e})") from None
    try:
        _check_config(config, root)
    except SourceError:
        store.close()
        raise
    # Commit order is campaign-time order (each test is stamped as it commits), also with workers.
    records.sort(key=lambda r: (r[1].elapsed_s, r[0]))
    items = [
        Item(
            f"{root}#{test_id}",
            "corpus",
            _corpus_loader(store, test_id),
            offset_s + record.elapsed_s,
            created + record.elapsed_s,
            offset_tests + test_id + 1,  # ids number the campaign's tests in the order they started
        )
        for test_id, record in records
    ]
    config = config if isinstance(config, dict) else None
    return Source(root, "corpus", items, counters.elapsed_s, counters.next_test_id, config, store)


def _check_config(config: object, root: Path) -> None:
    """What a replay takes from a source's campaign config (its value search and generator
    settings) must be of the right types: it is data from elsewhere."""
    if config is None:
        return
    if not isinstance(config, dict):
        raise SourceError(f"{root}: config.json is not a JSON object")
    try:
        if "search" in config:
            search_settings(config["search"], "config.json")
    except StoredError as e:
        raise SourceError(f"{root}: {e}") from None
    if not isinstance(config.get("generator", {}), dict):
        raise SourceError(f"{root}: config.json generator is not a JSON object")


def _corpus_loader(store: CorpusStore, test_id: int) -> Callable[[int], Loaded]:
    def load(_seed: int) -> Loaded:
        try:
            entry = store.entry(test_id)
        except CorpusError as e:
            raise ReplayInputError(str(e)) from None
        if entry is None:
            raise ReplayInputError(f"test {test_id} is no longer stored")
        r = entry.record
        graph = _graph(r.graph, f"test {test_id}")
        values = _npz(entry.blobs.get("inputs.npz"), f"test {test_id} inputs.npz")
        oracle = _npz(entry.blobs.get("oracle.npz"), f"test {test_id} oracle.npz")
        return _native(graph, r.seed, values or {}, oracle, r.gen, list(r.draws), f"test {test_id}")

    return load


# -- folders of our own tests, and foreign ONNX files ----------------------------------------


def _folder_items(root: Path, sym_dim: int) -> list[Item]:
    found: list[tuple[str, Item]] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        folder = Path(here)
        rel = folder.relative_to(root).as_posix()
        if "graph.json" in files and ("meta.json" in files or "record.json" in files):
            kind = "bundle" if "meta.json" in files else "model-dir"
            name = rel if rel != "." else root.name
            found.append((rel, Item(name, kind, _folder_loader(folder), None, _mtime(folder / "graph.json"))))
            dirs.clear()  # its model.onnx is the same test, not another one
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.lower().endswith(".onnx"):
                path = folder / name
                key = path.relative_to(root).as_posix()
                found.append((key, _onnx_item(path, key, sym_dim)))
    found.sort(key=lambda pair: pair[0])  # by name: the same folder replays the same way
    return [item for _, item in found]


def _folder_loader(folder: Path) -> Callable[[int], Loaded]:
    def load(_seed: int) -> Loaded:
        meta_file = folder / ("meta.json" if (folder / "meta.json").is_file() else "record.json")
        try:
            meta = read_json(meta_file)
            graph = _graph(read_json(folder / "graph.json"), "graph.json")
        except (OSError, ValueError) as e:
            raise ReplayInputError(f"{folder}: unreadable ({type(e).__name__}: {e})") from None
        seed = meta.get("seed") if isinstance(meta, dict) else None
        if type(seed) is not int or not 0 <= seed < 2**63:
            raise ReplayInputError(f"{folder}: {meta_file.name} has no integer seed in [0, 2^63)")
        values = _npz(_read(folder / "inputs.npz"), f"{folder.name}/inputs.npz") or {}
        oracle = _npz(_read(folder / "oracle.npz"), f"{folder.name}/oracle.npz")
        draws = meta.get("draws") if isinstance(meta.get("draws"), list) else []
        draws = [(d[0], d[1]) for d in draws if isinstance(d, list) and len(d) == 2]
        return _native(graph, meta["seed"], values, oracle, {}, draws, str(folder))

    return load


def _onnx_item(path: Path, name: str, sym_dim: int) -> Item:
    def load(seed: int) -> Loaded:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ReplayInputError(f"{path}: unreadable ({e.strerror})") from None
        try:
            return read_foreign(data, seed, sym_dim)
        except ValueError as e:
            raise ReplayInputError(f"{path}: {e}") from None

    return Item(name, "onnx", load, None, _mtime(path))


# -- helpers --------------------------------------------------------------------------------


def _native(
    graph: GraphIR,
    seed: int,
    values: dict[str, np.ndarray],
    oracle: dict[str, np.ndarray] | None,
    gen: dict[str, Any],
    draws: list,
    where: str,
) -> NativeTest:
    if values:
        # Partial values cannot be exported (the worker would fault on the missing names).
        need = set(leaf_names(graph).values())
        missing = sorted(need - set(values))
        if missing:
            raise ReplayInputError(f"{where}: stored values lack {', '.join(missing[:4])}")
    return NativeTest(graph, seed, values, oracle, gen, draws)


def _graph(obj: Any, where: str) -> GraphIR:
    try:
        return GraphIR.from_json(obj, known_op=is_op)
    except (GraphIRError, ValueError, KeyError, TypeError) as e:
        raise ReplayInputError(f"{where}: unreadable graph ({type(e).__name__}: {e})") from None


def _npz(data: bytes | None, where: str) -> dict[str, np.ndarray] | None:
    if data is None:
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:  # never unpickle others' files
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ReplayInputError(f"{where}: unreadable arrays ({type(e).__name__}: {e})") from None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ReplayInputError(f"{path}: unreadable ({e.strerror})") from None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
