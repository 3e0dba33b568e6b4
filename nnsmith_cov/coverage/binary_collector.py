"""The binary collector, worker side: block coverage of a prebuilt shared object, counted by a Frida agent.

A process cannot trace itself, so the parent drives Frida into the worker (see
`binary_attach`); this half lives in the worker and owns everything per test:

- the modules: those given (`--binary-module`), else those the worker's backends declare
  (their `native_module`: ORT's `onnxruntime_pybind11_state*.so`, which holds all of ORT;
  TVM's `libtvm_compiler.so`), else ORT's; and their slot layouts (`binary_symbols`), read
  from the files before they are loaded and cached; several modules' slots lie end to end;
  code a module links in from other projects (LLVM in TVM's library) is not followed:
  calls into it run natively (`binary_symbols.OWN_CODE`);
- the hit map, a numpy uint8 array the agent's inline counters write into: `start()`
  zeroes it, `stop()` returns its nonzero slots, as the llvm collector does;
- the measuring thread: the agent follows this one thread for the worker's life, so
  every backend call of the worker runs on it (`call`), never on the main thread,
  which stays native for the value search, the export and the self-check;
- calibration: a run that reaches a slot this worker has not seen is run again, and
  the slots present in one run only are flagged as flaky (AFL++'s calibration), while the
  reruns stay within a share of the worker's time (`--calibration-share`, default 0.25;
  past it a run is reported uncalibrated and its slots count as seen). A flaky
  slot is still reported whenever a run reaches it: it is code that ran. The campaign
  counts its first reach and never rewards its hit counts (`covmap.VirginMap.flag`).
  Hiding such slots from then on, as this collector once did, erased real coverage at a
  moment set by chance: ORT runs some of a session's set-up (~1.2k blocks of environment
  and graph code) in some runs of a model and not in others, at times on threads of its
  own (gdb, 391 corpus models natively: 79 reach it, 6 partly on ORT's threads), so a
  rerun differed once, and the campaign whose calibration saw that lost those blocks for
  good while another, luckier one kept them: a third of a "unique" column.

The worker asks the parent to attach twice (`attach_requests`): first to follow the
thread that loads the module (on AVX-512 hosts the agent must see the module's CPU
feature checks), then, once the module is loaded, to follow a fresh measuring thread
that counts its blocks. A backend that can load its libraries alone (TVM:
`load_libraries`) does only that on the followed thread and imports its Python package
natively afterwards: following that import too took about 20 s of a TVM worker's 50 s
start (scripts/bench_coverage.py --collector binary --backend tvm). Two threads, each
followed once, because a thread followed again while parked in code compiled for it
before runs that stale code under the new follow. ORT runs with one intra-op and one
inter-op thread, sequentially (`backends.ort`), and TVM with one thread
(`TVM_NUM_THREADS=1` in the worker): no pool threads, so the followed thread sees their
work, all but what ORT now and then runs on threads of its own (see calibration above).
Code TVM generates at run time is placed at fresh addresses by the agent (`binary_agent`).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import queue
import sys
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.binary_symbols import ModuleLayout, read_layout
from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.declared import DeclaredBackend, declared_modules
from nnsmith_cov.coverage.universe import Universe

DEFAULT_MODULE = "onnxruntime_pybind11_state*"
LAYOUT_SCHEMA = 4  # 3: labels from namespaces and neighbouring files too; 4: code run natively (OWN_CODE)
RECENT_INPUTS = 64  # inputs whose last run is remembered, to catch slots that vary between runs
T = TypeVar("T")


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "nnsmith-cov" / "universe"


def host_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


def _file_mappings() -> dict[str, list[tuple[int, int, int]]]:
    """Path -> (start, end, file offset) of each mapping of a file in this process."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    with open("/proc/self/maps") as f:
        for row in f:
            parts = row.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                path = parts[5].rstrip("\n").removesuffix(" (deleted)")
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.setdefault(path, []).append((lo, hi, int(parts[2], 16)))
    return out


def _load_base(rows: list[tuple[int, int, int]]) -> int:
    """Where the loader put a file: its mapping of offset 0 (the ELF header). Other mappings of the
    file can lie anywhere (TVM maps pieces of its library to read unwind data for backtraces)."""
    heads = [lo for lo, _, off in rows if off == 0]
    return min(heads) if heads else min(lo - off for lo, _, off in rows)


def loaded_modules() -> dict[str, int]:
    """Path -> load base of the files mapped into this process."""
    return {path: _load_base(rows) for path, rows in _file_mappings().items()}


def mapped_ends() -> dict[str, int]:
    """Path -> end of the file's highest mapping at or above its load base."""
    out = {}
    for path, rows in _file_mappings().items():
        base = _load_base(rows)
        out[path] = max((hi for lo, hi, _ in rows if lo >= base), default=base)
    return out


def find_module(pattern: str) -> str:
    """The file `pattern` names: a path or glob with `/`, or a file-name glob looked up among the
    loaded files, then ORT's package (for the default), then packages on sys.path."""
    if "/" in pattern:
        found = sorted(glob.glob(pattern))
    else:
        found = sorted(p for p in loaded_modules() if fnmatch(os.path.basename(p), pattern))
        if not found and pattern == DEFAULT_MODULE:
            spec = importlib.util.find_spec("onnxruntime")
            roots = list(spec.submodule_search_locations or []) if spec else []
            found = sorted(p for r in roots for p in glob.glob(os.path.join(r, "capi", pattern)))
        for root in sys.path if not found else ():
            if os.path.isdir(root):
                found = sorted(glob.glob(os.path.join(root, "*", pattern)) + glob.glob(os.path.join(root, pattern)))
                if found:
                    break
        for root in sys.path if not found else ():  # a library a package keeps in a folder (tvm/lib/)
            if os.path.isdir(root):
                found = sorted(glob.glob(os.path.join(root, "*", "*", pattern)))
                if found:
                    break
    found = [p for p in found if os.path.isfile(p)]
    if not found:
        raise CollectorError(f"binary collector: no module matches {pattern!r} (loaded, or under sys.path)")
    return os.path.realpath(found[0])


def cached_layout(path: str, cache_dir: Path) -> ModuleLayout:
    """`read_layout`, cached by the file's path, size and mtime (parsing takes seconds)."""
    st = os.stat(path)
    key = hashlib.sha256(f"{LAYOUT_SCHEMA}\0{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:20]
    cache = cache_dir / f"binary-{key}.bin"
    try:
        body = msgpack.unpackb(zlib.decompress(cache.read_bytes()), raw=False)
        if body["schema"] == LAYOUT_SCHEMA:
            arr = {k: np.frombuffer(body[k], dtype=d).copy() for k, d in _LAYOUT_ARRAYS.items()}
            excluded = np.frombuffer(body["excluded"], dtype="<u8").copy().reshape(-1, 2)
            return ModuleLayout(path, body["build_id"], labels=list(body["labels"]), excluded=excluded, **arr)
    except (OSError, ValueError, KeyError, TypeError, zlib.error, msgpack.UnpackException):
        pass
    layout = read_layout(path)
    body = {"schema": LAYOUT_SCHEMA, "build_id": layout.build_id, "labels": layout.labels}
    body["excluded"] = layout.excluded.astype("<u8").tobytes()
    body |= {k: getattr(layout, k).astype(d).tobytes() for k, d in _LAYOUT_ARRAYS.items()}
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(cache, zlib.compress(msgpack.packb(body, use_bin_type=True), 6))
    return layout


def concat_universes(parts: list[Universe]) -> Universe:
    """Several modules' slot universes end to end, as one binary universe (files listed per module)."""
    if len(parts) == 1:
        return parts[0]
    files: list[str] = []
    file_of = []
    for u in parts:
        file_of.append(u.file_of + len(files))
        files += u.files
    build = {k: v for u in parts for k, v in u.build.items()}
    cat = lambda k: np.concatenate([getattr(u, k) for u in parts]).astype(np.int32)
    return Universe(
        "binary", "block", build, files, np.concatenate(file_of).astype(np.int32), cat("line"), cat("target")
    )


_LAYOUT_ARRAYS = {"start": "<u8", "length": "<u8", "slot_base": "<u4", "slot_mask": "<u4", "label_of": "<i4"}


def _in_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which elements of `a` are in `b`; both sorted and duplicate-free (`Hits.index`)."""
    if not len(b):
        return np.zeros(len(a), dtype=bool)
    pos = np.searchsorted(b, a)
    np.minimum(pos, len(b) - 1, out=pos)
    return b[pos] == a


def sorted_xor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Slots in exactly one of two sorted, duplicate-free index arrays: `np.setxor1d` without
    its hashing pass (5 ms for two runs of ~22k slots, 0.6 ms this way)."""
    out = np.concatenate([a[~_in_sorted(a, b)], b[~_in_sorted(b, a)]]).astype(np.uint32)
    out.sort()
    return out


class MeasuringThread:
    """One long-lived thread that runs the calls handed to it, one at a time."""

    def __init__(self, name: str = "nncov-measured") -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self.tid = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _loop(self) -> None:
        self.tid = threading.get_native_id()
        self._ready.set()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the caller, who decides
                box.append((False, e))
            done.set()

    def retire(self) -> None:
        """Let the thread end once it has run what it was given."""
        self._jobs.put(None)

    def call(self, fn: Callable[[], T]) -> T:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


class BinaryCollector:
    """Block coverage of one prebuilt module, counted by the parent's Frida agent in this process.

    Not thread-safe: `start`/`stop` from the thread that serves requests; the measured work
    goes through `call`."""

    name = "binary"

    takes_backends = True  # `make_collector` hands it the worker's backends' declarations (`declared`)

    def __init__(
        self, targets: list[str], cache_dir: Path | None = None, backends: Sequence[DeclaredBackend] = ()
    ) -> None:
        patterns = list(targets) or declared_modules(backends) or [DEFAULT_MODULE]
        self.declared = {b.spec: b for b in backends}  # what `native` knows of each backend
        self.paths = list(dict.fromkeys(find_module(p) for p in patterns))
        self.layouts = [cached_layout(p, cache_dir or default_cache_dir()) for p in self.paths]
        self.path, self.layout = self.paths[0], self.layouts[0]
        sizes = [lay.slots for lay in self.layouts]
        self.offsets = [int(x) for x in np.cumsum([0, *sizes[:-1]])]  # first slot of each module
        self.slots = int(sum(sizes))
        # Padded to whole 8-byte words: `stop` scans the map a word at a time.
        self.map = np.zeros(-(-self.slots // 8) * 8, dtype=np.uint8)
        self._words = self.map.view(np.uint64)
        self.unstable = np.zeros(self.slots, dtype=bool)  # flagged flaky by calibration (this handle's workers)
        self.seen = np.zeros(self.slots, dtype=bool)  # slots this worker has reported
        self.thread = MeasuringThread("nncov-import")  # replaced by the measuring thread at `locate_request`
        self._retired: MeasuringThread | None = None
        self._universe: Universe | None = None
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()  # input key -> its last run's slots
        # Keep the tables the agent's C code reads alive (and contiguous) for the process's life.
        self._tables = [np.ascontiguousarray(getattr(self.layout, k)) for k in _LAYOUT_ARRAYS if k != "label_of"]

    # -- the two attach requests --------------------------------------------------
    def follow_request(self) -> dict[str, Any]:
        """What the agent needs before the module is loaded: the (import) thread, the map, the tables."""
        start, length, slot_base, slot_mask = self._tables
        addr = lambda a: str(a.ctypes.data)
        return {
            "kind": "attach",
            "phase": "follow",
            "pid": os.getpid(),
            "tid": self.thread.tid,
            "base": "0",
            "lo": "0",
            "hi": "0",
            "map": addr(self.map),
            "n": len(start),
            "start": addr(start),
            "length": addr(length),
            "slot_base": addr(slot_base),
            "slot_mask": addr(slot_mask),
            "clear_avx512": int(host_has_avx512()),
        }

    def locate_request(self) -> dict[str, Any]:
        """Where the modules were loaded (after the backends imported them on the import thread), with
        the measuring thread that the agent is to follow from now on in the import thread's place.

        The agent's tables become absolute: every module's function ranges at their load address,
        sorted, each module's slots after the ones before it, so one lookup serves them all."""
        loaded = loaded_modules()
        bases = []
        for path in self.paths:
            if path not in loaded:
                raise CollectorError(f"binary collector: {os.path.basename(path)} was not loaded by the backends")
            bases.append(loaded[path])
        order = np.argsort(bases, kind="stable")
        pick = lambda k, f: np.concatenate([f(self.layouts[i], i) for i in order]).astype(_LAYOUT_ARRAYS[k])
        self._tables = [
            np.ascontiguousarray(pick("start", lambda lay, i: lay.start + np.uint64(bases[i]))),
            np.ascontiguousarray(pick("length", lambda lay, i: lay.length)),
            np.ascontiguousarray(pick("slot_base", lambda lay, i: lay.slot_base + np.uint32(self.offsets[i]))),
            np.ascontiguousarray(pick("slot_mask", lambda lay, i: lay.slot_mask)),
        ]
        # The whole mappings: the agent also asks whether a call came from these modules.
        mapped = mapped_ends()
        ends = [
            max(mapped[p], bases[i] + int(lay.start[-1] + lay.length[-1]))
            for i, (p, lay) in enumerate(zip(self.paths, self.layouts))
        ]
        where = {"base": "0", "lo": str(min(bases)), "hi": str(max(ends))}
        # Code linked in from other projects (LLVM in TVM's library) runs natively: calls into it
        # are not followed, so neither is anything it calls.
        excluded = [(b + int(lo), int(hi - lo)) for b, lay in zip(bases, self.layouts) for lo, hi in lay.excluded]
        where["exclude"] = [[str(a), str(n)] for a, n in excluded]
        # The import thread ends at the next call, when the agent has let it go (its reply came first).
        self._retired, self.thread = self.thread, MeasuringThread()
        return self.follow_request() | {"phase": "locate"} | where

    # -- the collector protocol ---------------------------------------------------
    def universe(self) -> Universe:
        """The modules' slot universes end to end (one module: exactly its own)."""
        if self._universe is None:
            self._universe = concat_universes([lay.universe() for lay in self.layouts])
        return self._universe

    def native(self, backend: str) -> bool:
        """`backend` is known to run its code outside the followed modules (ORT while TVM's compiler
        is followed alone): its calls run natively where they are made, where following them would
        count nothing. Backends that do not say (or were not declared to it) are followed."""
        declared = self.declared.get(backend)
        glob = declared.native_module if declared else None
        return glob is not None and not any(fnmatch(os.path.basename(p), glob) for p in self.paths)

    def call(self, fn: Callable[[], T], backend: str = "") -> T:
        """Run `fn` on the measuring thread, unless it is a call into a `native` backend."""
        if backend and self.native(backend):
            return fn()
        if self._retired is not None:
            self._retired.retire()
            self._retired = None
        return self.thread.call(fn)

    def start(self) -> None:
        self.map.fill(0)

    def stop(self) -> Hits:
        """Every nonzero slot since `start`, flaky ones included. The map is scanned a word at a
        time, then only the nonzero words byte by byte (about 0.3 ms for ORT's 2.6M slots, against
        3-4 ms for a scan byte by byte)."""
        words = np.flatnonzero(self._words != 0)
        inner = np.flatnonzero(self.map.reshape(-1, 8)[words])
        index = ((words[inner >> 3] << 3) + (inner & 7)).astype(np.uint32)
        return Hits(index, self.map[index].astype(np.uint32))

    def settle(self, first: Hits, again: Callable[[], Hits] | None, key: str = "") -> np.ndarray:
        """Calibrate: a run that reached slots this worker never saw is repeated (`again()`; not
        with `again` None: the worker's calibration budget is spent), and a run of an input this
        worker ran lately (same `key`) is compared with that run; slots present in one run only are
        flaky. Returns the newly flaky slots (the campaign's to weigh: see `covmap.VirginMap.flag`);
        the first run's hits are reported whole, as they were."""
        flicker = np.zeros(0, np.uint32)
        if key in self._recent:
            flicker = sorted_xor(first.index, self._recent.pop(key))
        if key:
            self._recent[key] = first.index
            while len(self._recent) > RECENT_INPUTS:
                self._recent.popitem(last=False)
        if again is not None and len(first) and not self.seen[first.index].all():
            second = again()
            flicker = np.union1d(flicker, sorted_xor(first.index, second.index)).astype(np.uint32)
        flicker = flicker[~self.unstable[flicker]]
        self.mask(flicker)
        self.seen[first.index] = True
        return flicker

    def mask(self, slots: np.ndarray) -> None:
        """Flag slots flaky (those of this run's calibration, or of earlier workers of the handle):
        a later run that differs in them only is not calibrated again."""
        slots = np.asarray(slots, dtype=np.int64)
        self.unstable[slots[(slots >= 0) & (slots < len(self.unstable))]] = True
