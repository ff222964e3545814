"""Parity on 4 gloo ranks: every plan of `parity_cases.CASES_4` gives the single-process
losses (3 steps) and first-step gradients, within the tolerances stated in
`parity_cases`. All cases share one spawned world (spawning costs seconds)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib: put the repository root on sys.path so the
# shared helpers import as ``tests.executor...`` here and in the spawned ranks.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.executor.parity_cases import (
    CASES_4,
    check_case,
    check_groups,
    reference,
    world_worker,
)
from tests.executor.spawn_utils import run_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world() -> tuple[list, str | None]:
    return run_world(4, world_worker, list(CASES_4), CASES_4)


@pytest.mark.parametrize("name", list(CASES_4))
def test_matches_single_process(name: str, world: tuple[list, str | None]) -> None:
    results, error = world
    check_case(CASES_4[name], results, error, reference(CASES_4[name]))


def test_groups_follow_the_rank_layout(world: tuple[list, str | None]) -> None:
    results, _ = world
    for case in CASES_4.values():
        check_groups(case, results)
