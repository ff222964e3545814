"""The import rules of docs/architecture.md, checked by parsing every import of every package.

- Rooms: specs imports nothing of ours (and no torch); the launcher (launch) imports specs
  only; profiles import specs and the launcher, costmodel specs and profiles; the planner
  adds costmodel; the executor imports specs and the launcher; reports import specs,
  profiles and costmodel; the command line may import everything.
- No cycle among our modules, counting imports at module level, inside functions and under
  ``if TYPE_CHECKING:`` alike: an import for annotations only still ties the two modules'
  designs together, so a type both need lives where both can import it.
- No import of a private (``_name``) name from another module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"specs", "launch", "profiles", "costmodel", "planner", "executor", "reports", "paraplan"}
ALLOWED: dict[str, set[str]] = {
    "specs": set(),
    "launch": {"specs"},
    "profiles": {"specs", "launch"},
    "costmodel": {"specs", "profiles"},
    "planner": {"specs", "profiles", "costmodel"},
    "executor": {"specs", "launch"},
    "reports": {"specs", "profiles", "costmodel"},
    "paraplan": OURS,
}
FORBIDDEN_THIRD_PARTY = {"specs": {"torch"}, "costmodel": {"torch"}, "planner": {"torch"}}


def imported_roots(path: Path) -> set[str]:
    """Top-level module names a file imports (absolute imports only)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def package_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted module name of a file under ``root`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of our packages under ``root``, by dotted name."""
    return {
        module_name(path, root): path
        for package in sorted(OURS)
        for path in sorted((root / package).rglob("*.py"))
    }


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module of a (possibly relative) ``from ... import``."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, importer: str, modules: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """(imported module, imported name or "") for every import of ours in the file, at any
    depth (module level, inside functions, under ``if TYPE_CHECKING:``)."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, importer, is_package)
            if source.split(".")[0] not in OURS:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield (submodule, "") if submodule in modules else (source, alias.name)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports."""
    modules = our_modules(root)
    return {
        name: {target for target, _ in imports_of(path, name, modules) if target in modules}
        - {name}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def private_imports(root: Path = ROOT) -> list[str]:
    """``file: from X import _name`` for every private name imported from another module."""
    modules = our_modules(root)
    bad = []
    for name, path in modules.items():
        for source, imported in imports_of(path, name, modules):
            last = imported or source.rsplit(".", 1)[-1]
            private = last.startswith("_") and not last.startswith("__")
            if private and source != name:
                bad.append(f"{path.relative_to(root)}: {source} {imported}".rstrip())
    return bad


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_follow_the_dependency_rule(package: str) -> None:
    bad = []
    for path in package_files(package):
        roots = imported_roots(path)
        ours = (roots & OURS) - {package}
        for dep in sorted(ours - ALLOWED[package]):
            bad.append(f"{path.relative_to(ROOT)} imports {dep}")
        for dep in sorted(roots & FORBIDDEN_THIRD_PARTY.get(package, set())):
            bad.append(f"{path.relative_to(ROOT)} imports {dep}")
    assert not bad, "dependency rule of docs/architecture.md broken:\n" + "\n".join(bad)


def test_no_import_cycle_among_our_modules() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_private_name_is_imported_from_another_module() -> None:
    bad = private_imports()
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    # The checker itself must catch a violation, or the test above proves nothing.
    f = tmp_path / "x.py"
    f.write_text("import torch\nfrom costmodel.flops import x\nfrom . import y\n")
    assert imported_roots(f) == {"torch", "costmodel"}


def test_checker_sees_cycles_through_function_level_and_annotation_only_imports(
    tmp_path: Path,
) -> None:
    (tmp_path / "costmodel").mkdir()
    (tmp_path / "costmodel" / "__init__.py").write_text("")
    (tmp_path / "costmodel" / "a.py").write_text("from costmodel.b import _hidden\n")
    (tmp_path / "costmodel" / "b.py").write_text(
        "def f():\n    from costmodel import a\n    return a\n\n_hidden = 1\n"
    )
    (tmp_path / "costmodel" / "c.py").write_text("from . import b\n")
    (tmp_path / "costmodel" / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from costmodel.e import x\n"
    )
    (tmp_path / "costmodel" / "e.py").write_text("from costmodel import d\n")
    graph = import_graph(tmp_path)
    assert graph["costmodel.c"] == {"costmodel.b"}
    assert graph["costmodel.d"] == {"costmodel.e"}
    assert cycles(graph) == [["costmodel.a", "costmodel.b"], ["costmodel.d", "costmodel.e"]]
    assert private_imports(tmp_path) == ["costmodel/a.py: costmodel.b _hidden"]
