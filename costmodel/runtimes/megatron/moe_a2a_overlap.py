"""The 1F1B all-to-all overlap of MoE layers (`ExecutionOptions.moe_a2a_overlap`): the
two-stream merged step of one layer's forward and another microbatch's backward, the share
of passes that run merged, its requirements and the EP seconds it leaves exposed.

Source: Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py
(``TransformerLayerSchedulePlan.run``), megatron/core/pipeline_parallel/schedules.py and
megatron/core/transformer/transformer_config.py (``overlap_moe_expert_parallel_comm``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.execution import ExecutionOptions
from costmodel.passes import PassCost
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerStreams:
    """One MoE layer pass as the 1F1B all-to-all overlap schedules it, in seconds
    (`overlapped_pair_s`)."""

    pre_s: float
    """Computation before the dispatch (``pre_dispatch_computation``: attention, norms,
    router, dispatch preprocessing), with the collectives it waits for."""
    mlp_s: float
    """Expert computation (``mlp``: routed and shared experts); in backward without the
    weight gradients."""
    dispatch_s: float
    """Token dispatch all-to-all (``moe_dispatch``), on the communication stream."""
    combine_s: float
    """Token combine all-to-all (``moe_combine``), on the communication stream."""
    wgrad_s: float = 0.0
    """Backward only: the expert weight gradients (``mlp.backward_dw``, delayed by
    ``delay_wgrad_compute``)."""


def overlapped_pair_s(forward: LayerStreams, backward: LayerStreams) -> float:
    """Seconds of one layer's merged step of the 1F1B all-to-all overlap: the ``forward`` of
    one microbatch and the ``backward`` of another on two streams
    (Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py,
    ``TransformerLayerSchedulePlan.run``)::

        comm: combine_b    | dispatch_f -> dispatch_b        | combine_f
        comp: pre_f        | mlp_b -> wgrad_b -> mlp_f       | pre_b

    Each stream runs its work in that order; dispatch_f waits for pre_f, mlp_b for
    combine_b, dispatch_b for mlp_b, mlp_f for dispatch_f, combine_f for mlp_f, pre_b for
    dispatch_b. The step ends when both streams are done (the next layer's pre_f needs
    combine_f, its combine_b needs pre_b)."""
    start = max(forward.pre_s, backward.combine_s)
    dispatch_f_end = start + forward.dispatch_s
    mlp_b_end = start + backward.mlp_s
    dispatch_b_end = max(mlp_b_end, dispatch_f_end) + backward.dispatch_s
    mlp_f_end = max(mlp_b_end + backward.wgrad_s, dispatch_f_end) + forward.mlp_s
    combine_f_end = max(mlp_f_end, dispatch_b_end) + forward.combine_s
    pre_b_end = max(mlp_f_end, dispatch_b_end) + backward.pre_s
    return max(combine_f_end, pre_b_end)


def a2a_paired_fraction(pp: int, vpp: int, num_microbatches: int) -> float:
    """Share of a rank's forward (and backward) passes that run merged with a pass of
    another microbatch under the 1F1B all-to-all overlap, averaged over the pipeline ranks.
    Without pipelining the first forward and the last backward run alone
    (``combined_1f1b_schedule_for_no_pipelining``); with the interleaved schedule the
    warmup forwards, (pp - rank - 1)·2 + (vpp - 1)·pp plus one extra microbatch, and as many
    cooldown backwards run alone (megatron/core/pipeline_parallel/schedules.py,
    ``get_pp_rank_microbatches`` with ``overlap_moe_expert_parallel_comm``; the group size
    per virtual stage is Megatron's default, pp)."""
    m = max(num_microbatches, 1)
    if pp == 1:
        return (m - 1) / m
    total = m * vpp
    shares = []
    for rank in range(pp):
        warmup = min(total, (pp - rank - 1) * 2 + (vpp - 1) * pp + 1)
        shares.append((total - warmup) / total)
    return sum(shares) / pp


def flex_comm_sm_share(sms: int | None, options: ExecutionOptions) -> float:
    """Share of a device's ``sms`` streaming multiprocessors the flex dispatcher's kernels
    take (`FLEX_COMM_SMS`); 0 for NCCL's all-to-all (the alltoall dispatcher, whose channel
    count NCCL chooses at run time) and for devices of unknown SM count."""
    if options.moe_dispatcher != "flex" or not sms:
        return 0.0
    return min(FLEX_COMM_SMS / sms, 1.0)


def a2a_overlap_unmet(plan: ParallelPlan, options: ExecutionOptions) -> dict[str, str]:
    """The requirements of `ExecutionOptions.moe_a2a_overlap` that ``plan`` under
    ``options`` does not meet, keyed ``ep``, ``dispatcher``, ``recompute`` or ``vpp``, each
    with what was found: Megatron-core asserts ep > 1, the alltoall or flex dispatcher, no
    full recompute, and an interleaved schedule when pp > 1
    (megatron/core/transformer/transformer_config.py, ``__post_init__`` under
    ``overlap_moe_expert_parallel_comm``)."""
    unmet = {}
    if plan.ep < 2:
        unmet["ep"] = f"expert parallelism, got ep ({plan.ep})"
    if options.moe_dispatcher not in ("alltoall", "flex"):
        unmet["dispatcher"] = f"the alltoall or flex dispatcher, got {options.moe_dispatcher}"
    if plan.recompute == "full":
        unmet["recompute"] = "no full recompute, got recompute full"
    if plan.pp > 1 and plan.vpp < 2:
        unmet["vpp"] = f"a virtual pipeline when pp > 1, got pp ({plan.pp}), vpp ({plan.vpp})"
    return unmet


def a2a_overlap_applies(plan: ParallelPlan, options: ExecutionOptions) -> bool:
    """True when `ExecutionOptions.moe_a2a_overlap` acts on ``plan``: it is set and
    `a2a_overlap_unmet` finds nothing."""
    return options.moe_a2a_overlap and not a2a_overlap_unmet(plan, options)


FLEX_COMM_SMS = 20
"""SMs the DeepEP / HybridEP dispatch and combine kernels occupy while they run (Megatron-core
``moe_flex_dispatcher_num_sms``, formerly ``moe_deepep_num_sms``: "historical default 20",
megatron/core/transformer/transformer_config.py; HybridEP takes DeepEP's default when
``moe_hybridep_num_sms`` is unset). Under the 1F1B all-to-all overlap the computation that
runs beside them has the other SMs (`a2a_exposed_s`)."""


def a2a_exposed_s(
    forward: LayerStreams, backward: LayerStreams, paired: float, comm_sm_share: float = 0.0
) -> tuple[float, float]:
    """(forward, backward) exposed EP seconds of one MoE layer per microbatch under the 1F1B
    all-to-all overlap: merged passes (share ``paired``, `a2a_paired_fraction`) expose what
    their merged step (`overlapped_pair_s`) lasts beyond its computation, plus the
    computation the communication kernels displace while they run beside it (their share of
    the SMs, ``comm_sm_share``, times the communication that overlaps), split over the two
    passes in proportion to their communication; the others expose all of it."""
    comm_f = forward.dispatch_s + forward.combine_s
    comm_b = backward.dispatch_s + backward.combine_s
    if comm_f + comm_b <= 0.0:
        return 0.0, 0.0
    compute = forward.pre_s + forward.mlp_s + backward.pre_s + backward.mlp_s + backward.wgrad_s
    waited = max(0.0, overlapped_pair_s(forward, backward) - compute)
    hidden = waited + comm_sm_share * max(0.0, comm_f + comm_b - waited)
    share_f = comm_f / (comm_f + comm_b)
    exposed_f = paired * hidden * share_f + (1.0 - paired) * comm_f
    exposed_b = paired * hidden * (1.0 - share_f) + (1.0 - paired) * comm_b
    return exposed_f, exposed_b


def a2a_overlapped_passes(
    forward: PassCost,
    backward: PassCost,
    experts: tuple[PassCost, PassCost, float],
    paired: float,
    comm_sm_share: float = 0.0,
) -> tuple[PassCost, PassCost]:
    """A MoE layer's (forward, backward) with the EP exposure of the 1F1B all-to-all overlap
    (`a2a_exposed_s`). ``experts`` is the experts' part of the layer (forward, backward,
    weight-gradient seconds of the routed and shared experts); the rest of each pass is its
    ``pre_dispatch_computation``. Dispatch and combine each take half of the pass's EP time;
    ``comm_sm_share`` as in `a2a_exposed_s`."""
    mlp_f, mlp_b, wgrad_s = experts

    def streams(whole: PassCost, part: PassCost, wgrad: float) -> LayerStreams:
        comm = part.ep_exposed_s
        return LayerStreams(
            pre_s=whole.duration_s - part.duration_s,
            mlp_s=part.duration_s - comm - wgrad,
            dispatch_s=comm / 2,
            combine_s=comm / 2,
            wgrad_s=wgrad,
        )

    exposed_f, exposed_b = a2a_exposed_s(
        streams(forward, mlp_f, 0.0), streams(backward, mlp_b, wgrad_s), paired, comm_sm_share
    )
    return (
        dataclasses.replace(forward, ep_exposed_s=exposed_f),
        dataclasses.replace(backward, ep_exposed_s=exposed_b),
    )
