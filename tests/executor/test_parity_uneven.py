"""Parity of uneven pipeline splits (`specs.pipeline_split`) on gloo ranks: first/last layer
counts, the account-for flags and a layout, interleaved included, and the GPipe schedule
for fewer micro-batches than stages, each against the single-process losses (3 steps,
1e-5 abs) and first-step gradients (`parity_cases.check_case`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specs.plan import ParallelPlan
from tests.executor.parity_cases import Case, check_case, reference, tiny_model, world_worker
from tests.executor.spawn_utils import run_world

pytestmark = pytest.mark.slow

UNEVEN_2 = {
    c.name: c
    for c in [
        # 3 layers: rank 0 holds one, rank 1 two.
        Case(
            name="pp2_first1",
            model=tiny_model(num_layers=3),
            plan=ParallelPlan(pp=2, micro_batch_size=1, decoder_first_pipeline_num_layers=1),
        ),
        # 3 layers + the embedding counted as one: 2 per stage, rank 0 one layer short.
        Case(
            name="pp2_account_embedding",
            model=tiny_model(num_layers=3, tied_embeddings=True),
            plan=ParallelPlan(
                pp=2, micro_batch_size=1, account_for_embedding_in_pipeline_split=True
            ),
        ),
        # Interleaved: 2 layers + embedding + loss over 4 virtual stages; the first and the
        # last virtual stage hold no transformer layer.
        Case(
            name="pp2_vpp2_account_both",
            model=tiny_model(num_layers=2),
            plan=ParallelPlan(
                pp=2,
                vpp=2,
                schedule="interleaved",
                micro_batch_size=1,
                account_for_embedding_in_pipeline_split=True,
                account_for_loss_in_pipeline_split=True,
            ),
        ),
        Case(
            name="pp2_layout",
            model=tiny_model(num_layers=3),
            plan=ParallelPlan(pp=2, micro_batch_size=2, pipeline_model_parallel_layout="Et|ttL"),
        ),
        # One micro-batch on two stages: GPipe instead of torch's 1F1B.
        Case(
            name="pp2_one_microbatch",
            model=tiny_model(num_layers=3),
            plan=ParallelPlan(pp=2, micro_batch_size=4, decoder_last_pipeline_num_layers=1),
        ),
    ]
}


UNEVEN_4 = {
    c.name: c
    for c in [
        # A tied embedding over TP and uneven stages: the vocabulary-parallel embedding and
        # output layer sum their gradients shard by shard over the embedding group.
        Case(
            name="tp2_pp2_tied_last2",
            model=tiny_model(num_layers=3, tied_embeddings=True),
            plan=ParallelPlan(tp=2, pp=2, micro_batch_size=1, decoder_last_pipeline_num_layers=2),
        ),
        # 6 layers + embedding + loss over 4 stages: 1, 2, 2, 1 layers; the tied embedding
        # is summed between stages 0 and 3, the middle stages hold no copy.
        Case(
            name="pp4_account_both_tied",
            model=tiny_model(num_layers=6, tied_embeddings=True),
            plan=ParallelPlan(
                pp=4,
                micro_batch_size=1,
                account_for_embedding_in_pipeline_split=True,
                account_for_loss_in_pipeline_split=True,
            ),
        ),
    ]
}
WORLDS = {2: UNEVEN_2, 4: UNEVEN_4}
NAMES = [(size, name) for size, cases in WORLDS.items() for name in cases]


@pytest.fixture(scope="module")
def worlds() -> dict[int, tuple[list, str | None]]:
    return {size: run_world(size, world_worker, list(c), c) for size, c in WORLDS.items()}


@pytest.mark.parametrize(("size", "name"), NAMES)
def test_uneven_split_matches_single_process(
    size: int, name: str, worlds: dict[int, tuple[list, str | None]]
) -> None:
    results, error = worlds[size]
    case = WORLDS[size][name]
    check_case(case, results, error, reference(case))
