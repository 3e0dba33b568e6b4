"""The llvm collector: per-test SanitizerCoverage edge counts of native libraries built with instrumentation/.

Libraries compiled by the kit's wrappers (`-fsanitize-coverage=inline-8bit-counters,
pc-table`) keep one uint8 counter per edge, bumped inline by the code itself; the kit's
runtime records where each library's counters and pc table are. The collector reads
them in place through numpy views: `start()` zeroes them, `stop()` returns the nonzero
ones. No copies, no system calls, no symbolizer on the per-test path.

    collector = LlvmCollector(["onnx_opt_cpp2py_export*"])   # before the libraries are imported
    import onnxoptimizer                                      # the instrumented build
    universe = collector.universe()                           # libraries loaded so far

Branch order: library by library (sorted by path), counter by counter; `target` is the
counter's ordinal in its library, file and line come from the pc table (see
`llvm_symbols`). Counters are 8-bit and wrap: an edge taken 256 times in one test
reads 0 and is missed, 300 times reads 44 (libFuzzer's counters behave the same).
Libraries loaded after `universe()` are not measured; build a new collector for them.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from dataclasses import dataclass
from fnmatch import fnmatch

import numpy as np

from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.llvm_runtime import RegionInfo, load_runtime
from nnsmith_cov.coverage.llvm_symbols import counter_locations, library_key
from nnsmith_cov.coverage.universe import Universe

_UINTPTR = ctypes.c_uint64 if ctypes.sizeof(ctypes.c_void_p) == 8 else ctypes.c_uint32


def symbolizer_tool() -> str:
    return os.environ.get("NNCOV_SYMBOLIZER", "llvm-symbolizer-19")


def loaded_libraries() -> list[str]:
    """Paths of the shared objects mapped into this process (from /proc/self/maps)."""
    seen: dict[str, None] = {}
    try:
        with open("/proc/self/maps") as f:
            for row in f:
                parts = row.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/") and ".so" in os.path.basename(parts[5]):
                    seen.setdefault(parts[5].rstrip("\n").removesuffix(" (deleted)"), None)
    except OSError:
        return []
    return list(seen)


def target_matches(target: str, path: str) -> bool:
    """`target` names `path`: a path or glob with a `/` matches the whole (real) path; one
    without matches the file name (`libfoo.so`, `onnx_opt_cpp2py_export*`)."""
    candidates = {path, os.path.realpath(path)}
    if "/" in target:
        return any(fnmatch(c, target) or fnmatch(c, os.path.realpath(target)) for c in candidates)
    return any(fnmatch(os.path.basename(c), target) for c in candidates)


@dataclass
class _Library:
    path: str
    region: RegionInfo
    counters: np.ndarray  # uint8 view over the live counters
    base: int  # index of its first counter in the universe


class LlvmCollector:
    """SanitizerCoverage 8-bit counters of the instrumented libraries named by `targets`
    (empty: every instrumented library in the process). All collectors of a process
    share the live counters (`start()` zeroes them for every one of them): use one at
    a time, from the thread that runs the tests."""

    name = "llvm"

    def __init__(self, targets: list[str]) -> None:
        self.targets = list(targets)
        self.symbolizer = symbolizer_tool()
        if shutil.which(self.symbolizer) is None:
            raise CollectorError(f"llvm collector: {self.symbolizer} not found (make native-tools installs llvm-19)")
        # Now, before any instrumented library is imported: they need the runtime to load.
        self.runtime = load_runtime()
        self._universe: Universe | None = None
        self._libraries: list[_Library] = []

    def _chosen(self) -> list[tuple[str, RegionInfo]]:
        by_path: dict[str, RegionInfo] = {}
        for region in self.runtime.regions():
            # The loader names the main program "": an instrumented program measures itself.
            path = region.path or os.path.realpath("/proc/self/exe")
            if region.size > 0:
                by_path.setdefault(os.path.realpath(path), region)
        if not self.targets:
            if not by_path:
                raise CollectorError(
                    "llvm collector: no instrumented library is loaded (build one with instrumentation/)"
                )
            return sorted(by_path.items())
        chosen: dict[str, RegionInfo] = {}
        for target in self.targets:
            hit = {p: r for p, r in by_path.items() if target_matches(target, p) or target_matches(target, r.path)}
            if not hit:
                plain = [p for p in loaded_libraries() if target_matches(target, p)]
                if plain:
                    raise CollectorError(
                        f"llvm collector: {os.path.basename(plain[0])} is loaded but not instrumented with "
                        "SanitizerCoverage (no __sanitizer_cov_8bit_counters_init region)"
                    )
                raise CollectorError(f"llvm collector: no loaded library matches {target!r}")
            chosen.update(hit)
        return sorted(chosen.items())

    def universe(self) -> Universe:
        if self._universe is not None:
            return self._universe
        files: dict[str, int] = {}
        file_of, line, target = [], [], []
        build: dict[str, str] = {}
        libraries: list[_Library] = []
        base = 0
        for path, region in self._chosen():
            counters = np.ctypeslib.as_array((ctypes.c_uint8 * region.size).from_address(region.counters))
            n = region.size
            if region.pcs:
                pcs = np.ctypeslib.as_array((_UINTPTR * (2 * n)).from_address(region.pcs)).reshape(n, 2)
                locs = counter_locations(self.symbolizer, path, pcs[:, 0] - np.uint64(region.bias))
                remap = np.array([files.setdefault(f, len(files)) for f in locs.files], dtype=np.int32)
                file_of.append(remap[locs.file_of])
                line.append(locs.line)
            else:  # built without pc-table: counts without places
                file_of.append(np.full(n, files.setdefault(path, len(files)), dtype=np.int32))
                line.append(np.zeros(n, dtype=np.int32))
            target.append(np.arange(n, dtype=np.int32))
            build[os.path.basename(path)] = library_key(path)
            libraries.append(_Library(path, region, counters, base))
            base += n
        if base >= 1 << 32:
            raise CollectorError(f"llvm collector: {base} counters do not fit 32-bit branch indices")
        empty = np.zeros(0, dtype=np.int32)
        self._universe = Universe(
            "llvm",
            "edge",
            build,
            list(files),
            np.concatenate(file_of) if file_of else empty,
            np.concatenate(line) if line else empty,
            np.concatenate(target) if target else empty,
        )
        self._libraries = libraries
        return self._universe

    def start(self) -> None:
        if self._universe is None:
            self.universe()
        for lib in self._libraries:
            lib.counters.fill(0)

    def stop(self) -> Hits:
        """Nonzero counters since `start`. Costs a scan of every counter (numpy, about
        0.1 ms per 100,000) plus the hits found."""
        if self._universe is None:
            self.universe()
        index, count = [], []
        for lib in self._libraries:
            nz = np.flatnonzero(lib.counters != 0)  # faster than flatnonzero(counters) on integers
            if len(nz):
                index.append(nz.astype(np.uint32) + np.uint32(lib.base))
                count.append(lib.counters[nz].astype(np.uint32))
        if not index:
            return Hits.empty()
        # Libraries are laid out in increasing order: already sorted and unique.
        return Hits(np.concatenate(index), np.concatenate(count))
