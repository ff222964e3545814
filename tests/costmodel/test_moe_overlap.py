"""The 1F1B all-to-all overlap of a MoE layer's EP communication
(`ExecutionOptions.moe_a2a_overlap`; costmodel.runtimes.megatron.moe_a2a_overlap): the two-stream
step of `TransformerLayerSchedulePlan.run`, the share of passes it merges
(`get_pp_rank_microbatches`), and its effect on layer_cost."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_a2a_overlap import (
    FLEX_COMM_SMS,
    LayerStreams,
    a2a_exposed_s,
    a2a_overlap_applies,
    a2a_paired_fraction,
    flex_comm_sm_share,
    overlapped_pair_s,
)
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

B200 = load_profile("b200")
H100 = load_profile("h100-sxm-80gb")
QWEN = get_preset("qwen3-30b-a3b")
JOB = TrainingJob(seq_length=4096, global_batch_size=256)
EAGER = dataclasses.replace(DEFAULT_OPTIONS, moe_host_launch_s=0.0, moe_expert_launch_s=0.0)
OVERLAP = dataclasses.replace(EAGER, moe_a2a_overlap=True)


def streams(pre: float, mlp: float, comm: float, wgrad: float = 0.0) -> LayerStreams:
    return LayerStreams(pre_s=pre, mlp_s=mlp, dispatch_s=comm, combine_s=comm, wgrad_s=wgrad)


def test_balanced_step_hides_every_all_to_all():
    # Every kernel 1 s: the comm stream runs combine_b | dispatch_f, dispatch_b | combine_f
    # beside pre_f | mlp_b, wgrad_b, mlp_f | pre_b, so the step lasts the 5 s of
    # computation (serially F = 4 s and B = 5 s).
    assert overlapped_pair_s(streams(1, 1, 1), streams(1, 1, 1, wgrad=1)) == pytest.approx(5.0)


def test_communication_bound_step_lasts_its_all_to_alls():
    # 3 s per all-to-all, 0.5 s per computation: the four all-to-alls run back to back.
    assert overlapped_pair_s(streams(0.5, 0.5, 3), streams(0.5, 0.5, 3)) == pytest.approx(12.0)


def test_without_communication_the_step_is_the_computation():
    f, b = streams(2.0, 3.0, 0.0), streams(4.0, 5.0, 0.0, wgrad=1.0)
    assert overlapped_pair_s(f, b) == pytest.approx(15.0)
    assert a2a_exposed_s(f, b, paired=1.0) == (0.0, 0.0)


def test_paired_share_follows_megatrons_warmup_counts():
    # No pipelining: the first forward and the last backward run alone.
    assert a2a_paired_fraction(1, 1, 4) == pytest.approx(3 / 4)
    # pp 2, vpp 2, 4 microbatches: 8 passes per rank; warmup (2 - r - 1)·2 + (2 - 1)·2 + 1
    # = 5 on rank 0 and 3 on rank 1, so 3/8 and 5/8 merged.
    assert a2a_paired_fraction(2, 2, 4) == pytest.approx((3 / 8 + 5 / 8) / 2)
    assert a2a_paired_fraction(4, 2, 1) == 0.0


def test_unmerged_passes_expose_all_their_communication():
    f, b = streams(1, 1, 1), streams(1, 1, 1, wgrad=1)
    assert a2a_exposed_s(f, b, paired=0.0) == pytest.approx((2.0, 2.0))
    assert a2a_exposed_s(f, b, paired=1.0) == pytest.approx((0.0, 0.0))


def moe_cost(plan: ParallelPlan, options, nodes: int = 8):
    # EP 8 at stride ``nodes`` over nodes of 8 GPUs (8: every all-to-all crosses the NICs).
    ep = strided_group_placement(
        plan.ep, nodes, gpus_per_node=8, scale_up_domain=8, nics_per_node=8
    )
    return layer_cost(
        QWEN, JOB, plan, B200, kind=MOE_LAYER, groups=CommGroups(ep=ep), options=options
    )


def exposed_s(cost) -> float:
    return cost.forward.ep_exposed_s + cost.backward.ep_exposed_s


@pytest.mark.parametrize("nodes", [1, 8])
def test_overlap_hides_ep_time_under_another_microbatch(nodes):
    plan = ParallelPlan(dp=8, ep=8, micro_batch_size=2)
    eager, overlapped = moe_cost(plan, EAGER, nodes), moe_cost(plan, OVERLAP, nodes)
    saved = exposed_s(eager) - exposed_s(overlapped)
    compute = eager.forward.compute_s + eager.backward.compute_s
    # Hidden EP time is bounded by the other microbatch's computation and by itself.
    assert 0.0 < saved <= min(compute, exposed_s(eager)) + 1e-12
    # The all-to-alls still run; only the part the compute stream waits for shrinks.
    assert overlapped.forward.ep_s == pytest.approx(eager.forward.ep_s)
    assert overlapped.forward.compute_s == pytest.approx(eager.forward.compute_s)


def test_node_local_all_to_alls_hide_almost_entirely():
    plan = ParallelPlan(dp=8, ep=8, micro_batch_size=2)
    paired = a2a_paired_fraction(1, 1, plan.num_microbatches(JOB.global_batch_size))
    overlapped = exposed_s(moe_cost(plan, OVERLAP, nodes=1))
    assert overlapped <= (1 - paired) * exposed_s(moe_cost(plan, EAGER, nodes=1)) + 1e-12


@pytest.mark.parametrize(
    "plan",
    [
        ParallelPlan(pp=2, dp=4, ep=4, micro_batch_size=2),  # pp > 1 without interleaving
        ParallelPlan(dp=8, ep=1, micro_batch_size=2),  # no expert parallelism
        ParallelPlan(dp=8, ep=8, micro_batch_size=2, recompute="full"),
    ],
)
def test_overlap_is_not_applied_where_megatron_refuses_it(plan):
    assert not a2a_overlap_applies(plan, OVERLAP)
    assert moe_cost(plan, OVERLAP) == moe_cost(plan, EAGER)
    assert not a2a_overlap_applies(plan, dataclasses.replace(OVERLAP, moe_dispatcher="allgather"))


def test_flex_kernels_take_their_sms_from_the_overlapped_computation():
    # Balanced step: nothing waits, 4 s of all-to-all run beside the computation, which
    # loses a 0.1 share of the SMs meanwhile: 0.4 s, split by communication (2 s and 2 s).
    f, b = streams(1, 1, 1), streams(1, 1, 1, wgrad=1)
    assert a2a_exposed_s(f, b, paired=1.0, comm_sm_share=0.1) == pytest.approx((0.2, 0.2))
    flex = dataclasses.replace(OVERLAP, moe_dispatcher="flex")
    assert flex_comm_sm_share(148, flex) == pytest.approx(FLEX_COMM_SMS / 148)
    assert flex_comm_sm_share(148, OVERLAP) == 0.0  # NCCL's all-to-all: not priced
    assert flex_comm_sm_share(None, flex) == 0.0


def scaled_all_to_all(profile, factor: float):
    fits = tuple(
        dataclasses.replace(f, busbw_GBps=f.busbw_GBps * factor) if f.op == "all_to_all" else f
        for f in profile.communication.fits
    )
    return dataclasses.replace(
        profile, communication=dataclasses.replace(profile.communication, fits=fits)
    )


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_slower_all_to_alls_never_shorten_an_overlapped_layer_with_its_host_floor(dispatcher):
    # Host launches priced (the defaults), router and preprocessing graphed: the dropless
    # token-count synchronization's floor binds. The routed experts' post-sync window holds
    # only the EP time the overlap leaves exposed, as the pass does, so the hidden
    # all-to-all time is not counted twice as device time that hides launches.
    options = dataclasses.replace(
        DEFAULT_OPTIONS,
        moe_dispatcher=dispatcher,
        moe_a2a_overlap=True,
        cuda_graph_scopes=frozenset({"moe_router", "moe_preprocess"}),
    )
    plan = ParallelPlan(pp=2, vpp=2, schedule="interleaved", dp=8, ep=8)
    ep = strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    totals = []
    for factor in (1.0, 0.9, 0.75, 0.5):
        cost = layer_cost(
            QWEN,
            JOB,
            plan,
            scaled_all_to_all(H100, factor),
            kind=MOE_LAYER,
            groups=CommGroups(ep=ep),
            options=options,
        )
        totals.append(cost.forward.duration_s + cost.backward.duration_s)
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(totals)), totals
