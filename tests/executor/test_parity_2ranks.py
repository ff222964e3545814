"""Parity on 2 gloo ranks: every plan of `parity_cases.CASES_2` gives the single-process
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
    CASES_2,
    check_case,
    check_groups,
    reference,
    world_worker,
)
from tests.executor.spawn_utils import run_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world() -> tuple[list, str | None]:
    return run_world(2, world_worker, list(CASES_2), CASES_2)


@pytest.mark.parametrize("name", list(CASES_2))
def test_matches_single_process(name: str, world: tuple[list, str | None]) -> None:
    results, error = world
    check_case(CASES_2[name], results, error, reference(CASES_2[name]))


@pytest.mark.parametrize("name", ["dp2_ddp", "pp2_interleaved"])
def test_named_ranges_cover_every_microbatch(name: str, world: tuple[list, str | None]) -> None:
    results, _ = world
    case = CASES_2[name]
    count = case.plan.num_microbatches(case.global_batch_size)
    expected = {
        f"paraplan/{phase} mb{m} c{c}"
        for phase in ("forward", "backward")
        for m in range(count)
        for c in range(case.plan.vpp)
    }
    for rank, res in enumerate(results):
        assert res is not None and "range_names" in res[name], f"rank {rank} recorded no ranges"
        names = set(res[name]["range_names"])
        assert names == expected | {"paraplan/grad_sync", "paraplan/optimizer"}, f"rank {rank}"


def test_groups_follow_the_rank_layout(world: tuple[list, str | None]) -> None:
    results, _ = world
    for case in CASES_2.values():
        check_groups(case, results)
