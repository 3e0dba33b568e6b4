"""The instrumentation kit's counter runtime, built on demand and loaded into this process.

SanitizerCoverage libraries call `__sanitizer_cov_8bit_counters_init` and
`__sanitizer_cov_pcs_init` from their constructors and will not load without them;
the kit's runtime (instrumentation/runtime/nncov_rt.c) defines both and records one
region per library. It must be in the global symbol scope before the first
instrumented library is loaded: `load_runtime()` dlopens it with RTLD_GLOBAL, or
adopts a copy already there (LD_PRELOAD, an earlier call).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nnsmith_cov.coverage.collector import CollectorError


def cache_root() -> Path:
    return Path(os.environ.get("NNSMITH_COV_CACHE") or Path.home() / ".cache" / "nnsmith-cov")


def kit_dir() -> Path:
    """instrumentation/ of this checkout, or $NNCOV_KIT."""
    env = os.environ.get("NNCOV_KIT")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "instrumentation"


def build_runtime() -> Path:
    """The folder holding libnncov_rt.so and nncov_profile_helper.o, built if needed."""
    script = kit_dir() / "bin" / "nncov-build-runtime"
    if not script.is_file():
        raise CollectorError(f"llvm collector: the instrumentation kit is missing ({script} not found; set NNCOV_KIT)")
    r = subprocess.run([str(script)], capture_output=True, text=True)
    if r.returncode:
        lines = (r.stderr.strip() or f"status {r.returncode}").splitlines()
        raise CollectorError(f"llvm collector: cannot build the counter runtime: {lines[-1].removeprefix('nncov: ')}")
    return Path(r.stdout.strip())


@dataclass(frozen=True)
class RegionInfo:
    """One instrumented library as the runtime saw it register."""

    counters: int  # address of its first uint8 counter
    size: int  # number of counters
    pcs: int  # address of its pc table (pairs of uintptr: PC, flags), 0 when built without pc-table
    path: str  # the library, as the loader names it
    bias: int  # load bias: absolute PC - bias = address in the file


class Runtime:
    """ctypes view of the loaded runtime's query API."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        for name in ("nncov_counters_start", "nncov_counters_end", "nncov_pcs_start", "nncov_pcs_end"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_size_t]
        lib.nncov_regions.restype = ctypes.c_size_t
        lib.nncov_regions.argtypes = []
        lib.nncov_region_object.restype = ctypes.c_int
        lib.nncov_region_object.argtypes = [
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_size_t),
        ]

    def regions(self) -> list[RegionInfo]:
        """Every region registered so far whose library is still loaded."""
        out = []
        for i in range(self.lib.nncov_regions()):
            start, end = self.lib.nncov_counters_start(i), self.lib.nncov_counters_end(i)
            path, bias = ctypes.c_char_p(), ctypes.c_size_t()
            if not start or not self.lib.nncov_region_object(i, ctypes.byref(path), ctypes.byref(bias)):
                continue
            name = os.fsdecode(path.value or b"")
            out.append(RegionInfo(start, end - start, self.lib.nncov_pcs_start(i) or 0, name, bias.value))
        return out


_runtime: Runtime | None = None


def load_runtime() -> Runtime:
    """The process's counter runtime: the one already in the global scope, else ours
    (built on demand) loaded with RTLD_GLOBAL. Call before importing instrumented code."""
    global _runtime
    if _runtime is not None:
        return _runtime
    try:
        ctypes.CDLL(None).nncov_regions  # noqa: B018 - a lookup: is a runtime already global?
        lib = ctypes.CDLL(None)
    except AttributeError:
        path = build_runtime() / "libnncov_rt.so"
        try:
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise CollectorError(f"llvm collector: cannot load {path}: {e}") from None
    _runtime = Runtime(lib)
    return _runtime
