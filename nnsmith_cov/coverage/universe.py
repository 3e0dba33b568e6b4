"""The branch universe: every branch a collector can report, numbered, with its source location.

Branch i of a universe is the same branch in every run, on every machine, with the
same builds of the systems under test: maps index branches by that number, and
`ident` (a content hash) says whether two maps share a numbering.

On-disk form (schema 1), a zlib-compressed msgpack map:

    {"schema": 1, "collector": "python", "kind": "arc",
     "build": {"tvm": "0.27.0.post1", "torch": "2.13.0+cpu"},
     "files": ["tvm/relax/op/base.py", ...],
     "file_of": <int32 bytes>, "line": <int32 bytes>, "target": <int32 bytes>}

`kind` says what `target` holds: "arc" (python: the line the arc goes to, negative
for a function exit), "edge" (llvm: the counter's ordinal in its module).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import numpy as np

UNIVERSE_SCHEMA = 1


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


@dataclass
class Universe:
    collector: str
    kind: str
    build: dict[str, str]
    files: list[str]
    file_of: np.ndarray  # int32 per branch
    line: np.ndarray  # int32 per branch
    target: np.ndarray  # int32 per branch
    ident: str = field(init=False)

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
        self.ident = h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.file_of)

    def branch(self, i: int) -> Branch:
        return Branch(self.files[int(self.file_of[i])], int(self.line[i]), int(self.target[i]), self.kind)

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
        }
        return zlib.compress(msgpack.packb(body, use_bin_type=True), 6)

    @staticmethod
    def from_bytes(data: bytes) -> Universe:
        try:
            body = msgpack.unpackb(zlib.decompress(data), raw=False)
            if body.get("schema") != UNIVERSE_SCHEMA:
                raise ValueError(f"schema {body.get('schema')!r}, expected {UNIVERSE_SCHEMA}")
            arrays = [np.frombuffer(body[k], dtype="<i4").astype(np.int32) for k in ("file_of", "line", "target")]
            return Universe(body["collector"], body["kind"], dict(body["build"]), list(body["files"]), *arrays)
        except (zlib.error, ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            raise ValueError(f"not a branch universe: {e}") from None

    def save(self, path: Path) -> None:
        """Write atomically: a reader never sees half a universe."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(path)

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
