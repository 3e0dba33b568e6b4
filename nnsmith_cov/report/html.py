"""HTML coverage reports: coverage.py's own for python arcs, a small self-made one otherwise."""

from __future__ import annotations

import collections
import html
import importlib.util
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from nnsmith_cov.report.model import Campaign, ReportError, key_file

_ARC = re.compile(r"(?P<file>.*):(?P<line>\d+)->(?P<target>-?\d+)")
_LINE = re.compile(r".*:(?P<line>\d+)(?:\D.*)?")


def html_report(c: Campaign, out: Path, lcov: Path | None = None) -> str:
    """Write an HTML report of `c` into folder `out`; returns a line saying what was made."""
    out.mkdir(parents=True, exist_ok=True)
    if c.unit == "arc":
        return _python_html(c, out)
    if lcov is not None and shutil.which("genhtml"):
        done = subprocess.run(
            ["genhtml", "--quiet", "--branch-coverage", "--ignore-errors", "source", "-o", str(out), str(lcov)],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return f"{c.label}: genhtml report in {out}"
    return _plain_html(c, out)


def _package_root(top: str) -> Path | None:
    """The folder holding package `top` (so `tvm/relax/x.py` resolves), without importing it."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def _python_html(c: Campaign, out: Path) -> str:
    from coverage import Coverage, CoverageData

    arcs: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    roots: dict[str, Path | None] = {}
    missing: set[str] = set()
    for key in c.covered:
        m = _ARC.fullmatch(key)
        if m is None:
            continue
        rel = m["file"]
        top = rel.split("/", 1)[0]
        if top not in roots:
            roots[top] = _package_root(top)
        root = roots[top]
        path = root / rel if root is not None else None
        if path is None or not path.is_file():
            missing.add(rel)
            continue
        arcs[str(path)].append((int(m["line"]), int(m["target"])))
    if not arcs:
        raise ReportError(f"{c.label}: none of its source files are installed here: no HTML report")
    with tempfile.TemporaryDirectory(prefix="nnsmith-cov-html-") as tmp:
        data = CoverageData(basename=str(Path(tmp) / ".coverage"))
        data.add_arcs(dict(arcs))
        data.write()
        cov = Coverage(data_file=str(Path(tmp) / ".coverage"), branch=True, config_file=False)
        cov.load()
        try:
            cov.html_report(directory=str(out), ignore_errors=True, title=f"{c.label}: {c.collector} coverage")
        except Exception as e:  # coverage.py raises its own types; any of them is one line here
            raise ReportError(f"{c.label}: coverage.py could not write HTML ({e})") from None
    skipped = f" ({len(missing)} files not installed here left out)" if missing else ""
    return f"{c.label}: coverage.py HTML report of {len(arcs)} files in {out}{skipped}"


def _plain_html(c: Campaign, out: Path) -> str:
    """Per file: covered branches per line, with the source text when it is readable here."""
    per_file: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for key in c.covered:
        m = _LINE.fullmatch(key)
        if m is not None:
            per_file[key_file(key)][int(m["line"])] += 1
    totals: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    u = c.universe
    if u is not None:
        for i in range(len(u)):
            f = u.files[int(u.file_of[i])]
            if f in per_file:
                totals[f][int(u.line[i])] += 1
    rows = []
    for n, f in enumerate(sorted(per_file, key=lambda f: (-sum(per_file[f].values()), f))):
        page = f"f{n}.html"
        _file_page(out / page, f, per_file[f], totals.get(f))
        total = sum(totals[f].values()) if f in totals else "-"
        rows.append(
            f"<tr><td><a href='{page}'>{html.escape(f)}</a></td><td>{sum(per_file[f].values())}</td>"
            f"<td>{total}</td></tr>"
        )
    head = (
        f"<h1>{html.escape(c.label)}: {len(c.covered)} {html.escape(c.unit)} covered ({html.escape(c.collector)})</h1>"
    )
    body = "<table><tr><th>file</th><th>covered</th><th>of</th></tr>" + "".join(rows) + "</table>"
    (out / "index.html").write_text(_page(c.label, head + body))
    return f"{c.label}: HTML report of {len(per_file)} files in {out}"


def _file_page(path: Path, name: str, hit: collections.Counter[int], total: collections.Counter[int] | None) -> None:
    src: list[str] = []
    p = Path(name)
    if p.is_absolute() and p.is_file():
        try:
            src = p.read_text(errors="replace").splitlines()
        except OSError:
            src = []
    lines = sorted(set(hit) | set(total or ())) if not src else range(1, len(src) + 1)
    rows = []
    for ln in lines:
        h, t = hit.get(ln, 0), (total or {}).get(ln, 0)
        mark = "" if not (h or t) else ("hit" if h else "miss")
        text = html.escape(src[ln - 1]) if 0 < ln <= len(src) else ""
        count = f"{h}/{t}" if total is not None and (h or t) else (str(h) if h else "")
        rows.append(f"<tr class='{mark}'><td>{ln}</td><td>{count}</td><td><pre>{text}</pre></td></tr>")
    path.write_text(_page(name, f"<h1>{html.escape(name)}</h1><table>{''.join(rows)}</table>"))


def _page(title: str, body: str) -> str:
    style = (
        "body{font-family:sans-serif} td{padding:0 6px} pre{margin:0} "
        ".hit{background:#d8f5d8} .miss{background:#f8d8d8}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{body}</body></html>\n"
    )
