"""Replacing a file whole: written beside it under a name of its own, then renamed over it.

A reader (a report while the campaign writes, a worker loading a cache another worker saves,
a campaign resumed after a kill) sees the old file or the new one, never part of either.
Each write takes a fresh temporary name, so processes writing the same file at once never
rename away each other's half-written copy: the last rename wins, whole.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` (its folder must exist) with `data`, a str written as UTF-8.
    Raises OSError as `open` does; no temporary file is left behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as f:  # created with the umask's mode, as a plain write would be
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
