"""Routed-expert costs of a MoE layer as Megatron-core runs them
(costmodel.runtimes.megatron.moe_costs) and their host-launch floor in layer_cost."""

from __future__ import annotations

import dataclasses
import math

import pytest

from costmodel.collectives import collective_time_s, split_all_to_all_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import (
    allgather_combine_bytes,
    dispatch_copies,
    dispatch_copy_bytes,
    expected_distinct_groups,
    flex_rows_per_token,
    moe_shape,
    router_gemm_dtype,
    router_kernel_bytes,
)
from costmodel.runtimes.megatron.moe_launches import FIXED_LAUNCHES, host_bound_s, moe_host_launches
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
QWEN = get_preset("qwen3-30b-a3b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
NO_HOST = dataclasses.replace(DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)


def ep_group(size: int):
    return strided_group_placement(size, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)


def moe_cost(plan: ParallelPlan, options: ExecutionOptions = NO_HOST, job=JOB):
    groups = CommGroups(ep=ep_group(plan.ep))
    return layer_cost(QWEN, job, plan, H100, kind=MOE_LAYER, groups=groups, options=options)


def test_shape_splits_rows_over_local_experts():
    # 128 experts over ep 8: 16 local experts share top-8 x 4096 rows (balanced routing).
    shape = moe_shape(QWEN, ParallelPlan(dp=8, ep=8), tokens=4096)
    assert shape.rows == 8 * 4096
    assert shape.local_experts == 16
    assert shape.rows_per_expert == 8 * 4096 / 16


def test_dispatch_copies_add_the_local_expert_sort():
    # permute + unpermute always; sort_chunks_by_idxs and its inverse with > 1 local expert;
    # each copy reads and writes rows x h x e.
    many = moe_shape(QWEN, ParallelPlan(dp=8, ep=8), tokens=100)
    one = moe_shape(QWEN.replace(num_experts=8), ParallelPlan(dp=8, ep=8), tokens=100)
    assert dispatch_copy_bytes(many, 2048, 2) == 4 * 2 * many.rows * 2048 * 2
    assert dispatch_copy_bytes(one, 2048, 2) == 2 * 2 * one.rows * 2048 * 2


def test_router_kernels_scale_with_tokens_and_experts():
    assert router_kernel_bytes(10, 128, "forward") == 18 * 10 * 128
    assert router_kernel_bytes(10, 128, "backward") == 24 * 10 * 128


@pytest.mark.parametrize(
    ("job_gemm", "router_gemm"),
    [("fp8", "bf16"), ("fp4", "bf16"), ("bf16", "bf16"), ("fp32", "fp32")],
)
def test_router_gemm_stays_out_of_low_precision(job_gemm, router_gemm):
    # Megatron-core moe_utils.py RouterGatingLinearFunction: TE general_gemm on the bf16
    # weight and input, outside the fp8/fp4 quantizing modules.
    assert router_gemm_dtype(job_gemm) == router_gemm


def test_launch_counts_grow_per_local_expert():
    # Python-level: the dispatcher's fixed count plus GroupedLinear's general_grouped_gemm
    # calls (2 forward, 4 backward) and, under FP8, its _split_quantize calls (2 and 2);
    # per expert from C++: the GEMMs (2, 4) and, under FP8, the slice quantizations (2, 2).
    bf16_f = moe_host_launches(16, False, "forward")
    assert (bf16_f.python, bf16_f.expert) == (FIXED_LAUNCHES["forward"] + 2, 2 * 16)
    fp8_f = moe_host_launches(16, True, "forward")
    assert (fp8_f.python, fp8_f.expert) == (FIXED_LAUNCHES["forward"] + 4, 4 * 16)
    fp8_b = moe_host_launches(16, True, "backward")
    assert (fp8_b.python, fp8_b.expert) == (FIXED_LAUNCHES["backward"] + 6, 6 * 16)
    assert moe_host_launches(4, True, "backward").python == fp8_b.python
    assert moe_host_launches(4, True, "backward").expert < fp8_b.expert


def test_host_bound_is_the_excess_over_gpu_time():
    assert host_bound_s(gpu_s=2.0, host_s=3.5) == 1.5
    assert host_bound_s(gpu_s=2.0, host_s=1.0) == 0.0


def test_ep_collectives_per_pass():
    # Forward: tokens dispatch + combine, the fp32 probs all-to-all and the all-gather of
    # int64 per-expert counts; backward: the same all-to-alls, no count gather.
    plan = ParallelPlan(dp=8, ep=8)
    rows = QWEN.moe_top_k * JOB.seq_length
    g = ep_group(8)
    tokens = collective_time_s(H100, "all_to_all", rows * QWEN.hidden_size * 2, g)
    probs = collective_time_s(H100, "all_to_all", rows * 4, g)
    counts = collective_time_s(H100, "all_gather", 8 * QWEN.num_experts * 8, g)
    c = moe_cost(plan)
    assert c.forward.ep_s == pytest.approx(2 * tokens + probs + counts)
    assert c.backward.ep_s == pytest.approx(2 * tokens + probs)


def test_host_floor_binds_only_when_launches_outlast_the_kernels():
    plan = ParallelPlan(dp=8, ep=8)
    launch_s, expert_s = 50e-6, 10e-6
    options = dataclasses.replace(
        DEFAULT_OPTIONS, moe_host_launch_s=launch_s, moe_expert_launch_s=expert_s
    )
    small = TrainingJob(seq_length=256, global_batch_size=64)
    gpu = moe_cost(plan, job=small)
    host = moe_cost(plan, options, job=small)
    fwd_host = moe_host_launches(16, False, "forward").host_s(launch_s, expert_s)
    bwd_host = moe_host_launches(16, False, "backward").host_s(launch_s, expert_s)
    assert gpu.forward.duration_s < fwd_host  # a short sequence: host-bound
    # The pass lasts its launches, plus one launch after the dropless synchronization.
    assert host.forward.duration_s == pytest.approx(fwd_host + launch_s)
    assert host.backward.duration_s == pytest.approx(max(bwd_host, gpu.backward.duration_s))
    big = TrainingJob(seq_length=16384, global_batch_size=64)
    assert moe_cost(plan, options, job=big).backward.duration_s == pytest.approx(
        moe_cost(plan, job=big).backward.duration_s
    )


def test_capacity_padding_has_no_synchronization_wait():
    plan = ParallelPlan(dp=8, ep=8)
    launch_s = 1e-9  # never binds, so only the synchronization wait differs
    options = dataclasses.replace(
        DEFAULT_OPTIONS, moe_host_launch_s=launch_s, moe_expert_launch_s=launch_s
    )
    padded = QWEN.replace(moe_capacity_factor=1.0)
    groups = CommGroups(ep=ep_group(8))
    sync = moe_cost(plan, options).forward.compute_s - moe_cost(plan).forward.compute_s
    padded_cost = layer_cost(
        padded, JOB, plan, H100, kind=MOE_LAYER, groups=groups, options=options
    )
    padded_gpu = layer_cost(padded, JOB, plan, H100, kind=MOE_LAYER, groups=groups, options=NO_HOST)
    assert sync == pytest.approx(launch_s)
    assert padded_cost.forward.compute_s == pytest.approx(padded_gpu.forward.compute_s)


@pytest.mark.parametrize(("experts", "top_k", "groups"), [(128, 8, 8), (128, 8, 2), (256, 8, 32)])
def test_distinct_groups_match_the_hypergeometric_count(experts, top_k, groups):
    # G·(1 - C(E - E/G, k) / C(E, k)): the chance a group holds none of k distinct experts.
    per = experts // groups
    expected = groups * (1 - math.comb(experts - per, top_k) / math.comb(experts, top_k))
    assert expected_distinct_groups(experts, top_k, groups) == pytest.approx(expected)
    assert expected_distinct_groups(experts, 1, groups) == pytest.approx(1.0)
    assert expected_distinct_groups(experts, top_k, 1) == 1.0


def test_flex_rows_inside_one_domain_are_the_distinct_other_ranks():
    remote, local = flex_rows_per_token(128, 8, group_size=8, ranks_per_domain=8)
    assert remote == 0.0
    assert local == pytest.approx(expected_distinct_groups(128, 8, 8) * 7 / 8)
    # Across two domains a token crosses the NIC at most once (top-8 of 128 experts hit
    # the other domain almost surely), not once per expert there (4 on average).
    remote, _ = flex_rows_per_token(128, 8, group_size=16, ranks_per_domain=8)
    assert remote == pytest.approx(expected_distinct_groups(128, 8, 2) / 2)


def test_split_all_to_all_reduces_to_the_uniform_one():
    size = 64e6
    for n in (8, 16, 32):
        g = ep_group(n)
        uniform = collective_time_s(H100, "all_to_all", size, g)
        split = split_all_to_all_time_s(H100, size * (n - 8) / n, size * (min(n, 8) - 1) / n, g)
        assert split == pytest.approx(uniform)


def test_flex_sends_fewer_bytes_and_permutes_less():
    plan = ParallelPlan(dp=16, ep=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    groups = CommGroups(ep=ep_group(16))

    def layer(dispatcher: str):
        options = dataclasses.replace(NO_HOST, moe_dispatcher=dispatcher)
        return layer_cost(QWEN, job, plan, H100, kind=MOE_LAYER, groups=groups, options=options)

    alltoall, flex = layer("alltoall"), layer("flex")
    assert flex.backward.ep_bytes < alltoall.backward.ep_bytes
    assert flex.backward.ep_s < alltoall.backward.ep_s
    shape = moe_shape(QWEN, plan, tokens=4096)
    assert dispatch_copies(shape, "flex") == 2 and dispatch_copies(shape, "alltoall") == 4


def test_allgather_dispatcher_gathers_tokens_and_scatters_fp32_outputs():
    # MoEAllGatherTokenDispatcher: all-gather of [T, h] tokens and of the fp32 probs and
    # 1-byte routing map over the group, reduce-scatter of the [T x ep, h] outputs in fp32.
    plan = ParallelPlan(dp=8, ep=8)
    options = dataclasses.replace(NO_HOST, moe_dispatcher="allgather")
    g = ep_group(8)
    t, h, e = JOB.seq_length, QWEN.hidden_size, QWEN.num_experts
    expected = (
        collective_time_s(H100, "all_gather", t * 8 * h * 2, g)
        + collective_time_s(H100, "all_gather", t * 8 * e * 5, g)
        + collective_time_s(H100, "reduce_scatter", t * 8 * h * 4, g)
    )
    c = moe_cost(plan, options)
    assert c.forward.ep_s == pytest.approx(expected)
    assert c.backward.ep_s == pytest.approx(expected)
    assert allgather_combine_bytes(t, 8, h, 2) == t * 8 * h * (2 * 2 + 4)


def test_the_most_loaded_rank_sets_the_pace_of_dropless_layers():
    plan = ParallelPlan(dp=8, ep=8)
    skewed = moe_shape(QWEN, plan, tokens=4096, imbalance=1.5)
    assert skewed.rows_per_expert == 1.5 * moe_shape(QWEN, plan, tokens=4096).rows_per_expert
    padded = QWEN.replace(moe_capacity_factor=1.25)
    assert moe_shape(padded, plan, tokens=4096, imbalance=1.5).rows == 1.25 * 8 * 4096
    heavy = dataclasses.replace(NO_HOST, moe_load_imbalance=1.5)
    assert moe_cost(plan, heavy).forward.duration_s > moe_cost(plan).forward.duration_s
    assert moe_cost(plan, heavy).backward.ep_s > moe_cost(plan).backward.ep_s
    with pytest.raises(SpecError, match="moe_load_imbalance"):
        ExecutionOptions(moe_load_imbalance=0.9)


def test_unknown_dispatcher_is_rejected():
    with pytest.raises(SpecError, match="moe_dispatcher"):
        ExecutionOptions(moe_dispatcher="deepep")


def test_negative_host_launch_is_rejected():
    with pytest.raises(SpecError, match="moe_host_launch_s"):
        ExecutionOptions(moe_host_launch_s=-1e-6)
