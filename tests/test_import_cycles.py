"""No import cycle between the packages of nnsmith_cov (issue 33 item 5).

Every `import` in every module counts, at module level or inside a function (a
function-level import hides a cycle from Python, not from a reader). A node is the first
component under `nnsmith_cov`: a subpackage (`coverage`, `search`), or a top-level module
(`cli`, `stored`) on its own; `__init__` is the root package's own module. A failure names
each cycle and the import lines that make it.
"""

from __future__ import annotations

import ast
import collections
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "nnsmith_cov"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


@dataclass(frozen=True)
class Import:
    """One import of a module of the package by another, as nodes of the package graph."""

    source: str
    target: str
    where: str  # "nnsmith_cov/x/y.py:12", with " (in a function)" when it is not at module level


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def node_of(module: str) -> str:
    """The graph node of a dotted module name inside the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


class _Imports(ast.NodeVisitor):
    """The dotted names a module imports, with their lines and whether a function holds them."""

    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.depth = 0
        self.found: list[tuple[str, int, bool]] = []

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, node.lineno, self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:  # relative: from the importing module's package, `level - 1` steps up
            parts = self.package.split(".")
            anchor = ".".join(parts[: len(parts) - (node.level - 1)])
            base = f"{anchor}.{base}" if base else anchor
        for alias in node.names:
            # `from nnsmith_cov import flag_values` imports that module, not the package's __init__.
            name = f"{base}.{alias.name}"
            self.found.append((name if name in self.known else base, node.lineno, self.depth > 0))


def package_imports(root: Path) -> list[Import]:
    """Every import between two different nodes of the package at `root`."""
    files = sorted(root.rglob("*.py"))
    names = {f: _module_name(f, root) for f in files}
    known = set(names.values())
    out = []
    for f in files:
        walker = _Imports(names[f], f.name == "__init__.py", known)
        walker.visit(ast.parse(f.read_text(), str(f)))
        rel = f.relative_to(root.parent).as_posix()
        for name, line, nested in walker.found:
            if name != root.name and not name.startswith(f"{root.name}."):
                continue
            source, target = node_of(names[f]), node_of(name)
            if source != target:
                where = f"{rel}:{line}" + (" (in a function)" if nested else "")
                out.append(Import(source, target, where))
    return out


def _components(edges: dict[str, set[str]]) -> Iterator[list[str]]:
    """Strongly connected components of more than one node (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, rest = work[-1]
            w = next(rest, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    yield sorted(comp)


def _shortest_cycle(start: str, edges: dict[str, set[str]], within: set[str]) -> list[str]:
    """The shortest path from `start` back to itself inside `within` (breadth first)."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w not in within:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in no cycle")  # a component of two nodes or more always has one


def package_cycles(imports: Iterable[Import]) -> list[str]:
    """One line block per cycle between nodes: the cycle, then each of its edges' import lines."""
    edges: dict[str, set[str]] = collections.defaultdict(set)
    lines: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for imp in imports:
        edges[imp.source].add(imp.target)
        lines[imp.source, imp.target].append(imp.where)
    out = []
    for comp in _components(edges):
        cycle = _shortest_cycle(comp[0], edges, set(comp))
        text = [f"cycle {' -> '.join(cycle)} (packages in the loop: {', '.join(comp)})"]
        for a, b in itertools.pairwise(cycle):
            text.append(f"  {a} -> {b}: {', '.join(dict.fromkeys(lines[a, b]))}")  # once per line
        out.append("\n".join(text))
    return out


def test_no_import_cycle_between_packages() -> None:
    imports = package_imports(ROOT)
    # Not vacuous: the walk saw the package (most packages import several others).
    assert len({i.source for i in imports}) > 10 and len(imports) > 100
    cycles = package_cycles(imports)
    assert not cycles, "import cycles between packages of nnsmith_cov:\n" + "\n".join(cycles)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_is_named_with_its_import_lines(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    _write(
        root,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/x.py": "from nnsmith_cov.b.y import f\n",
            "b/__init__.py": "",
            "b/y.py": "import os\n\n\ndef f():\n    from ..a import x\n",  # relative, in a function
            "c.py": "from nnsmith_cov import a, d\nfrom nnsmith_cov import __version__\n",
            "d.py": "import nnsmith_cov.c\n",
        },
    )
    imports = package_imports(root)
    assert {(i.source, i.target) for i in imports} == {
        ("a", "b"),
        ("b", "a"),
        ("c", "a"),
        ("c", "d"),
        ("c", "__init__"),
        ("d", "c"),
    }
    cycles = package_cycles(imports)
    assert len(cycles) == 2
    ab = next(c for c in cycles if "a -> b -> a" in c)
    assert "a -> b: nnsmith_cov/a/x.py:1\n" in ab
    assert "b -> a: nnsmith_cov/b/y.py:5 (in a function)" in ab
    cd = next(c for c in cycles if "c -> d -> c" in c)
    assert "c -> d: nnsmith_cov/c.py:1" in cd and "d -> c: nnsmith_cov/d.py:1" in cd


def test_a_tree_without_a_cycle_passes(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    _write(root, {"__init__.py": "", "a/__init__.py": "import nnsmith_cov.b\n", "b/__init__.py": "import json\n"})
    imports = package_imports(root)
    assert [(i.source, i.target, i.where) for i in imports] == [("a", "b", "nnsmith_cov/a/__init__.py:1")]
    assert package_cycles(imports) == []
