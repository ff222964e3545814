"""Every test that starts processes carries the `slow` marker, so that `-m "not slow"` runs
in one process. The check reads the test files' syntax: a test is multi-process when it, a
helper of its module it calls (transitively), or a fixture it takes calls one of the
process-starting functions below."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
SPAWNERS = frozenset({"run_world", "launch", "spawn", "start_processes", "execute"})
"""Functions that start processes: the test helper and the profiler's `run_world`,
`executor.launch.launch`, `torch.multiprocessing.spawn`, torch's `start_processes`, and
`executor.run.execute` (which launches the ranks)."""


REFUSED_BEFORE_START = frozenset(
    {"executor/test_launch.py::test_local_launch_refuses_a_world_the_machine_cannot_host"}
)
"""Tests that call a process-starting function only to see it refuse before starting any."""


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _spawns(fn: ast.FunctionDef, helpers: dict[str, ast.FunctionDef], seen: set[str]) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            name = _called_name(node)
            if name in SPAWNERS:
                return True
            if name in helpers and name not in seen:
                seen.add(name)
                if _spawns(helpers[name], helpers, seen):
                    return True
    return False


def _marked_slow(node: ast.FunctionDef | ast.Module) -> bool:
    if isinstance(node, ast.Module):
        return any(
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
            and "slow" in ast.unparse(n.value)
            for n in node.body
        )
    return any("slow" in ast.unparse(d) for d in node.decorator_list)


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _spawning_fixtures(trees: dict[Path, ast.Module]) -> set[str]:
    found = set()
    for tree in trees.values():
        helpers = _functions(tree)
        for name, fn in helpers.items():
            is_fixture = any("fixture" in ast.unparse(d) for d in fn.decorator_list)
            if is_fixture and _spawns(fn, helpers, {name}):
                found.add(name)
    return found


def unmarked_multiprocess_tests(root: Path = TESTS) -> list[str]:
    """``path::test`` of every test that starts processes without the `slow` marker."""
    trees = {p: ast.parse(p.read_text()) for p in sorted(root.rglob("*.py"))}
    fixtures = _spawning_fixtures(trees)
    found = []
    for path, tree in trees.items():
        if not path.name.startswith("test_") or _marked_slow(tree):
            continue
        helpers = _functions(tree)
        for name, fn in helpers.items():
            if not name.startswith("test_") or _marked_slow(fn):
                continue
            uses_fixture = any(a.arg in fixtures for a in fn.args.args)
            test_id = f"{path.relative_to(root)}::{name}"
            if test_id in REFUSED_BEFORE_START:
                continue
            if uses_fixture or _spawns(fn, helpers, {name}):
                found.append(test_id)
    return found


def test_every_multiprocess_test_is_marked_slow() -> None:
    assert unmarked_multiprocess_tests() == []


def test_the_check_finds_an_unmarked_world(tmp_path: Path) -> None:
    (tmp_path / "test_case.py").write_text(
        "import pytest\n"
        "def _two():\n    return run_world(2, print)\n"
        "def test_hidden():\n    _two()\n"
        "@pytest.mark.slow\ndef test_marked():\n    launch(print, world_size=2)\n"
        "def test_plain():\n    assert 1 + 1 == 2\n"
    )
    assert unmarked_multiprocess_tests(tmp_path) == ["test_case.py::test_hidden"]
