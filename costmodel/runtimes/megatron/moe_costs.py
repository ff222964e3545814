"""Per-microbatch costs of the routed experts of one MoE layer on one rank, as Megatron-core
runs them: router, alltoall token dispatcher, grouped expert MLP, combine.

Source: Megatron-LM `megatron/core/transformer/moe/` (`router.py` `TopKRouter`,
`token_dispatcher.py` `MoEAlltoAllTokenDispatcher`, `experts.py` `TEGroupedMLP`,
`moe_utils.py` `permute` / `unpermute` / `sort_chunks_by_idxs`) with Transformer Engine's
`GroupedLinear` (`transformer_engine/pytorch/module/grouped_linear.py`).

Shapes: T tokens reach the MoE layer of a rank (T/tp with sequence parallelism); each picks
top_k experts, so the rank dispatches R = top_k·T rows (x the capacity factor when one is
set) of h elements. With balanced routing every rank receives R rows back from the EP group
(and etp·R after the expert-TP all-gather), split evenly over its E/ep local experts; under
dropless routing the most loaded rank receives `ExecutionOptions.moe_load_imbalance` x R
and sets the pace (`moe_shape`).

Work per pass, in the order the dispatcher runs it (forward; backward mirrors it):
1. router: the gating GEMM [T, h] x [h, E] and the fused top-k / score-function / aux-loss
   kernels over the [T, E] fp32 logits (`router_kernel_bytes`);
2. dispatch metadata: per-expert token counts all-gathered over the tp x ep group (one
   latency-bound collective, forward only) and copied to the host;
3. permutation 1 (tokens grouped by destination rank), the token all-to-all and the probs
   all-to-all (fp32, one per row), permutation 2 (``sort_chunks_by_idxs``: rows regrouped
   by local expert, only with more than one local expert); combine runs the inverse
   permutations around one all-to-all. Each permutation reads and writes R·h·e bytes
   (`dispatch_copy_bytes`);
4. experts: FC1, activation, FC2 per local expert, each GEMM timed with the rows its
   expert gets (small per-expert GEMMs run at the profile's efficiency for their size);
   with biased experts, the FC2 bias added expert by expert
   (`costmodel.runtimes.megatron.unfused_costs.expert_fc2_bias_time_s`).

The flex dispatcher (``--moe-token-dispatcher-type flex``, DeepEP or HybridEP backends:
`_DeepepManager`, `_HybridEPManager`) sends each token once to every distinct rank that
holds one of its experts, and across scale-up domains once per distinct remote domain,
forwarding inside that domain over the scale-up fabric (`flex_rows_per_token`); the
permutation into expert order and its inverse run on the receiving side only (2 copies).

The allgather dispatcher (``--moe-token-dispatcher-type allgather``, Megatron-core's
configuration default; `MoEAllGatherTokenDispatcher`) all-gathers every rank's tokens, fp32
probabilities and routing map over the EP group, permutes the rows of its local experts
out of the gathered tokens, and combines by restoring the gathered shape, casting it to
fp32 and reduce-scattering it (`allgather_combine_bytes`). It is priced over the EP group
(Megatron spans expert TP x EP; expert TP is not folded in here).

Host side (`moe_host_launches`): the dropless dispatcher copies the split sizes to the host
and synchronizes the stream once per forward (``_maybe_dtoh_and_synchronize`` at
``cuda_sync_point``); TE's grouped GEMM launches one cuBLAS GEMM per expert (and, under FP8,
one quantization per expert input). The flex dispatcher fuses its permutations into the
exchange and launches fewer kernels that do not repeat per expert
(`costmodel.runtimes.megatron.moe_flex_launches`). A layer pass therefore takes at least
the host time of its launches; `host_bound_s` applies that floor. The per-expert launches,
the FP8 quantization of the expert operands and TE's fused grouped MLP are in
`costmodel.runtimes.megatron.moe_experts`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.collectives import collective_time_s, split_all_to_all_time_s
from costmodel.compute import FP32_BYTES
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups, PassCost
from costmodel.runtimes.megatron.moe_experts import expert_fp8_quantize_s, expert_launches
from costmodel.runtimes.megatron.moe_flex_launches import (
    FLEX_FIXED_LAUNCHES,
    FLEX_PRE_SYNC_LAUNCHES,
    FLEX_PREPROCESS_LAUNCHES,
    uses_flex_launches,
)
from costmodel.runtimes.megatron.unfused_costs import expert_fc2_bias_time_s
from profiles.schema import HardwareProfile
from specs.model import ModelSpec
from specs.plan import ParallelPlan

ROUTING_MAP_BYTES = 1
COUNT_BYTES = 8
"""int64 token counts per expert (`routing_map.sum(dim=0).long()`)."""

FIXED_LAUNCHES = {"forward": 28, "backward": 28}
"""Kernel launches of one MoE layer pass that do not repeat per expert, counted on the
dropless alltoall path of `MoEAlltoAllTokenDispatcher` with `--moe-router-fusion` and
`--moe-permute-fusion`: router (gating GEMM, fused top-k and score function, fused aux
loss: 4), dispatch metadata (token counts, split sums, the count all-gather, slicing, five
device-to-host copies and the event: 12), permutation 1 and 2 and their inverses, three
all-to-alls and the probs (10), the fused weighted activation (2). The backward replays the
same chain through autograd."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeShape:
    """What one rank's routed experts see for one microbatch."""

    tokens: float
    """Tokens entering the router (T/tp with sequence parallelism)."""
    rows: float
    """Rows the most loaded rank receives: top_k x tokens (x the capacity factor, or x the
    load imbalance under dropless routing)."""
    local_experts: int
    """Experts held by the rank: E / ep."""
    rows_per_expert: float
    """Rows each local expert multiplies: rows x etp / local experts (balanced routing)."""
    width: float
    """Expert FFN width per rank: moe_ffn_hidden_size / etp."""


def moe_shape(
    model: ModelSpec, plan: ParallelPlan, tokens: float, imbalance: float = 1.0
) -> MoeShape:
    """The routed-expert shape of one microbatch of ``tokens`` router tokens on the rank
    that sets the pace. Dropless routing lets the most loaded EP rank receive ``imbalance``
    times the mean (`ExecutionOptions.moe_load_imbalance`); a capacity factor pads or drops
    every expert to capacity x the mean (`moe_utils.get_capacity`), whatever the routing."""
    factor = model.moe_capacity_factor or imbalance
    rows = model.moe_top_k * tokens * factor
    local = max(model.num_experts // plan.ep, 1)
    return MoeShape(
        tokens=tokens,
        rows=rows,
        local_experts=local,
        rows_per_expert=rows * plan.expert_tp / local,
        width=model.expert_ffn_hidden_size / plan.expert_tp,
    )


def dispatch_copies(shape: MoeShape, dispatcher: str = "alltoall") -> int:
    """Permutation copies of rows x h in one pass: alltoall runs permutation 1 and its
    inverse always, permutation 2 (``sort_chunks_by_idxs``) and its inverse with more than
    one local expert (`moe_utils.permute`, `sort_chunks_by_idxs`); flex and allgather
    permute the received tokens into expert order and back (2). The backward runs the same
    copies on the gradients."""
    if dispatcher in ("flex", "allgather"):
        return 2
    return 2 + (2 if shape.local_experts > 1 else 0)


def dispatch_copy_bytes(
    shape: MoeShape, hidden: int, elem: int, dispatcher: str = "alltoall"
) -> float:
    """Bytes the dispatcher's permutations move in one pass (`dispatch_copies`); each copy
    reads and writes rows x h x e."""
    return dispatch_copies(shape, dispatcher) * 2 * shape.rows * hidden * elem


def allgather_combine_bytes(tokens: float, ep: int, hidden: int, elem: int) -> float:
    """Bytes the allgather dispatcher's combine moves besides the permutations: the
    unpermutation writes the whole gathered [tokens x ep, h] tensor and the cast to the fp32
    probabilities' dtype before the reduce-scatter reads it and writes it in fp32
    (`MoEAllGatherTokenDispatcher.combine_preprocess`, `token_combine`); the backward moves
    the same on the gradients."""
    return tokens * ep * hidden * (2 * elem + FP32_BYTES)


def expected_distinct_groups(num_experts: int, top_k: int, num_groups: int) -> float:
    """Expected number of distinct groups (ranks, or scale-up domains) a token's top_k
    experts fall in, when the experts are chosen uniformly without repetition and spread
    evenly over ``num_groups`` groups: G·(1 - C(E - E/G, k) / C(E, k)). Balanced routing, as
    the Megatron-Bridge benchmarks force (`moe_router_force_load_balancing`)."""
    if num_groups <= 1:
        return float(num_groups)
    outside = num_experts - num_experts / num_groups
    miss = 1.0
    for i in range(top_k):
        miss *= max(outside - i, 0.0) / (num_experts - i)
    return num_groups * (1.0 - miss)


def flex_rows_per_token(
    num_experts: int, top_k: int, group_size: int, ranks_per_domain: int
) -> tuple[float, float]:
    """(remote, local) token copies one token costs a rank in the flex dispatch over an EP
    group of ``group_size`` ranks, ``ranks_per_domain`` of them per scale-up domain.

    Remote: one copy per distinct other domain, D_dom·(n - g)/n with D_dom the expected
    distinct domains. Local: one copy per distinct other rank of the own domain,
    D_rank·(g - 1)/n, plus the forwarding inside remote domains (the ranks hit there beyond
    the one the copy lands on), (D_rank - D_dom)·(n - g)/n; by symmetry each rank's fabric
    carries as much forwarding as its own tokens cause."""
    n, g = group_size, min(ranks_per_domain, group_size)
    d_rank = expected_distinct_groups(num_experts, top_k, n)
    d_dom = expected_distinct_groups(num_experts, top_k, max(n // g, 1))
    remote = d_dom * (n - g) / n
    local = d_rank * (g - 1) / n + max(d_rank - d_dom, 0.0) * (n - g) / n
    return remote, local


def router_kernel_bytes(tokens: float, num_experts: int, direction: str) -> float:
    """Bytes of the fused router kernels over the [tokens, E] fp32 logits
    (`moe_utils.fused_topk_with_score_function`, `fused_compute_score_for_moe_aux_loss`).

    Forward: top-k with the score function reads the logits and writes the probabilities and
    the 1-byte routing map (4 + 4 + 1 per element); the aux-loss scores read the logits and
    write their scores (4 + 4). Backward: each of the two reads its output gradient and saved
    output and writes the logits gradient (12 per element each)."""
    per_element = 17 + ROUTING_MAP_BYTES if direction == "forward" else 24
    return per_element * tokens * num_experts


def moe_host_launches(
    local_experts: int,
    fp8: bool,
    direction: str,
    *,
    fused_mlp: bool = False,
    dispatcher: str = "alltoall",
) -> int:
    """Kernel launches the host issues for one MoE layer pass: the dispatcher's launches
    that do not repeat per expert (`FIXED_LAUNCHES`; `moe_flex_launches.FLEX_FIXED_LAUNCHES`
    for ``flex``) plus the experts' MLP (`moe_experts.expert_launches`: per local expert
    with TE ``GroupedLinear``, a fixed few with the fused grouped MLP)."""
    experts = expert_launches(local_experts, fp8, direction, fused=fused_mlp)
    fixed = FLEX_FIXED_LAUNCHES if uses_flex_launches(dispatcher) else FIXED_LAUNCHES
    return fixed[direction] + experts


ROUTER_LAUNCHES = 4
"""Launches of `FIXED_LAUNCHES` in the router (gating GEMM, fused top-k and score function,
fused aux loss), captured by the ``moe_router`` CUDA graph scope
(megatron/core/transformer/transformer_config.py, ``cuda_graph_modules``)."""

PREPROCESS_LAUNCHES = 12
"""Launches of `FIXED_LAUNCHES` in the dispatch metadata (``MoELayer.preprocess``: token
counts, split sums, the count all-gather, slicing, device-to-host copies), captured by the
``moe_preprocess`` CUDA graph scope (same source; valid only with ``moe_router``)."""

WHOLE_MOE_SCOPES = frozenset(("moe", "layer", "full_iteration"))
"""CUDA graph scopes that capture a MoE layer's whole pass (``moe``: all of
``TransformerLayer._forward_mlp``; ``layer``: the transformer layer; ``full_iteration``)."""


def pre_sync_launches(dispatcher: str = "alltoall") -> int:
    """Forward launches of a dropless MoE layer issued before its stream synchronization on
    the token counts: the router and the dispatch metadata (`ROUTER_LAUNCHES` +
    `PREPROCESS_LAUNCHES`), or the flex dispatcher's
    (`moe_flex_launches.FLEX_PRE_SYNC_LAUNCHES`)."""
    if uses_flex_launches(dispatcher):
        return FLEX_PRE_SYNC_LAUNCHES
    return ROUTER_LAUNCHES + PREPROCESS_LAUNCHES


def captured_moe_launches(
    scopes: frozenset[str], launches: int, dispatcher: str = "alltoall"
) -> int:
    """Of a MoE layer pass's `launches`, those a CUDA graph replays (no host launch time):
    all under `WHOLE_MOE_SCOPES`, else `ROUTER_LAUNCHES` under ``moe_router`` plus
    `PREPROCESS_LAUNCHES` under ``moe_preprocess`` (Megatron-core accepts it only together
    with ``moe_router``; the flex ``dispatcher``'s preprocessing is
    `moe_flex_launches.FLEX_PREPROCESS_LAUNCHES`). The expert GEMMs stay eager: their token
    counts are known only after the dispatch."""
    if scopes & WHOLE_MOE_SCOPES:
        return launches
    captured = 0
    if "moe_router" in scopes:
        captured += ROUTER_LAUNCHES
        if "moe_preprocess" in scopes:
            flex = uses_flex_launches(dispatcher)
            captured += FLEX_PREPROCESS_LAUNCHES if flex else PREPROCESS_LAUNCHES
    return min(captured, launches)


def host_bound_s(gpu_s: float, host_s: float) -> float:
    """Seconds a layer pass adds when its host launches take longer than its kernels run:
    max(0, host - GPU). The dropless dispatcher's stream synchronization empties the launch
    queue once per forward, so the host cannot bank time from earlier layers; layers of one
    kind repeat, so the same floor holds in backward once the host falls behind."""
    return max(0.0, host_s - gpu_s)


def _collectives(
    profile: HardwareProfile,
    plan: ParallelPlan,
    shape: MoeShape,
    model: ModelSpec,
    elem: int,
    groups: CommGroups,
    direction: str,
    dispatcher: str = "alltoall",
) -> PassCost:
    """Token all-to-alls (dispatch and combine; deduplicated under ``flex``,
    `flex_rows_per_token`), the probs all-to-all (alltoall only), the expert-TP
    all-gather / reduce-scatter (etp > 1) and, in forward, the all-gather of every rank's
    per-expert token counts over the tp x ep group (`preprocess`)."""
    size = shape.rows * model.hidden_size * elem
    etp = plan.expert_tp
    if dispatcher == "flex":
        ep = groups.ep
        remote, local = flex_rows_per_token(
            model.num_experts, model.moe_top_k, ep.size, ep.ranks_per_domain
        )
        token_bytes = size / model.moe_top_k
        seconds = 2 * split_all_to_all_time_s(
            profile, token_bytes * remote, token_bytes * local, ep
        )
        moved = 2 * token_bytes * (remote + local)
    elif dispatcher == "allgather":
        gathered = shape.tokens * plan.ep
        hidden_bytes = gathered * model.hidden_size * elem
        routing = gathered * model.num_experts * (FP32_BYTES + ROUTING_MAP_BYTES)
        combine = gathered * model.hidden_size * FP32_BYTES  # reduce-scattered in fp32
        seconds = collective_time_s(profile, "all_gather", hidden_bytes, groups.ep)
        seconds += collective_time_s(profile, "all_gather", routing, groups.ep)
        seconds += collective_time_s(profile, "reduce_scatter", combine, groups.ep)
        moved = hidden_bytes + routing + combine
    else:
        probs = shape.rows * FP32_BYTES if plan.ep > 1 else 0.0
        seconds = 2 * collective_time_s(profile, "all_to_all", size, groups.ep)
        seconds += collective_time_s(profile, "all_to_all", probs, groups.ep)
        moved = 2 * size + probs
    seconds += collective_time_s(profile, "all_gather", size * etp, groups.etp)
    seconds += collective_time_s(profile, "reduce_scatter", size * etp, groups.etp)
    moved += 2 * size * etp if etp > 1 else 0.0
    if direction == "forward" and plan.ep * plan.tp > 1 and dispatcher != "allgather":
        group = groups.ep if plan.ep > 1 else groups.tp
        counts = COUNT_BYTES * model.num_experts * plan.ep * plan.tp
        seconds += collective_time_s(profile, "all_gather", counts, group)
        moved += counts
    return PassCost(ep_s=seconds, ep_exposed_s=seconds, ep_bytes=moved)


def routed_experts(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    tokens: float,
    elem: int,
    dtype: str,
    groups: CommGroups,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost, float, float]:
    """(forward, backward, dgrad_s, wgrad_s) of the router, the token dispatcher
    (`ExecutionOptions.moe_dispatcher`) and the local experts of one MoE layer for one
    microbatch of ``tokens`` router tokens, on the rank with the most rows
    (`ExecutionOptions.moe_load_imbalance`; module docstring). FP8 runs add the
    quantization of the expert GEMM operands (`moe_experts.expert_fp8_quantize_s`); the
    fused grouped MLP (`ExecutionOptions.moe_fused_grouped_mlp`) runs the activation in
    GEMM epilogues, so no activation pass is priced."""
    h = model.hidden_size
    gated = model.activation == "swiglu"
    dispatcher = options.moe_dispatcher
    shape = moe_shape(model, plan, tokens, options.moe_load_imbalance)
    m, n1 = _rows(shape.rows_per_expert), _rows((2 if gated else 1) * shape.width)
    n2 = _rows(shape.width)
    router = _gemm3(profile, _rows(tokens), model.num_experts, h, dtype)
    fc1 = _gemm3(profile, m, n1, h, dtype)
    fc2 = _gemm3(profile, m, h, n2, dtype)
    expert_rows = shape.rows * plan.expert_tp
    fused = options.moe_fused_grouped_mlp
    act = {
        d: 0.0
        if fused
        else ops.activation_time_s(
            profile, expert_rows, shape.width, elem, gated=gated, direction=d
        )
        for d in ("forward", "backward")
    }
    if dtype == "fp8":
        quant_f, quant_b = expert_fp8_quantize_s(
            profile,
            rows=expert_rows,
            hidden=h,
            width=shape.width,
            gated=gated,
            elem=elem,
            local_experts=shape.local_experts,
            fused=fused,
            recipe=options.fp8_recipe,
        )
        act = {"forward": act["forward"] + quant_f, "backward": act["backward"] + quant_b}
    copies = ops.memory_bound_time_s(
        profile,
        dispatch_copy_bytes(shape, h, elem, dispatcher),
        num_ops=dispatch_copies(shape, dispatcher),
    )
    if dispatcher == "allgather" and plan.ep > 1:
        combine = allgather_combine_bytes(tokens, plan.ep, h, elem)
        copies += ops.memory_bound_time_s(profile, combine, num_ops=2)
    route = {
        d: ops.memory_bound_time_s(profile, router_kernel_bytes(tokens, model.num_experts, d))
        for d in ("forward", "backward")
    }
    e = shape.local_experts
    bias = {d: 0.0 for d in ("forward", "backward")}
    if model.add_bias_linear and not fused:
        bias = {d: expert_fc2_bias_time_s(profile, expert_rows, h, elem, e, d) for d in bias}
    forward_s = router[0] + route["forward"] + e * (fc1[0] + fc2[0]) + act["forward"] + copies
    forward_s += bias["forward"]
    dgrad = router[1] + route["backward"] + e * (fc1[1] + fc2[1]) + act["backward"] + copies
    dgrad += bias["backward"]
    wgrad = router[2] + e * (fc1[2] + fc2[2])
    forward = PassCost(compute_s=forward_s).plus(
        _collectives(profile, plan, shape, model, elem, groups, "forward", dispatcher)
    )
    backward = PassCost(compute_s=dgrad + wgrad).plus(
        _collectives(profile, plan, shape, model, elem, groups, "backward", dispatcher)
    )
    return forward, backward, dgrad, wgrad


def _rows(value: float) -> int:
    return max(math.ceil(value), 1)


def _gemm3(profile: HardwareProfile, m: int, n: int, k: int, dtype: str) -> tuple[float, ...]:
    """(forward, dgrad, wgrad) seconds of an (m x k) @ (k x n) GEMM and its gradients."""
    return (
        ops.gemm_time_s(profile, m, n, k, dtype),
        ops.gemm_time_s(profile, m, k, n, dtype),
        ops.gemm_time_s(profile, k, n, m, dtype),
    )


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
        unmet["ep"] = f"expert parallelism, got ep={plan.ep}"
    if options.moe_dispatcher not in ("alltoall", "flex"):
        unmet["dispatcher"] = f"the alltoall or flex dispatcher, got {options.moe_dispatcher}"
    if plan.recompute == "full":
        unmet["recompute"] = "no full recompute, got recompute full"
    if plan.pp > 1 and plan.vpp < 2:
        unmet["vpp"] = f"a virtual pipeline when pp > 1, got pp={plan.pp} vpp={plan.vpp}"
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
