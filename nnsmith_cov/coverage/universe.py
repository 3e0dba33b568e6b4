"""The branch universe: every branch a collector can report, numbered, with its source location.

Branch i of a universe is the same branch in every run, on every machine, with the
same builds of the systems under test: maps index branches by that number, and
`ident` (a content hash) says whether two maps share a numbering.

On-disk form (schema 2; schema 1 is the same without "parts"), a zlib-compressed msgpack map:

    {"schema": 2, "collector": "python", "kind": "arc",
     "build": {"tvm": "0.27.0.post1", "torch": "2.13.0+cpu"},
     "files": ["tvm/relax/op/base.py", ...],
     "file_of": <int32 bytes>, "line": <int32 bytes>, "target": <int32 bytes>,
     "parts": []}

`kind` says what `target` holds: "arc" (python: the line the arc goes to, negative
for a function exit), "edge" (llvm: the counter's ordinal in its module), "block"
(binary: a slot of a function's code).

A composite collector (`python+binary`) measures with several collectors at once:
its universe is theirs laid end to end (`join`), one part per collector, each
keeping its own numbering, files and kind; `split` gives each part back as the
universe its collector alone would have made (same `ident`), so a part of a
composite campaign compares with a campaign of that collector alone.
"""

from __future__ import annotations

import bisect
import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import numpy as np

from nnsmith_cov.atomic_file import write_atomic

UNIVERSE_SCHEMA = 2


@dataclass(frozen=True)
class Branch:
    file: str
    line: int
    target: int
    kind: str

    def key(self) -> str:
        """A stable, readable identity: `tvm/relax/op/base.py:12->14`, `passes/x.cc:40#7`."""
        sep = "->" if self.kind == "arc" else "#"
        return f"{self.file}:{self.line}{sep}{self.target}"


@dataclass(frozen=True)
class Part:
    """One collector's share of a joined universe: branches [start, stop), files [file_start, file_stop)."""

    collector: str
    kind: str
    start: int
    stop: int
    file_start: int
    file_stop: int
    build: dict[str, str]


@dataclass
class Universe:
    collector: str
    kind: str
    build: dict[str, str]
    files: list[str]
    file_of: np.ndarray  # int32 per branch
    line: np.ndarray  # int32 per branch
    target: np.ndarray  # int32 per branch
    parts: tuple[Part, ...] = ()  # a joined universe's collectors, in order (empty: one collector)
    ident: str = field(init=False)
    _split: list[tuple[int, Universe]] | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.file_of)
        if not (len(self.line) == len(self.target) == n):
            raise ValueError("universe: per-branch arrays differ in length")
        if n and (int(self.file_of.min()) < 0 or int(self.file_of.max()) >= len(self.files)):
            raise ValueError("universe: a branch names a file that is not listed")
        h = hashlib.sha256(f"{self.collector}\0{self.kind}\0".encode())
        h.update("\0".join(self.files).encode())
        for a in (self.file_of, self.line, self.target):
            h.update(np.ascontiguousarray(a, dtype="<i4").tobytes())
        for p in self.parts:
            h.update(f"\0{p.collector}\0{p.kind}\0{p.start}\0{p.stop}\0{p.file_start}\0{p.file_stop}".encode())
        ends = [(0, 0), *((p.stop, p.file_stop) for p in self.parts)]
        if self.parts and (
            ends[-1] != (n, len(self.files))
            or any((p.start, p.file_start) != e for p, e in zip(self.parts, ends, strict=False))
            or any(p.stop < p.start or p.file_stop < p.file_start for p in self.parts)
        ):
            raise ValueError("universe: its parts do not tile its branches and files")
        self.ident = h.hexdigest()[:16]

    @staticmethod
    def join(universes: Sequence[Universe]) -> Universe:
        """The universes laid end to end, one part each (a composite collector's universe)."""
        parts, files, arrays = [], [], []
        start = 0
        for u in universes:
            if u.parts:
                raise ValueError("universe: cannot join a joined universe")
            parts.append(
                Part(u.collector, u.kind, start, start + len(u), len(files), len(files) + len(u.files), u.build)
            )
            arrays.append((u.file_of + len(files), u.line, u.target))
            files += u.files
            start += len(u)
        cat = [np.concatenate([a[k] for a in arrays]).astype(np.int32) for k in range(3)]
        kinds = {u.kind for u in universes}
        kind = kinds.pop() if len(kinds) == 1 else "mixed"
        build = {k: v for u in universes for k, v in u.build.items()}
        return Universe("+".join(u.collector for u in universes), kind, build, files, *cat, tuple(parts))

    def split(self) -> list[tuple[int, Universe]]:
        """(offset, universe) per part: each as its collector alone numbers it ([(0, self)] when not joined)."""
        if not self.parts:
            return [(0, self)]
        if self._split is not None:
            return self._split
        out = []
        for p in self.parts:
            file_of = self.file_of[p.start : p.stop] - p.file_start
            files = self.files[p.file_start : p.file_stop]
            u = Universe(
                p.collector,
                p.kind,
                dict(p.build),
                files,
                file_of,
                self.line[p.start : p.stop],
                self.target[p.start : p.stop],
            )
            out.append((p.start, u))
        self._split = out
        return out

    def split_index(self, index: np.ndarray) -> list[tuple[Universe, np.ndarray]]:
        """Branch indices of this universe as (part, indices in that part's numbering), per part."""
        index = np.asarray(index, dtype=np.int64)
        return [(u, index[(index >= off) & (index < off + len(u))] - off) for off, u in self.split()]

    def __len__(self) -> int:
        return len(self.file_of)

    def branch(self, i: int) -> Branch:
        kind = self.kind
        if self.parts:
            kind = self.parts[bisect.bisect_right([p.start for p in self.parts], i) - 1].kind
        return Branch(self.files[int(self.file_of[i])], int(self.line[i]), int(self.target[i]), kind)

    def key(self, i: int) -> str:
        return self.branch(i).key()

    def file_mask(self, patterns: Sequence[str]) -> np.ndarray:
        """Boolean per branch: its file matches one of `patterns` (see `path_matches`)."""
        per_file = np.array([any(path_matches(f, p) for p in patterns) for f in self.files], dtype=bool)
        return per_file[self.file_of] if len(self.files) else np.zeros(len(self), dtype=bool)

    def per_file(self, index: np.ndarray) -> dict[str, int]:
        """How many of the branches `index` lie in each file (files with none left out)."""
        counts = np.bincount(self.file_of[index], minlength=len(self.files))
        return {self.files[i]: int(counts[i]) for i in np.flatnonzero(counts)}

    def to_bytes(self) -> bytes:
        body = {
            "schema": UNIVERSE_SCHEMA,
            "collector": self.collector,
            "kind": self.kind,
            "build": self.build,
            "files": self.files,
            "file_of": self.file_of.astype("<i4").tobytes(),
            "line": self.line.astype("<i4").tobytes(),
            "target": self.target.astype("<i4").tobytes(),
            "parts": [vars(p) for p in self.parts],
        }
        return zlib.compress(msgpack.packb(body, use_bin_type=True), 6)

    @staticmethod
    def from_bytes(data: bytes) -> Universe:
        try:
            body = msgpack.unpackb(zlib.decompress(data), raw=False)
            if body.get("schema") not in (1, UNIVERSE_SCHEMA):
                raise ValueError(f"schema {body.get('schema')!r}, expected {UNIVERSE_SCHEMA}")
            arrays = [np.frombuffer(body[k], dtype="<i4").astype(np.int32) for k in ("file_of", "line", "target")]
            parts = tuple(Part(**p) for p in body.get("parts", ()))
            return Universe(body["collector"], body["kind"], dict(body["build"]), list(body["files"]), *arrays, parts)
        except (zlib.error, ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            raise ValueError(f"not a branch universe: {e}") from None

    def save(self, path: Path) -> None:
        """Write atomically: a reader never sees half a universe."""
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, self.to_bytes())

    @staticmethod
    def load(path: Path) -> Universe:
        return Universe.from_bytes(path.read_bytes())


def path_matches(path: str, pattern: str) -> bool:
    """`pattern` names a folder (ends in /) or a file, matched at any depth of `path`
    along whole path components: `relax/transform/` matches `tvm/relax/transform/fuse.py`
    and `/src/tvm/src/relax/transform/x.cc`, not `tvm/relax/transformer.py`."""
    p = "/" + path.lstrip("/")
    q = "/" + pattern.lstrip("/")
    return q in p if q.endswith("/") else p.endswith(q)
