"""DESIGN.md's dependency rule, checked by parsing every import of every package.

specs imports nothing of ours (and no torch); the launcher (launch) imports specs only;
profiles import specs and the launcher, costmodel specs and profiles; the planner adds
costmodel; the executor imports specs and the launcher; reports import specs, profiles and
costmodel; the command line may import everything.
"""

from __future__ import annotations

import ast
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
    assert not bad, "dependency rule of DESIGN.md broken:\n" + "\n".join(bad)


def test_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    # The checker itself must catch a violation, or the test above proves nothing.
    f = tmp_path / "x.py"
    f.write_text("import torch\nfrom costmodel.flops import x\nfrom . import y\n")
    assert imported_roots(f) == {"torch", "costmodel"}
