"""The TP amax all-reduce of per-tensor current scaling and delayed scaling's amax
reduction and scale update (costmodel.runtimes.megatron.fp8_scaling)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.execution import ExecutionOptions
from costmodel.iteration import simulate_iteration
from costmodel.passes import ZERO, comm_groups
from costmodel.runtimes.megatron.fp8_scaling import (
    AMAX_BYTES,
    Fp8Modules,
    amax_reduction_pair,
    delayed_scaling_pair,
    layer_fp8_modules,
    stage_fp8_modules,
)
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.pricing import chunk_costs
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.schedules import plan_pipeline_chunks
from costmodel.topology import (
    AMAX_AXES,
    plan_placements,
    product_placement,
    single_rank_placement,
    strided_group_placement,
)
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, MOE_LAYER
from specs.model import ModelSpec
from specs.plan import ParallelPlan

H100 = load_profile("h100-sxm-80gb")
TP8 = strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)


def pair(recipe: str, *, sp: bool = True, group=TP8, row_parallel: bool = True):
    return amax_reduction_pair(
        H100, recipe=recipe, sequence_parallel=sp, tp_group=group, row_parallel=row_parallel
    )


def test_current_scaling_reduces_one_amax_each_way_with_sequence_parallelism():
    # Forward: the column-parallel input's amax; backward: the row-parallel output
    # gradient's; one fp32 all-reduce over the TP group each, all exposed.
    one = collective_time_s(H100, "all_reduce", AMAX_BYTES, TP8)
    forward, backward = pair("tensorwise")
    for cost in (forward, backward):
        assert cost.tp_s == cost.tp_exposed_s == pytest.approx(one)
        assert cost.tp_bytes == AMAX_BYTES
    assert AMAX_BYTES == 4


def test_no_amax_reduction_without_sequence_parallelism_or_per_tensor_current_scaling():
    assert pair("tensorwise", sp=False) == (ZERO, ZERO)
    assert pair("delayed") == (ZERO, ZERO)
    assert pair("mxfp8") == (ZERO, ZERO)
    single = strided_group_placement(1, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    assert pair("tensorwise", group=single) == (ZERO, ZERO)


def test_a_pair_without_its_own_row_parallel_gemm_reduces_only_forward():
    forward, backward = pair("tensorwise", row_parallel=False)
    assert forward.tp_s > 0
    assert backward == ZERO


# --- delayed scaling ------------------------------------------------------------------

DENSE = ModelSpec(
    name="tiny-dense",
    num_layers=4,
    hidden_size=256,
    num_attention_heads=4,
    ffn_hidden_size=1024,
    vocab_size=1024,
)
FP8_JOB = TrainingJob(seq_length=512, global_batch_size=8, precision="fp8")
# 8 GPUs: tp2 x dp2 per stage, pp2 with two chunks of one layer each; 8 / (2 x 1) = 4
# microbatches per rank.
INTERLEAVED = ParallelPlan(tp=2, pp=2, vpp=2, dp=2, micro_batch_size=1, sequence_parallel=True)


def priced_grid(recipe: str, job: TrainingJob = FP8_JOB, *, one_rank_amax_group: bool = False):
    """(`pricing.chunk_costs` of INTERLEAVED under ``recipe``, its groups, the priced
    profile); with ``one_rank_amax_group`` the TP x DP x CP group is one rank."""
    options = ExecutionOptions(fp8_recipe=recipe)
    priced = MegatronRuntime(options=options).priced_profile(H100)
    groups = comm_groups(plan_placements(priced, INTERLEAVED))
    if one_rank_amax_group:
        groups = dataclasses.replace(groups, tp_dp_cp=single_rank_placement(AMAX_AXES))
    return chunk_costs(DENSE, job, INTERLEAVED, priced, groups, options), groups, priced


def test_the_amax_group_is_the_stage_tp_dp_cp_block():
    priced = MegatronRuntime().priced_profile(H100)
    placements = plan_placements(priced, INTERLEAVED)
    block = product_placement(priced, (placements["tp"], placements["dp-cp"]), AMAX_AXES)
    assert placements[AMAX_AXES] == block
    assert comm_groups(placements).tp_dp_cp == block
    assert block.size == 4


def test_delayed_scaling_reduces_the_stage_amax_buffer_once_per_chunk_and_microbatch():
    # A stage holds 2 layers x 4 TE linears (qkv, proj, fc1, fc2), one GEMM each: 8 GEMMs;
    # forward 3 amaxes per GEMM x 4 bytes = 96 bytes, backward 2 x 4 = 64 bytes, every
    # chunk reducing the whole stage's buffer over TP x DP = 4 ranks.
    grid, groups, priced = priced_grid("delayed")
    local, _, _ = priced_grid("delayed", one_rank_amax_group=True)
    assert layer_fp8_modules(DENSE, kind=DENSE_LAYER, ep=1) == Fp8Modules(modules=4, gemms=4)
    for row, local_row in zip(grid, local, strict=True):
        for cost, base in zip(row, local_row, strict=True):
            assert cost.forward.tp_bytes - base.forward.tp_bytes == pytest.approx(96)
            assert cost.backward.tp_bytes - base.backward.tp_bytes == pytest.approx(64)
            reduce_s = collective_time_s(priced, "all_reduce", 96, groups.tp_dp_cp)
            added = cost.forward.tp_exposed_s - base.forward.tp_exposed_s
            assert added == pytest.approx(reduce_s)
            assert cost.forward.compute_s == pytest.approx(base.forward.compute_s)
    # The count: one forward and one backward region per chunk and microbatch, 2 x 4 per
    # rank and direction in an iteration (the schedule runs each chunk's F and B once per
    # microbatch).
    sim = simulate_iteration(
        DENSE, FP8_JOB, INTERLEAVED, H100, runtime=MegatronRuntime(options=ExecutionOptions())
    )
    for stage in range(2):
        phases = [t.action.phase for t in sim.timing.actions[stage]]
        assert phases.count("F") == phases.count("B") == 2 * 4


BF16_JOB = TrainingJob(seq_length=512, global_batch_size=8, precision="bf16")


@pytest.mark.parametrize(
    ("recipe", "job", "bookkeeping"),
    [
        ("delayed", FP8_JOB, True),
        ("tensorwise", FP8_JOB, False),
        ("mxfp8", FP8_JOB, False),
        ("delayed", BF16_JOB, False),
    ],
)
def test_chunk_costs_hold_the_bookkeeping_of_fp8_delayed_scaling_only(recipe, job, bookkeeping):
    # A chunk without embedding or output layer costs its one layer, plus, under delayed
    # scaling, the stage buffer's reduction and scale update in each direction.
    grid, groups, priced = priced_grid(recipe, job)
    options = ExecutionOptions(fp8_recipe=recipe)
    layer = layer_cost(
        DENSE, job, INTERLEAVED, priced, kind=DENSE_LAYER, groups=groups, options=options
    )
    middle = [
        (at, grid[at.stage][at.chunk])
        for row in plan_pipeline_chunks(DENSE, INTERLEAVED)
        for at in row
        if not (at.first or at.last)
    ]
    assert len(middle) == 2
    for at, cost in middle:
        forward, backward = layer.forward, layer.backward
        if bookkeeping:
            stage = plan_pipeline_chunks(DENSE, INTERLEAVED)[at.stage]
            fp8 = stage_fp8_modules(DENSE, stage, INTERLEAVED.ep)
            extra_forward, extra_backward = delayed_scaling_pair(priced, fp8, groups.tp_dp_cp)
            assert extra_forward.compute_s > 0 and extra_forward.tp_s > 0
            forward, backward = forward.plus(extra_forward), backward.plus(extra_backward)
        assert dataclasses.asdict(cost.forward) == pytest.approx(dataclasses.asdict(forward))
        assert dataclasses.asdict(cost.backward) == pytest.approx(dataclasses.asdict(backward))


def test_a_single_rank_group_updates_scales_without_a_reduction():
    fp8 = Fp8Modules(modules=8, gemms=8)
    single = strided_group_placement(1, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    forward, backward = delayed_scaling_pair(H100, fp8, single)
    for cost in (forward, backward):
        assert cost.tp_s == cost.tp_bytes == 0
        assert cost.compute_s > 0
    assert delayed_scaling_pair(H100, Fp8Modules(modules=0, gemms=0), TP8) == (ZERO, ZERO)


def test_moe_layers_count_one_gemm_per_local_expert():
    moe = DENSE.replace(num_experts=8, moe_top_k=2, moe_shared_expert_size=512)
    # qkv, proj, two grouped linears of 8 / 2 experts each, two shared-expert linears
    assert layer_fp8_modules(moe, kind=MOE_LAYER, ep=2) == Fp8Modules(modules=6, gemms=12)
