"""Per-microbatch costs of the routed experts of one MoE layer on one rank, as Megatron-core
runs them: router, alltoall token dispatcher, grouped expert MLP, combine.

Source: Megatron-LM `megatron/core/transformer/moe/` (`router.py` `TopKRouter`,
`token_dispatcher.py` `MoEAlltoAllTokenDispatcher`, `experts.py` `TEGroupedMLP`,
`moe_utils.py` `permute` / `unpermute` / `sort_chunks_by_idxs`) with Transformer Engine's
`GroupedLinear` (`transformer_engine/pytorch/module/grouped_linear.py`).

Shapes: T tokens reach the MoE layer of a rank (T/tp with sequence parallelism); each picks
top_k experts, so the rank dispatches R = top_k·T rows (x the capacity factor when one is
set) of h elements (of ℓ elements in a latent MoE layer: `ModelSpec.expert_hidden_size`;
its h -> ℓ and ℓ -> h projections around the dispatch and combine are
`costmodel.runtimes.megatron.moe_latent`; the router stays on h). With balanced routing
every rank receives R rows back from the EP group (and etp·R after the expert-TP
all-gather), split evenly over its E/ep local experts; under dropless routing the most
loaded rank receives `ExecutionOptions.moe_load_imbalance` x R and sets the pace
(`moe_shape`).

Work per pass, in the order the dispatcher runs it (forward; backward mirrors it):
1. router: the gating GEMM [T, h] x [h, E] (bf16 in fp8 and fp4 jobs, `router_gemm_dtype`)
   and the fused top-k / score-function / aux-loss
   kernels over the [T, E] fp32 logits (`router_kernel_bytes`);
2. dispatch metadata: per-expert token counts all-gathered over the tp x ep group (one
   latency-bound collective, forward only) and copied to the host;
3. permutation 1 (tokens grouped by destination rank), the token all-to-all and the probs
   all-to-all (fp32, one per row), permutation 2 (``sort_chunks_by_idxs``: rows regrouped
   by local expert, only with more than one local expert); combine runs the inverse
   permutations around one all-to-all. Each permutation reads and writes R·h·e bytes
   (`dispatch_copy_bytes`);
4. experts: FC1, activation, FC2 per local expert. TE ``GroupedLinear`` issues one cuBLAS
   GEMM per expert, so each is timed with the rows its expert gets (small per-expert GEMMs
   run at the profile's efficiency for their size, and each pays one op overhead); with
   biased experts, the FC2 bias is added expert by expert
   (`costmodel.runtimes.megatron.unfused_costs.expert_fc2_bias_time_s`). TE's fused grouped
   MLP (`ExecutionOptions.moe_fused_grouped_mlp`) runs each projection and each of its
   gradients as one grouped GEMM kernel over every local expert
   (`transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py`, ``backward_grouped_mlp.py``:
   one CuTe DSL grouped GEMM per projection, the experts' split points read on the
   device), timed as one batched kernel of the local experts' matrices
   (`costmodel.compute.batched_gemm_time_s`: one op overhead, the efficiency of the whole
   kernel's work).

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

Host-side launches, their CUDA graph capture and the host floor are in
`costmodel.runtimes.megatron.moe_launches`; the 1F1B all-to-all overlap of MoE layers in
`costmodel.runtimes.megatron.moe_a2a_overlap`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.collectives import collective_time_s, split_all_to_all_time_s
from costmodel.compute import FP32_BYTES
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_quantization import operand_recipe
from costmodel.passes import CommGroups, PassCost
from costmodel.runtimes.megatron.moe_experts import expert_fp8_quantize_s
from costmodel.runtimes.megatron.moe_latent import latent_projection_s
from costmodel.runtimes.megatron.unfused_costs import expert_fc2_bias_time_s
from profiles.schema import HardwareProfile
from specs.model import ModelSpec
from specs.plan import ParallelPlan

ROUTING_MAP_BYTES = 1
COUNT_BYTES = 8
"""int64 token counts per expert (`routing_map.sum(dim=0).long()`)."""


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


def router_gemm_dtype(gemm_dtype: str) -> str:
    """Dtype of the router's gating GEMM in a job whose linear layers run in ``gemm_dtype``:
    bf16 under fp8 and fp4 GEMMs, else the job's own.

    Megatron-core's `RouterGatingLinearFunction` (moe_utils.py) calls Transformer
    Engine's ``general_gemm`` on the bf16 router weight and input directly, outside the
    quantizing modules, so the router never runs in the job's low-precision format;
    ``moe_router_dtype`` fp32 only sets the output (logits) dtype. fp64 routing
    (``torch.mm`` in fp64) is not priced (`router_kernel_bytes`)."""
    return "bf16" if gemm_dtype in ops.LOW_PRECISION_GEMM_DTYPES else gemm_dtype


def router_kernel_bytes(tokens: float, num_experts: int, direction: str) -> float:
    """Bytes of the fused router kernels over the [tokens, E] fp32 logits
    (`moe_utils.fused_topk_with_score_function`, `fused_compute_score_for_moe_aux_loss`).

    Forward: top-k with the score function reads the logits and writes the probabilities and
    the 1-byte routing map (4 + 4 + 1 per element); the aux-loss scores read the logits and
    write their scores (4 + 4). Backward: each of the two reads its output gradient and saved
    output and writes the logits gradient (12 per element each).

    The same bytes for every `specs.router.RouterSpec`: the score function, pre-softmax,
    the expert bias (one [E] vector), group-limited routing and the scaling factor run
    inside the one fused top-k kernel (Transformer Engine's
    `fused_topk_with_score_function` takes them all as arguments), and the logits are
    fp32 with or without `moe_router_dtype` fp32 (TE's router GEMM writes fp32 logits from
    bf16 inputs, `RouterGatingLinearFunction` in moe_utils.py). Left unpriced, for want of a
    source that measures them: the per-sequence reshapes of ``seq_aux_loss``, the aux-loss
    kernel that ``none`` skips, sinkhorn's iterations, the expert-bias update after each
    global batch, and fp64 routing (a `torch.mm` in fp64)."""
    per_element = 17 + ROUTING_MAP_BYTES if direction == "forward" else 24
    return per_element * tokens * num_experts


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
    size = shape.rows * model.expert_hidden_size * elem
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
        hidden_bytes = gathered * model.expert_hidden_size * elem
        routing = gathered * model.num_experts * (FP32_BYTES + ROUTING_MAP_BYTES)
        combine = gathered * model.expert_hidden_size * FP32_BYTES  # reduce-scattered in fp32
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
    quantization of the expert GEMM operands (`moe_experts.expert_fp8_quantize_s`); a
    latent MoE layer adds its two projections (`moe_latent.latent_projection_s`); the
    fused grouped MLP (`ExecutionOptions.moe_fused_grouped_mlp`) runs the activation in
    GEMM epilogues, so no activation pass is priced."""
    h, row_width = model.hidden_size, model.expert_hidden_size
    gated = model.activation == "swiglu"
    dispatcher = options.moe_dispatcher
    shape = moe_shape(model, plan, tokens, options.moe_load_imbalance)
    m, n1 = _rows(shape.rows_per_expert), _rows((2 if gated else 1) * shape.width)
    n2 = _rows(shape.width)
    router = _gemm3(profile, _rows(tokens), model.num_experts, h, router_gemm_dtype(dtype))
    fused = options.moe_fused_grouped_mlp
    e = shape.local_experts
    fc1 = expert_gemm3(profile, e, m, n1, row_width, dtype, fused=fused)
    fc2 = expert_gemm3(profile, e, m, row_width, n2, dtype, fused=fused)
    expert_rows = shape.rows * plan.expert_tp
    act = {
        d: 0.0
        if fused
        else ops.activation_time_s(
            profile, expert_rows, shape.width, elem, gated=gated, direction=d
        )
        for d in ("forward", "backward")
    }
    recipe = None
    if dtype in ops.LOW_PRECISION_GEMM_DTYPES:
        recipe = operand_recipe(dtype, options.fp8_recipe)
        quant_f, quant_b = expert_quantize_s(model, plan, profile, tokens, elem, dtype, options)
        act = {"forward": act["forward"] + quant_f, "backward": act["backward"] + quant_b}
    copies = ops.memory_bound_time_s(
        profile,
        dispatch_copy_bytes(shape, row_width, elem, dispatcher),
        num_ops=dispatch_copies(shape, dispatcher),
    )
    if dispatcher == "allgather" and plan.ep > 1:
        combine = allgather_combine_bytes(tokens, plan.ep, row_width, elem)
        copies += ops.memory_bound_time_s(profile, combine, num_ops=2)
    route = {
        d: ops.memory_bound_time_s(profile, router_kernel_bytes(tokens, model.num_experts, d))
        for d in ("forward", "backward")
    }
    bias = {d: 0.0 for d in ("forward", "backward")}
    if model.add_bias_linear and not fused:
        bias = {
            d: expert_fc2_bias_time_s(profile, expert_rows, row_width, elem, e, d) for d in bias
        }
    latent = latent_projection_s(profile, model, tokens, elem, dtype, recipe)
    forward_s = router[0] + route["forward"] + fc1[0] + fc2[0] + act["forward"] + copies
    forward_s += bias["forward"] + latent[0]
    dgrad = router[1] + route["backward"] + fc1[1] + fc2[1] + act["backward"] + copies
    dgrad += bias["backward"] + latent[1]
    wgrad = router[2] + fc1[2] + fc2[2] + latent[2]
    forward = PassCost(compute_s=forward_s).plus(
        _collectives(profile, plan, shape, model, elem, groups, "forward", dispatcher)
    )
    backward = PassCost(compute_s=dgrad + wgrad).plus(
        _collectives(profile, plan, shape, model, elem, groups, "backward", dispatcher)
    )
    return forward, backward, dgrad, wgrad


def expert_quantize_s(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    tokens: float,
    elem: int,
    dtype: str,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    *,
    fc2_saves_input: bool = False,
    fc1_saves_input: bool = False,
) -> tuple[float, float]:
    """(forward, backward) seconds of quantizing the routed experts' GEMM operands of one
    microbatch of ``tokens`` router tokens (`moe_experts.expert_fp8_quantize_s` on the
    `moe_shape` of the pacing rank); 0 unless the job runs fp8 or fp4 GEMMs.
    ``fc2_saves_input``, ``fc1_saves_input``: FC2, FC1 saves its 16-bit input
    (`costmodel.saved_inputs.expert_fc2_saves_input`, ``expert_fc1_saves_input``, applied
    by the caller)."""
    if dtype not in ops.LOW_PRECISION_GEMM_DTYPES:
        return 0.0, 0.0
    shape = moe_shape(model, plan, tokens, options.moe_load_imbalance)
    return expert_fp8_quantize_s(
        profile,
        rows=shape.rows * plan.expert_tp,
        hidden=model.expert_hidden_size,
        width=shape.width,
        gated=model.activation == "swiglu",
        elem=elem,
        local_experts=shape.local_experts,
        fused=options.moe_fused_grouped_mlp,
        recipe=operand_recipe(dtype, options.fp8_recipe),
        fc2_saves_input=fc2_saves_input,
        fc1_saves_input=fc1_saves_input,
    )


def _rows(value: float) -> int:
    return max(math.ceil(value), 1)


def expert_gemm3(
    profile: HardwareProfile, experts: int, m: int, n: int, k: int, dtype: str, *, fused: bool
) -> tuple[float, float, float]:
    """(forward, dgrad, wgrad) seconds of one expert projection, an (m x k) @ (k x n) GEMM
    on each of ``experts`` local experts, over all of them: one GEMM per expert (TE
    ``GroupedLinear``), or with ``fused`` one grouped kernel per direction over every
    expert's matrix (the fused grouped MLP; module docstring, step 4)."""
    if not fused:
        forward, dgrad, wgrad = _gemm3(profile, m, n, k, dtype)
        return experts * forward, experts * dgrad, experts * wgrad
    return (
        ops.batched_gemm_time_s(profile, experts, m, n, k, dtype),
        ops.batched_gemm_time_s(profile, experts, m, k, n, dtype),
        ops.batched_gemm_time_s(profile, experts, k, n, m, dtype),
    )


def _gemm3(
    profile: HardwareProfile, m: int, n: int, k: int, dtype: str
) -> tuple[float, float, float]:
    """(forward, dgrad, wgrad) seconds of an (m x k) @ (k x n) GEMM and its gradients."""
    return (
        ops.gemm_time_s(profile, m, n, k, dtype),
        ops.gemm_time_s(profile, m, k, n, dtype),
        ops.gemm_time_s(profile, k, n, m, dtype),
    )
