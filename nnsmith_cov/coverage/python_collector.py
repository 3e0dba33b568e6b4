"""The python collector: coverage.py arc coverage of the systems under test's Python sources.

Measures packages (default: `tvm`, whose Relax frontend, legalization, TOPI and
pass pipelines are largely Python, and `torch.onnx`, the exporter). A branch is
an arc of coverage.py's static analysis (`from-line -> to-line`, negative for
function entry and exit) in a file named relative to its package's parent
folder (`tvm/relax/transform/...`), so numbering is the same on any machine with
the same package versions. coverage.py records which arcs ran, not how often:
every hit has count 1, so this collector sets only the first bucket.

coverage.py's public way to read data (`get_data()`) goes through SQLite and
costs 80-200 ms per test; `_TraceData` reads the tracer's in-memory sets instead,
and says so in one line if a coverage.py release changes them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.declared import DeclaredBackend
from nnsmith_cov.coverage.universe import Universe

DEFAULT_PACKAGES = ("tvm", "torch.onnx")
CACHE_SCHEMA = 2
# The static analysis of the measured files, cached per machine: cache_dir/python-<key>.bin,
# <key> the first 20 hex digits of a SHA-256 over CACHE_SCHEMA, coverage.py's version, Python's
# (major, minor) and every file's relative name, size and mtime (`_cache_key`): a changed file
# makes a new cache, never a stale read. The file is zlib(msgpack map); nothing is pickled.
# A schema other than CACHE_SCHEMA, or an unreadable file, is analysed again (`_load_cache`).
#
#   {"schema": 2,
#    "universe": <Universe.to_bytes(): zlib(msgpack {"collector": "python", "kind": "arc",
#                 "build": {"tvm": "0.27.0", "torch.onnx": "2.13.0+cpu"},
#                 "files": ["torch/onnx/_constants.py", "tvm/relax/op/base.py", ...],
#                 "file_of" / "line" / "target": <int32le per branch>, ...})>,
#    "rules": {"tvm/relax/op/base.py":              (`_FileRules.to_wire`, per file with arcs)
#                [[[41, 40], [57, 55]],             multiline: [line, first line of its statement]
#                 [[120, -118, 121, -118],          fixers: recorded arc (120, -118) counts as (121, -118)
#                  [133, 140, null, null]]],        ... and (133, 140) is dropped
#              ...}}
T = TypeVar("T")
_PACK_MASK = 0xFFFFFFF  # CTracer packs an arc as l1 | l2 << 28, with sign bits 56 and 57


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "nnsmith-cov" / "universe"


def package_dir(name: str) -> Path:
    """The folder of package `name` (importing its parents, not the package itself)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        raise CollectorError(f"python collector: cannot find package {name!r} ({e})") from None
    if spec is None or not spec.submodule_search_locations:
        raise CollectorError(f"python collector: {name!r} is not an installed package")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _package_version(name: str) -> str:
    top = name.split(".")[0]
    module = sys.modules.get(top)
    version = getattr(module, "__version__", None)
    if version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            version = dist_version({"tvm": "apache-tvm"}.get(top, top))
        except PackageNotFoundError:
            version = "?"
    return str(version)


Arc = tuple[int, int]


@dataclass
class _FileRules:
    """How coverage.py turns one file's recorded arcs into its static arcs."""

    multiline: dict[int, int]  # line -> first line of its statement (only where they differ)
    fixers: dict[Arc, Arc | None]  # arcs leaving `with` blocks: replaced, or dropped (None)

    def to_wire(self) -> list:
        fix = [[a, b, *(c if c is not None else (None, None))] for (a, b), c in sorted(self.fixers.items())]
        return [sorted(self.multiline.items()), fix]

    @staticmethod
    def from_wire(obj: list) -> _FileRules:
        ml, fix = obj
        fixers = {(a, b): (c, d) if c is not None else None for a, b, c, d in fix}
        return _FileRules({int(a): int(b) for a, b in ml}, fixers)


def _parse(path: Path) -> tuple[set[Arc], _FileRules]:
    """coverage.py's static arcs of one file and its rules for recorded arcs."""
    from coverage.parser import PythonParser

    parser = PythonParser(filename=str(path))
    try:
        parser.parse_source()
        arcs = set(parser.arcs())
    except Exception:  # a file coverage.py cannot parse (syntax of another Python) has no branches
        return set(), _FileRules({}, {})
    ml = {int(a): int(b) for a, b in parser.multiline_map.items() if a != b}
    return arcs, _FileRules(ml, dict(getattr(parser, "_with_jump_fixers", {})))


class PythonCollector:
    """Arc coverage of Python packages via coverage.py, started and stopped per test."""

    name = "python"

    def __init__(self, targets: list[str], cache_dir: Path | None = None) -> None:
        try:
            import coverage
        except ImportError:
            raise CollectorError("python collector: coverage.py is not installed (pip install coverage)") from None
        self.packages = list(dict.fromkeys(targets)) or list(DEFAULT_PACKAGES)
        self.dirs = {p: package_dir(p) for p in self.packages}
        self.cache_dir = cache_dir or default_cache_dir()
        self._cov = coverage.Coverage(
            branch=True,
            source_pkgs=self.packages,
            data_file=None,
            config_file=False,
        )
        self._cov.set_option(
            "run:disable_warnings", ["module-not-measured", "module-not-imported", "no-data-collected"]
        )
        self._universe: Universe | None = None
        self._rules: dict[str, _FileRules] = {}
        self._file_index: dict[str, int] = {}
        self._lookup: dict[str, Any] = {}  # absolute path -> its arc table, or None outside the universe
        self._data: _TraceData | None = None
        self.unmapped = 0  # arcs that ran but are not in the static universe (e.g. exception paths)

    def claims(self, backend: DeclaredBackend) -> bool:
        """This collector measures the Python package `backend` declares it drives (a composite
        runs it on the thread this collector traces)."""
        package = backend.package
        return package is not None and package in {p.split(".")[0] for p in self.packages}

    def carried(self, fn: Callable[[], T]) -> Callable[[], T]:
        """`fn`, measured by this collector on whichever thread runs it: the test's tracer is
        installed there for the call (coverage.py traces only the thread that started it, and a
        composite runs TVM on the binary collector's measuring thread, so that TVM's Python and
        its C++ are measured by the same call). The arcs land in the same data as the main
        thread's, read by `stop()`."""
        collector = getattr(self._cov, "_collector", None)
        install = getattr(collector, "_installation_trace", None)
        if install is None:
            import coverage

            raise CollectorError(
                f"python collector: coverage.py {coverage.__version__} cannot trace another thread here; "
                "install a 7.x release the project lists in setup.cfg"
            )

        def traced() -> T:
            sys.settrace(install)  # the first call event installs the test's tracer on this thread
            try:
                return fn()
            finally:
                sys.settrace(None)

        return traced

    # -- the universe --------------------------------------------------------------
    def _files(self) -> list[tuple[str, Path]]:
        """(relative name, absolute path) of every measured file, sorted by name."""
        out = {}
        for pkg, d in self.dirs.items():
            base = _top_parent(pkg, d)
            for p in d.rglob("*.py"):
                out[p.relative_to(base).as_posix()] = p
        return sorted(out.items())

    def _cache_key(self, files: list[tuple[str, Path]]) -> str:
        import coverage

        h = hashlib.sha256(f"{CACHE_SCHEMA}\0{coverage.__version__}\0{sys.version_info[:2]}".encode())
        for rel, p in files:
            st = p.stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        return h.hexdigest()[:20]

    def universe(self) -> Universe:
        if self._universe is None:
            files = self._files()
            if not files:
                raise CollectorError(f"python collector: no Python files in {', '.join(self.packages)}")
            cache = self.cache_dir / f"python-{self._cache_key(files)}.bin"
            loaded = _load_cache(cache)
            if loaded is None:
                loaded = self._analyze(files)
                _save_cache(cache, *loaded)
            self._universe, self._rules = loaded
            self._file_index = {f: i for i, f in enumerate(self._universe.files)}
        return self._universe

    def _analyze(self, files: list[tuple[str, Path]]) -> tuple[Universe, dict[str, _FileRules]]:
        names, file_of, line, target, rules = [], [], [], [], {}
        for rel, path in files:
            arcs, rules[rel] = _parse(path)
            if not arcs:
                del rules[rel]
                continue
            k = len(names)
            names.append(rel)
            for a, b in sorted(arcs):
                file_of.append(k)
                line.append(a)
                target.append(b)
        build = {p: _package_version(p) for p in self.packages}
        arrays = [np.array(x, dtype=np.int32) for x in (file_of, line, target)]
        return Universe("python", "arc", build, names, *arrays), rules

    # -- per test ----------------------------------------------------------------
    def start(self) -> None:
        self.universe()
        if self._data is None:
            self._cov.start()  # the first start installs the tracer; later ones resume it
            self._cov.stop()
            self._data = _TraceData(self._cov)
        self._data.clear()
        self._cov.start()

    def stop(self) -> Hits:
        self._cov.stop()
        assert self._data is not None, "stop() without start()"
        index: list[int] = []
        for path, packed in self._data.items():
            if packed:
                index.extend(self._map_file(path, packed))
        self._data.clear()
        reached = np.unique(np.array(index, dtype=np.uint32))  # several recorded arcs can map to one
        return Hits(reached, np.ones(len(reached), dtype=np.uint32))

    def _map_file(self, path: str, packed: Iterable[Any]) -> list[int]:
        table = self._lookup.get(path, ...)
        if table is ...:
            rel = self._relative(path)
            table = self._lookup[path] = (
                _ArcTable(self._universe, self._file_index[rel], self._rules[rel]) if rel in self._file_index else None
            )
        if table is None:  # a file outside the universe (no arcs of its own)
            return []
        out = []
        for p in packed:
            i = table.index(_unpack(p))
            if i is None:
                self.unmapped += 1
            elif i >= 0:
                out.append(i)
        return out

    def _relative(self, path: str) -> str | None:
        p = Path(path)
        for pkg, d in self.dirs.items():
            if p.is_relative_to(d):
                return p.relative_to(_top_parent(pkg, d)).as_posix()
        return None


def _top_parent(pkg: str, d: Path) -> Path:
    """The folder holding the top-level package of `pkg`, whose folder is `d`."""
    return d.parents[len(pkg.split(".")) - 1]


class _ArcTable:
    """Recorded arc -> branch index for one file, the way coverage.py's analysis maps them."""

    def __init__(self, universe: Universe | None, k: int, rules: _FileRules) -> None:
        assert universe is not None
        idx = np.flatnonzero(universe.file_of == k)
        self.arcs = {(int(universe.line[i]), int(universe.target[i])): int(i) for i in idx}
        self.rules = rules
        dests: dict[int, set[int]] = {}
        for a, b in self.arcs:
            dests.setdefault(a, set()).add(b)
        self.single_dest = {a: next(iter(bs)) for a, bs in dests.items() if len(bs) == 1}
        self.memo: dict[Arc, int | None] = {}

    def _translate(self, arc: Arc) -> Arc | None:
        fixed = self.rules.fixers.get(arc, arc)
        if fixed is None:
            return None
        ml = self.rules.multiline
        a, b = fixed
        return (-ml.get(-a, -a) if a < 0 else ml.get(a, a)), (-ml.get(-b, -b) if b < 0 else ml.get(b, b))

    def index(self, arc: Arc) -> int | None:
        """The branch index; -1 for what coverage.py does not count (a step inside one statement,
        entering or leaving a function); None for an arc outside the universe."""
        if arc in self.memo:
            return self.memo[arc]
        t = self._translate(arc)
        if t is not None and t[0] == t[1]:
            t = (t[0], self.single_dest[t[0]]) if t[0] in self.single_dest else None
        t = self._translate(t) if t is not None else None
        i = -1 if t is None else self.arcs.get(t)
        if i is None and min(t) < 0:  # code-object entry/exit: coverage.py's analysis has no such arcs
            i = -1
        self.memo[arc] = i
        return i


def _unpack(packed: Any) -> tuple[int, int]:
    if isinstance(packed, tuple):
        return int(packed[0]), int(packed[1])
    a, b = packed & _PACK_MASK, (packed >> 28) & _PACK_MASK
    return (-a if packed & (1 << 56) else a), (-b if packed & (1 << 57) else b)


class _TraceData:
    """The tracer's live per-file arc sets inside a started-once `coverage.Coverage`."""

    def __init__(self, cov: Any) -> None:
        collector = getattr(cov, "_collector", None)
        if collector is None or not isinstance(getattr(collector, "data", None), dict):
            import coverage

            raise CollectorError(
                f"python collector: coverage.py {coverage.__version__} keeps its trace data differently; "
                "install a 7.x release the project lists in setup.cfg"
            )
        self._collector = collector

    def items(self) -> Iterable[tuple[str, Any]]:
        return list(self._collector.data.items())

    def clear(self) -> None:
        # Empty the sets in place: the tracer holds references to them.
        for arcs in self._collector.data.values():
            arcs.clear()


def _save_cache(path: Path, universe: Universe, rules: dict[str, _FileRules]) -> None:
    body = {
        "schema": CACHE_SCHEMA,
        "universe": universe.to_bytes(),
        "rules": {rel: r.to_wire() for rel, r in rules.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, zlib.compress(msgpack.packb(body, use_bin_type=True), 6))


def _load_cache(path: Path) -> tuple[Universe, dict[str, _FileRules]] | None:
    """The cached analysis, or None when missing or unreadable (it is then recomputed)."""
    try:
        body = msgpack.unpackb(zlib.decompress(path.read_bytes()), raw=False, strict_map_key=False)
        if body.get("schema") != CACHE_SCHEMA:
            return None
        universe = Universe.from_bytes(body["universe"])
        rules = {rel: _FileRules.from_wire(r) for rel, r in body["rules"].items()}
        return universe, rules
    except (OSError, ValueError, KeyError, TypeError, zlib.error, msgpack.UnpackException):
        return None
