"""Source locations of SanitizerCoverage counters: the pc table symbolized with llvm-symbolizer-19, cached.

Counter i of a library belongs to pc-table entry i, whose PC minus the library's load
bias is an address in the file; `llvm-symbolizer-19 --obj=LIB` turns all of them into
file:line in one run. A branch takes the innermost frame (where the code was written,
even when it was inlined into another function). Libraries built without debug
info, or stripped, give `??`:0.

The result depends only on the library's bytes, so it is cached under
`<cache>/llvm-symbols/<build-id or sha256>-<counters>.bin`: zlib-compressed msgpack,
schema 1, e.g.

    {"schema": 1, "library": "libfixture.so", "files": ["/src/fixture.cc", "??"],
     "file_of": <int32 bytes per counter>, "line": <int32 bytes per counter>}
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.llvm_runtime import cache_root

SYMBOLS_SCHEMA = 1
UNKNOWN_FILE = "??"
_NT_GNU_BUILD_ID = 3
_PT_NOTE = 4


@dataclass(frozen=True)
class CounterLocations:
    """Per counter of one library: the index of its file in `files`, and its line (0: unknown)."""

    files: list[str]
    file_of: np.ndarray  # int32
    line: np.ndarray  # int32


def build_id(path: str) -> str | None:
    """The GNU build id of a 64-bit little-endian ELF file, from its PT_NOTE segments."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, phentsize, phnum = struct.unpack_from("<Q", head, 32)[0], *struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            phdrs = f.read(phentsize * phnum)
            for k in range(phnum):
                p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", phdrs, k * phentsize)
                if p_type != _PT_NOTE:
                    continue
                f.seek(p_offset)
                notes = f.read(p_filesz)
                pos = 0
                while pos + 12 <= len(notes):
                    namesz, descsz, ntype = struct.unpack_from("<III", notes, pos)
                    name_at = pos + 12
                    desc_at = name_at + (namesz + 3) // 4 * 4
                    if ntype == _NT_GNU_BUILD_ID and notes[name_at : name_at + namesz].rstrip(b"\0") == b"GNU":
                        return notes[desc_at : desc_at + descsz].hex()
                    pos = desc_at + (descsz + 3) // 4 * 4
    except (OSError, struct.error):
        return None
    return None


def library_key(path: str) -> str:
    """What identifies a library's bytes: its build id, else a hash of the file."""
    bid = build_id(path)
    if bid:
        return bid
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256-" + h.hexdigest()[:32]


def _cache_path(key: str, n: int) -> Path:
    return cache_root() / "llvm-symbols" / f"{key}-{n}.bin"


def _load_cached(path: Path, n: int) -> CounterLocations | None:
    try:
        body = msgpack.unpackb(zlib.decompress(path.read_bytes()), raw=False)
        if body.get("schema") != SYMBOLS_SCHEMA:
            return None
        file_of = np.frombuffer(body["file_of"], dtype="<i4").astype(np.int32)
        line = np.frombuffer(body["line"], dtype="<i4").astype(np.int32)
        files = [str(f) for f in body["files"]]
        if len(file_of) != n or len(line) != n or (n and int(file_of.max()) >= len(files)):
            return None
        return CounterLocations(files, file_of, line)
    except (OSError, zlib.error, ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None


def _save(path: Path, library: str, locs: CounterLocations) -> None:
    body = {
        "schema": SYMBOLS_SCHEMA,
        "library": library,
        "files": locs.files,
        "file_of": locs.file_of.astype("<i4").tobytes(),
        "line": locs.line.astype("<i4").tobytes(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # workers symbolizing the same library at once: the last write wins, same content
    write_atomic(path, zlib.compress(msgpack.packb(body, use_bin_type=True), 6))


def symbolize(symbolizer: str, library: str, offsets: np.ndarray) -> CounterLocations:
    """file:line of each address in `offsets` (file addresses of `library`), one symbolizer run."""
    text = "".join(f"0x{int(a):x}\n" for a in offsets)
    try:
        r = subprocess.run(
            [symbolizer, f"--obj={library}", "--output-style=JSON", "--functions=none"],
            input=text,
            capture_output=True,
            text=True,
        )
    except OSError as e:
        raise CollectorError(f"llvm collector: cannot run {symbolizer}: {e}") from None
    lines = r.stdout.splitlines()
    if r.returncode or len(lines) != len(offsets):
        why = (r.stderr.strip().splitlines() or [f"{len(lines)} answers for {len(offsets)} addresses"])[0]
        raise CollectorError(f"llvm collector: {symbolizer} failed on {os.path.basename(library)}: {why}")
    files: dict[str, int] = {}
    file_of = np.zeros(len(offsets), dtype=np.int32)
    line = np.zeros(len(offsets), dtype=np.int32)
    for i, raw in enumerate(lines):
        frames = json.loads(raw).get("Symbol") or [{}]
        name = frames[0].get("FileName") or UNKNOWN_FILE
        name = os.path.normpath(name) if name != UNKNOWN_FILE else name
        file_of[i] = files.setdefault(name, len(files))
        line[i] = int(frames[0].get("Line") or 0)
    return CounterLocations(list(files), file_of, line)


def counter_locations(symbolizer: str, library: str, offsets: np.ndarray) -> CounterLocations:
    """`symbolize`, through the on-disk cache keyed by the library's build id."""
    path = _cache_path(library_key(library), len(offsets))
    cached = _load_cached(path, len(offsets))
    if cached is not None:
        return cached
    locs = symbolize(symbolizer, library, offsets)
    _save(path, os.path.basename(library), locs)
    return locs
