"""The TP amax all-reduce of per-tensor current scaling and delayed scaling's amax
reduction and scale update (costmodel.runtimes.megatron.fp8_scaling)."""

from __future__ import annotations

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
)
from costmodel.runtimes.megatron.pricing import chunk_costs
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.topology import plan_placements, product_placement, strided_group_placement
from profiles.store import load_profile
from specs.job import TrainingJob
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


def grids(recipe: str, job: TrainingJob = FP8_JOB, plan: ParallelPlan = INTERLEAVED):
    """(runtime chunk costs, the same without delayed scaling's bookkeeping)."""
    runtime = MegatronRuntime(options=ExecutionOptions(fp8_recipe=recipe))
    priced = runtime.priced_profile(H100)
    placements = plan_placements(priced, plan)
    with_bookkeeping = runtime.chunk_costs(DENSE, job, plan, priced, placements)
    bare = chunk_costs(DENSE, job, plan, priced, comm_groups(placements), runtime.options)
    return with_bookkeeping, bare, priced, placements


def test_delayed_scaling_reduces_the_stage_amax_buffer_once_per_chunk_and_microbatch():
    # A stage holds 2 layers x 4 TE linears (qkv, proj, fc1, fc2), one GEMM each: 8 GEMMs;
    # forward 3 amaxes per GEMM x 4 bytes = 96 bytes, backward 2 x 4 = 64 bytes, every
    # chunk reducing the whole stage's buffer over TP x DP = 4 ranks.
    grid, bare, priced, placements = grids("delayed")
    group = product_placement(priced, (placements["tp"], placements["dp-cp"]), "tp-dp-cp")
    assert group.size == 4
    assert layer_fp8_modules(DENSE, is_moe=False, ep=1) == Fp8Modules(modules=4, gemms=4)
    for row, bare_row in zip(grid, bare, strict=True):
        for cost, base in zip(row, bare_row, strict=True):
            assert cost.forward.tp_bytes - base.forward.tp_bytes == pytest.approx(96)
            assert cost.backward.tp_bytes - base.backward.tp_bytes == pytest.approx(64)
            reduce_s = collective_time_s(priced, "all_reduce", 96, group)
            added = cost.forward.tp_exposed_s - base.forward.tp_exposed_s
            assert added == pytest.approx(reduce_s)
            assert cost.forward.compute_s > base.forward.compute_s  # cat + scale update
    # The count: one forward and one backward region per chunk and microbatch, 2 x 4 per
    # rank and direction in an iteration (the schedule runs each chunk's F and B once per
    # microbatch).
    sim = simulate_iteration(
        DENSE, FP8_JOB, INTERLEAVED, H100, runtime=MegatronRuntime(options=ExecutionOptions())
    )
    for stage in range(2):
        phases = [t.action.phase for t in sim.timing.actions[stage]]
        assert phases.count("F") == phases.count("B") == 2 * 4


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
    assert layer_fp8_modules(moe, is_moe=True, ep=2) == Fp8Modules(modules=6, gemms=12)


@pytest.mark.parametrize("recipe", ["tensorwise", "mxfp8"])
def test_other_recipes_and_bf16_add_no_bookkeeping(recipe: str):
    grid, bare, _, _ = grids(recipe)
    assert grid == bare
    bf16 = TrainingJob(seq_length=512, global_batch_size=8, precision="bf16")
    grid, bare, _, _ = grids("delayed", job=bf16)
    assert grid == bare
