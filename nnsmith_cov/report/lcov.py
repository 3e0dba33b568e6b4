"""Coverage sets as lcov tracefiles (what genhtml, gcovr and lcov itself read), both ways.

Our export spells each branch so that it reads back to the same identity:

    TN:nnsmith_cov_python_arc       the collector and the kind of branch
    SF:tvm/relax/utils.py
    BRDA:120,0,124,1                arc 120->124, taken
    BRDA:130,1,118,0                arc 130->-118 (exit of the function at 118), not taken
    DA:120,1
    end_of_record

An llvm counter (or a binary block) `file:line#k` is `BRDA:line,0,k,taken`. Tracefiles from elsewhere are
read by their BRDA lines (`file:line#block.branch`), or their DA lines (`file:line`)
when they have no branch data.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.collector import PASS_FILTERS
from nnsmith_cov.coverage.universe import path_matches
from nnsmith_cov.report.model import Campaign, ReportError, key_file

_OURS = re.compile(r"nnsmith_cov_(\w+)_([A-Za-z0-9]+)")  # collector, then the unit (no "_" in it)
_KEY = re.compile(r"(?P<file>.*):(?P<line>\d+)(?:->(?P<arc>-?\d+)|#(?P<edge>\d+))")


def _encode(key: str) -> tuple[str, int, int, int]:
    """(file, line, block, branch) of one of our branch identities."""
    m = _KEY.fullmatch(key)
    if m is None:
        raise ReportError(f"branch {key!r} cannot be written as lcov")
    line = int(m["line"])
    if m["arc"] is not None:
        target = int(m["arc"])
        return m["file"], line, (0 if target >= 0 else 1), abs(target)
    return m["file"], line, 0, int(m["edge"])


def write_lcov(c: Campaign, path: Path) -> None:
    """The campaign's branches as a tracefile: covered ones taken, and (when the universe is
    known) the others of every file it reached as not taken, so percentages make sense."""
    per_file: dict[str, dict[tuple[int, int, int], int]] = collections.defaultdict(dict)
    for key in c.covered:
        f, line, block, branch = _encode(key)
        per_file[f][(line, block, branch)] = 1
    u = c.universe
    if u is not None and u.kind == c.unit:
        reached = {i for i, f in enumerate(u.files) if f in per_file}
        for i in np.flatnonzero(np.isin(u.file_of, list(reached))):
            f, line, block, branch = _encode(u.key(int(i)))
            per_file[f].setdefault((line, block, branch), 0)
    kind = re.sub(r"[^A-Za-z0-9]", "", c.unit) or "edge"
    collector = re.sub(r"\W", "_", c.collector)
    lines = []
    for f in sorted(per_file):
        lines += [f"TN:nnsmith_cov_{collector}_{kind}", f"SF:{f}"]
        branches = per_file[f]
        lines += [f"BRDA:{ln},{b},{k},{t}" for (ln, b, k), t in sorted(branches.items())]
        lines += [f"BRF:{len(branches)}", f"BRH:{sum(branches.values())}"]
        hit_lines: dict[int, int] = {}
        for (ln, _, _), t in branches.items():
            hit_lines[ln] = max(hit_lines.get(ln, 0), t)
        lines += [f"DA:{ln},{t}" for ln, t in sorted(hit_lines.items())]
        lines += [f"LF:{len(hit_lines)}", f"LH:{sum(1 for t in hit_lines.values() if t)}", "end_of_record"]
    write_atomic(path, "\n".join(lines) + "\n")


def read_lcov(path: Path, label: str, pass_filters: Sequence[str] | None = None) -> Campaign:
    """An lcov tracefile as a labelled campaign (covered = branches or lines with a hit)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror or e})") from None
    ours: tuple[str, str] | None = None
    branches: set[str] = set()
    lines: set[str] = set()
    saw_brda = saw_sf = False
    sf = ""
    for n, raw in enumerate(text.splitlines(), 1):
        tag, _, rest = raw.strip().partition(":")
        try:
            if tag == "TN":
                m = _OURS.fullmatch(rest)
                ours = (m[1], m[2]) if m else None
            elif tag == "SF":
                sf, saw_sf = rest, True
            elif tag == "BRDA":
                saw_brda = True
                line, block, branch, taken = rest.split(",")[-4:]
                if taken not in ("-", "") and int(taken) > 0:
                    branches.add(_decode(sf, int(line), block, branch, ours))
            elif tag == "DA":
                line, count = rest.split(",")[:2]
                if int(count) > 0:
                    lines.add(f"{sf}:{int(line)}")
        except ValueError:
            raise ReportError(f"{path}:{n}: not an lcov line: {raw[:80]!r}") from None
    if not saw_sf:
        raise ReportError(f"{path}: not an lcov tracefile (no SF: record)")
    if ours is not None:
        collector, unit = ours
    else:
        collector, unit = "lcov", "lcov-branch" if saw_brda else "lcov-line"
    covered = frozenset(branches if saw_brda else lines)
    filters = tuple(pass_filters or PASS_FILTERS.get(collector, ()))
    passes = frozenset(k for k in covered if any(path_matches(key_file(k), p) for p in filters))
    return Campaign(label, str(path), "lcov", collector, unit, covered, passes, filters)


def _decode(sf: str, line: int, block: str, branch: str, ours: tuple[str, str] | None) -> str:
    if ours is None:
        return f"{sf}:{line}#{block}.{branch}"
    if ours[1] == "arc":
        return f"{sf}:{line}->{'-' if int(block) else ''}{int(branch)}"
    return f"{sf}:{line}#{int(branch)}"
