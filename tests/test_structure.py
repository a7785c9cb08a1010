"""The package's shape: no import cycle between servesim's modules and no module over 500 lines.

Every module under src/servesim is parsed with `ast`, and every import counts — at module level,
inside functions (imported lazily for start-up time) and under `TYPE_CHECKING` — since each is
a dependency the next engineer must respect (docs/design.md, the package map). `from pkg import
name` depends on the module `pkg.name` when there is one, else on `pkg` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 500


def modules(src: Path) -> dict[str, Path]:
    """Every module under `src`, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules that module `name` (at `path`) imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {dep for dep in out if dep in known and dep != name}


def _absolute(package: str, level: int, module: str | None) -> str:
    """The absolute name of `from <level dots><module> import ...` inside `package`."""
    if not level:
        return module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def graph(src: Path) -> dict[str, set[str]]:
    """module → the modules it imports."""
    known = modules(src)
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) per strongly connected component of more than one
    module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(_cycle_in(edges, component))
    return found


def _cycle_in(edges: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself (breadth first)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(component)}")


def test_no_import_cycle() -> None:
    found = cycles(graph(SRC))
    assert not found, ("import cycles (function-level and TYPE_CHECKING imports count; one per group of modules "
                       "that import each other, so breaking one may show another):\n"
                       + "\n".join(" → ".join(cycle) for cycle in found))


def test_no_module_over_500_lines() -> None:
    long = {name: n for name, path in modules(SRC).items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize("text", [
    "def f():\n    from pkg import a\n",  # a function-level import
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n",
    "from . import a\n",  # relative, naming the module
    "from .a import X\n",
    "import pkg.a\n",
])
def test_every_kind_of_import_closes_a_cycle(tmp_path: Path, text: str) -> None:
    src = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import Y\n", "pkg/b.py": text})
    assert cycles(graph(src)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_an_acyclic_tree_and_a_package_attribute(tmp_path: Path) -> None:
    """`from pkg import name` of a non-module depends on the package, not on every module."""
    src = _tree(tmp_path, {"pkg/__init__.py": "VERSION = 1\n", "pkg/a.py": "from pkg import VERSION\n",
                           "pkg/b.py": "from pkg import a\n"})
    edges = graph(src)
    assert edges == {"pkg": set(), "pkg.a": {"pkg"}, "pkg.b": {"pkg.a"}}
    assert cycles(edges) == []


def test_a_longer_cycle_is_reported_in_order() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert cycles(edges) == [["a", "b", "c", "a"]]
