"""Source-based coverage of libraries built with NNCOV_MODE=profile: live counters, profiles, branch reports.

Such a library carries its own copy of the profile runtime, linked in with hidden
visibility; the kit's helper object exports wrappers around it (`nncov_profile_*`,
see instrumentation/runtime/nncov_profile_helper.c), reached here through the
library's own handle. Its counters are uint64, one per region of the coverage
mapping, and llvm-cov derives a branch's false count as (parent count - true count),
so a report is only right when the counters hold real summed counts: to report a
set of tests, `write_profile(path, counts)` puts their summed counts into the live
counters, dumps, and puts the live values back.

    lib = ProfileLibrary("/path/libfoo.so")       # after the library is loaded
    lib.reset(); ...run a test...; counts = lib.counters.copy()
    lib.write_profile(tmp / "t.profraw", counts)
    branches = branch_report(lib.path, [tmp / "t.profraw"], tmp / "t.profdata")
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnsmith_cov.coverage.collector import CollectorError


class ProfileLibrary:
    """The profile counters of one loaded library built with NNCOV_MODE=profile.

    Opening it points the runtime's at-exit dump at /dev/null: a profile is written
    only when asked. The runtime has already created an empty default.profraw in the
    cwd when the library loaded; LLVM_PROFILE_FILE=/dev/null in the process's
    environment avoids even that."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        try:
            lib = ctypes.CDLL(self.path)
            begin, end = lib.nncov_profile_begin_counters, lib.nncov_profile_end_counters
        except (OSError, AttributeError) as e:
            raise CollectorError(
                f"llvm profile: {os.path.basename(self.path)} has no nncov profile helper ({e})"
            ) from None
        for fn in (begin, end):
            fn.restype = ctypes.c_void_p
            fn.argtypes = []
        lib.nncov_profile_set_filename.argtypes = [ctypes.c_char_p]
        lib.nncov_profile_set_filename.restype = None
        lib.nncov_profile_write_file.restype = ctypes.c_int
        lib.nncov_profile_reset.restype = None
        self._lib = lib
        lo, hi = begin() or 0, end() or 0
        n = (hi - lo) // 8
        self.counters = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(lo)) if n else np.zeros(0, np.uint64)
        self._lib.nncov_profile_set_filename(b"/dev/null")

    def reset(self) -> None:
        self._lib.nncov_profile_reset()

    def write_profile(self, path: Path, counts: np.ndarray | None = None) -> Path:
        """Dump a .profraw of `counts` (default: the live counters) to `path`, replacing it."""
        path = Path(path)
        saved = None
        if counts is not None:
            if counts.shape != self.counters.shape:
                raise ValueError(f"{len(counts)} counts for {len(self.counters)} counters")
            saved = self.counters.copy()
            self.counters[:] = counts
        try:
            path.unlink(missing_ok=True)  # the runtime appends to an existing file
            self._lib.nncov_profile_set_filename(os.fsencode(path))
            status = self._lib.nncov_profile_write_file()
        finally:
            self._lib.nncov_profile_set_filename(b"/dev/null")
            if saved is not None:
                self.counters[:] = saved
        if status != 0 or not path.exists():
            raise CollectorError(f"llvm profile: writing {path} failed (status {status})")
        return path


@dataclass(frozen=True)
class BranchCounts:
    """One branch of llvm-cov's report: where its condition is, how often it went each way."""

    file: str
    line: int
    column: int
    true_count: int
    false_count: int


def branch_report(library: str, profraws: list[Path], profdata: Path) -> list[BranchCounts]:
    """Merge `profraws` into `profdata` and export every branch of `library` with llvm-cov-19."""
    try:
        subprocess.run(
            ["llvm-profdata-19", "merge", "-sparse", "-o", str(profdata), *map(str, profraws)],
            check=True,
            capture_output=True,
            text=True,
        )
        exported = subprocess.run(
            ["llvm-cov-19", "export", "-format=text", "-skip-expansions", f"-instr-profile={profdata}", library],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except FileNotFoundError as e:
        raise CollectorError(f"llvm profile: {e.filename} not found (make native-tools installs llvm-19)") from None
    except subprocess.CalledProcessError as e:
        why = (e.stderr or "").strip().splitlines() or [f"status {e.returncode}"]
        raise CollectorError(f"llvm profile: {e.cmd[0]} failed: {why[0]}") from None
    out = []
    for data in json.loads(exported)["data"]:
        for f in data["files"]:
            # Each entry: line, column, end line, end column, true count, false count, ...
            for b in f.get("branches", []):
                out.append(BranchCounts(f["filename"], int(b[0]), int(b[1]), int(b[4]), int(b[5])))
    return out
