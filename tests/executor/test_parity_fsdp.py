"""Parity of Megatron-FSDP plans on gloo ranks: each sharding strategy
(`specs.data_parallel.fsdp2_reshard_after_forward`: FSDP2 with and without resharding after
forward, DDP for no_shard) on dp2 (2 ranks), dp2+tp2 and dp2+pp2 (4 ranks), against the
single-process losses (3 steps, 1e-5 abs) and first-step gradients
(`parity_cases.check_case`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specs.plan import ParallelPlan
from tests.executor.parity_cases import Case, check_case, reference, tiny_model, world_worker
from tests.executor.spawn_utils import run_world

pytestmark = pytest.mark.slow

STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
SHAPES = {
    2: {"dp2": {}},
    4: {"dp2_tp2": {"tp": 2}, "dp2_pp2": {"pp": 2}},
}


def _case(shape: str, degrees: dict[str, int], strategy: str) -> Case:
    plan = ParallelPlan(
        dp=2,
        micro_batch_size=1,
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy=strategy,  # type: ignore[arg-type]
        **degrees,
    )
    return Case(name=f"{shape}_{strategy}", model=tiny_model(num_layers=2), plan=plan)


WORLDS = {
    size: {
        c.name: c
        for shape, degrees in shapes.items()
        for c in (_case(shape, degrees, s) for s in STRATEGIES)
    }
    for size, shapes in SHAPES.items()
}
NAMES = [(size, name) for size, cases in WORLDS.items() for name in cases]


@pytest.fixture(scope="module")
def worlds() -> dict[int, tuple[list, str | None]]:
    return {size: run_world(size, world_worker, list(c), c) for size, c in WORLDS.items()}


@pytest.mark.parametrize(("size", "name"), NAMES)
def test_megatron_fsdp_matches_single_process(
    size: int, name: str, worlds: dict[int, tuple[list, str | None]]
) -> None:
    results, error = worlds[size]
    case = WORLDS[size][name]
    check_case(case, results, error, reference(case))
