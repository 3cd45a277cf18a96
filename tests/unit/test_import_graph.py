"""The product packages import each other one way: no module imports, even for type checking
only, a module that imports it back (directly or through others)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ftdomain", "ftgateway", "ftnative", "ftfleet")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """The project's modules that `path` imports anywhere in it (TYPE_CHECKING blocks included)."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules and name != here)
    return found


def graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    paths = [p for package in packages for p in (root / package).rglob("*.py")]
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imported(p, modules, root) for p in paths}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each circle once, as the path from its first module back to it."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                circle = path[path.index(nxt) :]
                if frozenset(circle) not in done:
                    done.add(frozenset(circle))
                    found.append([*circle, nxt])
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen.add(node)

    seen: set[str] = set()
    for start in sorted(edges):
        if start not in seen:
            visit(start, [start])
    return found


def test_the_finder_sees_circles_through_relative_and_type_checking_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.b import B\n")
    (package / "sub" / "b.py").write_text("from ..c import C\nimport os\n")
    (package / "c.py").write_text("from . import a\n")
    edges = graph(tmp_path, ("pkg",))
    assert edges == {"pkg": set(), "pkg.sub": set(), "pkg.a": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.c"},
                     "pkg.c": {"pkg", "pkg.a"}}  # fmt: skip
    assert circles(edges) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    (package / "c.py").write_text("import pkg.sub\n")
    assert circles(graph(tmp_path, ("pkg",))) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_one_that_imports_it_back(package):
    edges = graph()
    assert edges, "no modules found"
    ours = [c for c in circles(edges) if c[0].split(".")[0] == package]
    assert ours == [], "import circles: " + "; ".join(" -> ".join(c) for c in ours)
