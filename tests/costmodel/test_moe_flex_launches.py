"""Host launches of a MoE layer under the flex dispatcher (HybridEP), against the alltoall
dispatcher's count (costmodel.runtimes.megatron.moe_flex_launches)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import routed_experts
from costmodel.runtimes.megatron.moe_experts import unattributed_device_s
from costmodel.runtimes.megatron.moe_flex_launches import (
    FLEX_FIXED_LAUNCHES,
    FLEX_PRE_SYNC_LAUNCHES,
    FLEX_PREPROCESS_LAUNCHES,
)
from costmodel.runtimes.megatron.moe_launches import (
    FIXED_LAUNCHES,
    PREPROCESS_LAUNCHES,
    ROUTER_LAUNCHES,
    captured_moe_launches,
    moe_host_launches,
    pre_sync_launches,
)
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

B200 = load_profile("b200")
DSV3 = get_preset("deepseek-v3")
PLAN = ParallelPlan(dp=8, ep=8)  # 256 experts over EP 8: 32 local experts
LOCAL = 32
EP = strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
GROUPS = CommGroups(ep=EP)
JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")


def options(dispatcher: str, launch_s: float, scopes: frozenset[str] = frozenset()):
    return dataclasses.replace(
        DEFAULT_OPTIONS,
        moe_dispatcher=dispatcher,
        moe_host_launch_s=launch_s,
        moe_expert_launch_s=launch_s,
        cuda_graph_scopes=scopes,
    )


def layer(dispatcher: str, launch_s: float):
    opts = options(dispatcher, launch_s)
    return layer_cost(DSV3, JOB, PLAN, B200, kind=MOE_LAYER, groups=GROUPS, options=opts)


def test_flex_counts_its_own_fixed_launches_and_keeps_the_per_expert_ones():
    # FP8 GroupedLinear: 4 forward / 6 backward Python-level calls (general_grouped_gemm
    # and _split_quantize) and 4 / 6 C++ launches per local expert, whatever the dispatcher.
    for direction, calls, per_expert in (("forward", 4, 4), ("backward", 6, 6)):
        flex = moe_host_launches(LOCAL, True, direction, dispatcher="flex")
        alltoall = moe_host_launches(LOCAL, True, direction, dispatcher="alltoall")
        assert flex.python == FLEX_FIXED_LAUNCHES[direction] + calls
        assert alltoall.python == FIXED_LAUNCHES[direction] + calls
        assert flex.expert == alltoall.expert == per_expert * LOCAL
        assert flex.python < alltoall.python
    # The allgather dispatcher keeps the alltoall count (its own is not modelled).
    allgather = moe_host_launches(LOCAL, True, "forward", dispatcher="allgather")
    assert (allgather.python, allgather.expert) == (FIXED_LAUNCHES["forward"] + 4, 4 * LOCAL)


def test_flex_synchronizes_after_its_metadata_and_captures_only_its_preprocessing():
    assert pre_sync_launches("alltoall") == ROUTER_LAUNCHES + PREPROCESS_LAUNCHES
    assert pre_sync_launches("flex") == FLEX_PRE_SYNC_LAUNCHES
    both = frozenset({"moe_router", "moe_preprocess"})
    total = moe_host_launches(LOCAL, True, "forward", dispatcher="flex")
    flex_share = captured_moe_launches(both, total, "flex")
    assert (flex_share.python, flex_share.expert) == (
        ROUTER_LAUNCHES + FLEX_PREPROCESS_LAUNCHES,
        0,
    )
    assert captured_moe_launches(both, total).python == ROUTER_LAUNCHES + PREPROCESS_LAUNCHES
    assert captured_moe_launches(frozenset({"moe"}), total, "flex") == total


def test_host_bound_flex_backward_lasts_its_launches():
    # At 200 us per launch a 32-expert FP8 layer at micro-batch 1 is host-bound in backward:
    # the pass lasts the host time of the flex dispatcher's launches.
    launch_s = 200e-6
    kernels = layer("flex", 0.0)
    host_b = moe_host_launches(LOCAL, True, "backward", dispatcher="flex").total * launch_s
    assert host_b > kernels.backward.duration_s
    assert layer("flex", launch_s).backward.duration_s == pytest.approx(host_b)


def test_host_bound_flex_forward_counts_launches_after_its_own_sync_point():
    # The launches after HybridEP's token-count copy hide only behind the routed experts.
    launch_s = 200e-6
    kernels = layer("flex", 0.0)
    opts = options("flex", 0.0)
    routed_f = routed_experts(DSV3, PLAN, B200, 4096.0, 2, "fp8", GROUPS, opts)[0]
    # The MoE block's device time per token runs after the synchronization too.
    after_sync_s = (
        routed_f.duration_s + unattributed_device_s(B200, 4096.0, opts.moe_token_device_s)[0]
    )
    launches = moe_host_launches(LOCAL, True, "forward", dispatcher="flex").total
    host = launches * launch_s
    post_host = (launches - FLEX_PRE_SYNC_LAUNCHES) * launch_s
    gpu = kernels.forward.duration_s
    extra = max(host - gpu, post_host - after_sync_s) + launch_s
    assert layer("flex", launch_s).forward.duration_s == pytest.approx(gpu + extra)
