"""Per-microbatch costs of one transformer layer (and of the embedding and output layer) on
one rank: compute, and the TP / CP / EP communication with the part of it left exposed.

Shapes (Megatron-LM, megatron-facts.md §6-§7): a microbatch of b sequences of length s
gives T = b·s/cp tokens on a rank. Column-parallel GEMMs (QKV, FC1) produce 1/tp of the
output columns, row-parallel GEMMs (output projection, FC2) consume 1/tp of the input
columns. Norms and residual adds run on T/tp tokens with sequence parallelism, T without.
Every GEMM runs three times (forward, dgrad, wgrad: `costmodel.flops`), each timed with its
own shape. GQA keeps max(g/tp, 1) key/value heads per rank.

Communication per layer (size S = T·h·e bytes, the full activation):
- TP: forward 2 all-reduces of S without SP, 2 all-gathers + 2 reduce-scatters with SP;
  the same in backward (§6). Exposed unless `tp_comm_overlap`, which runs Transformer
  Engine's userbuffers overlaps (`costmodel.runtimes.megatron.userbuffers`): the
  collectives split with their GEMMs into chunks, priced per the framework's userbuffers
  methods (`ExecutionOptions.tp_overlap_rs_method`, ``tp_overlap_bulk_sm_margin``). The
  SP backward re-gather of the column-parallel input runs asynchronously under dgrad in
  Megatron and is not counted without the overlap.
- CP (`cp_comm_type`): ``p2p`` rotates K/V chunks around the ring in cp-1 steps under the
  attention kernel, exposed only beyond the attention time; backward moves K/V and dK/dV
  (twice the bytes). ``all_gather`` gathers K/V before attention (and reduce-scatters
  dK/dV in backward), all exposed.
- EP (MoE layers, alltoall dispatcher): dispatch and combine all-to-alls over the EP
  group, forward 2 and backward 2, each of top_k·tokens·h·e bytes per rank (x capacity
  factor), the probs all-to-all, the token-count all-gather, plus an all-gather /
  reduce-scatter over expert TP when etp > 1; all exposed. Router, permutations and the
  per-expert GEMMs: `costmodel.runtimes.megatron.moe_costs`, which also sets the host
  floor of a MoE layer pass (`ExecutionOptions.moe_host_launch_s`) and, with
  `ExecutionOptions.moe_a2a_overlap`, the part of the EP time the 1F1B overlap leaves exposed.

Recompute: selective reruns the forward of its modules in backward (the attention core and
its CP exchange by default; per module: `costmodel.runtimes.megatron.saver_costs`); full
reruns the whole layer forward including its collectives. CPU activation offloading adds
the copy time its layer's compute does not hide (`saver_costs.offload_exposed_s`).

Framework conventions come from `costmodel.execution.ExecutionOptions`: the attention
kernel, the fused or unfused rotary embedding (``rope_fusion``,
`costmodel.runtimes.megatron.unfused_costs`), and whether linear biases ride in the GEMM
epilogues (``bias_fusion``; without it
the QKV bias is a separate add and every bias gradient a separate reduction,
`costmodel.compute.bias_time_s`). The materialized attention path also copies its
context layer from [b, heads, s, d] back to [s, b, heads·d] (``.permute().contiguous()``,
read and write) and, in backward, concatenates the query, key and value gradients into the
fused QKV gradient (the backward of ``torch.split``): Megatron-LM `ParallelAttention`
(2021) and `CoreAttention` (the local, non-TE path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.collectives import collective_time_s, ring_exchange_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.flops import (
    attention_projection_forward_flops_per_token,
    core_attention_forward_flops_per_token,
)
from costmodel.memory_allowances import Fp8Recipe
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.fp8_scaling import amax_reduction_pair
from costmodel.runtimes.megatron.moe_costs import (
    WHOLE_MOE_SCOPES,
    a2a_overlap_applies,
    a2a_overlapped_passes,
    a2a_paired_fraction,
    captured_moe_launches,
    flex_comm_sm_share,
    host_bound_s,
    moe_host_launches,
    moe_shape,
    pre_sync_launches,
    routed_experts,
)
from costmodel.runtimes.megatron.moe_experts import forward_host_floor_s
from costmodel.runtimes.megatron.saver_costs import (
    layer_offload_exposed_s,
    mla_up_projection_share,
    selective_rerun,
)
from costmodel.runtimes.megatron.unfused_costs import rope_time_s
from costmodel.runtimes.megatron.userbuffers import Shape, sm_count, tp_overlap_pair_s
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import mla_head_dims, padded_vocab_size
from specs.plan import ParallelPlan

AttentionKernel = ops.AttentionKernelName


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerCost:
    """One transformer layer, one microbatch, one rank."""

    forward: PassCost
    """Forward pass."""
    backward: PassCost
    """Backward pass (compute = dgrad + wgrad + backward element-wise ops)."""
    recompute: PassCost
    """Extra forward work the backward pass reruns under the plan's recompute mode
    (selective: the attention core; full: the whole forward; none: zero). The caller
    applies it only to layers that are recomputed."""
    dgrad_s: float
    """Input-gradient GEMMs and backward element-wise ops (part of backward.compute_s)."""
    wgrad_s: float
    """Weight-gradient GEMMs (part of backward.compute_s)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Shape:
    """What one rank sees for one microbatch."""

    tokens: float
    norm_tokens: float
    seq: int
    micro_batch: int
    cp: int
    tp: int
    sp: bool
    elem: int
    dtype: str
    precision: str


def _shape(job: TrainingJob, plan: ParallelPlan) -> _Shape:
    tokens = plan.micro_batch_size * job.seq_length / plan.cp
    sp = plan.sequence_parallel and plan.tp > 1
    return _Shape(
        tokens=tokens,
        norm_tokens=tokens / plan.tp if sp else tokens,
        seq=job.seq_length,
        micro_batch=plan.micro_batch_size,
        cp=plan.cp,
        tp=plan.tp,
        sp=sp,
        elem=ops.element_bytes(job.precision),
        dtype=ops.gemm_dtype(job.precision),
        precision=job.precision,
    )


def _rows(value: float) -> int:
    return max(math.ceil(value), 1)


def _gemm3(profile: HardwareProfile, x: _Shape, m: float, n: float, k: float) -> tuple[float, ...]:
    """(forward, dgrad, wgrad) seconds of an (m x k) @ (k x n) GEMM and its gradients."""
    mi, ni, ki = _rows(m), _rows(n), _rows(k)
    return (
        ops.gemm_time_s(profile, mi, ni, ki, x.dtype),
        ops.gemm_time_s(profile, mi, ki, ni, x.dtype),
        ops.gemm_time_s(profile, ki, ni, mi, x.dtype),
    )


def _tp_pair(
    profile: HardwareProfile,
    plan: ParallelPlan,
    x: _Shape,
    h: int,
    groups: CommGroups,
    first: Shape,
    second: Shape | None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost]:
    """TP collectives around one column-parallel / row-parallel GEMM pair (§6): one
    all-reduce each way without SP (after the row-parallel GEMM forward, of the
    column-parallel input gradient backward); with SP an all-gather before the
    column-parallel GEMM and a reduce-scatter after the row-parallel one, each way.
    ``first`` and ``second`` are the pair's GEMM shapes (``second`` None when the layer
    has no row-parallel GEMM of its own, MLA here: its reduce-scatter is exposed).

    `ExecutionOptions.tp_dgrad_overlap` of ``options``: without `tp_comm_overlap`, the
    backward reduction of the column-parallel input gradient (reduce-scatter with SP,
    all-reduce without) is launched asynchronously and waited for after the layer's
    weight-gradient GEMM, so only max(0, comm - wgrad) of it is exposed (Transformer
    Engine `_LayerNormLinear.backward` and `_Linear.backward`, "Overlap dgrad-RS/AR with
    wgrad"; Megatron-LM `LinearWithGradAccumulationAndAsyncCommunication`); the
    all-gather of the row-parallel output gradient before its dgrad stays exposed."""
    if x.tp < 2:
        return ZERO, ZERO
    size = x.tokens * h * x.elem
    if x.sp:
        ag = collective_time_s(profile, "all_gather", size, groups.tp)
        rs = collective_time_s(profile, "reduce_scatter", size, groups.tp)
        comms: tuple[float, ...] = (ag, rs)
    else:
        comms = (collective_time_s(profile, "all_reduce", size, groups.tp),)
    total = sum(comms)
    if plan.tp_comm_overlap and x.sp:
        fwd, bwd = tp_overlap_pair_s(
            profile, x.tp, x.dtype, size, groups.tp, first, second, options=options
        )
    else:
        fwd = bwd = total
        if options.tp_dgrad_overlap:
            wgrad = _gemm3(profile, x, *first)[2]
            bwd = total - comms[-1] + max(0.0, comms[-1] - wgrad)
    return tuple(  # type: ignore[return-value]
        PassCost(tp_s=total, tp_exposed_s=exposed, tp_bytes=len(comms) * size)
        for exposed in (fwd, bwd)
    )


def _attention_dims(model: ModelSpec, tp: int) -> tuple[float, float, int]:
    """(query width, key-or-value width per rank, head dim the attention kernel sees).

    MLA: queries and keys have d_qk + d_rope per head, values d_v; the key/value width is
    their mean, so 2 x it is the K plus V width."""
    if model.uses_mla:
        d_qk, d_rope, d_v = mla_head_dims(model)
        heads = model.num_attention_heads / tp
        return heads * (d_qk + d_rope), heads * (d_qk + d_rope + d_v) / 2, d_qk + d_rope
    d = model.head_dim
    q = model.num_attention_heads * d / tp
    kv = max(model.query_groups // tp, 1) * d
    return q, kv, d


def _attention(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: _Shape,
    groups: CommGroups,
    options: ExecutionOptions,
) -> tuple[PassCost, PassCost, PassCost, float, float]:
    """Attention block: (forward, backward, rerun forward of its recompute modules
    ``core_attn`` and ``mla_up_proj``, dgrad_s, wgrad_s)."""
    kernel = options.attention
    h = model.hidden_size
    q, kv, head_dim = _attention_dims(model, x.tp)
    if model.uses_mla:
        # MLA's chain of small projections, timed as one GEMM of the same FLOPs.
        width = attention_projection_forward_flops_per_token(model) / (2 * h * x.tp)
        qkv_shape: Shape = (x.tokens, width, h)
        proj_shape: Shape | None = None
        qkv, proj = _gemm3(profile, x, *qkv_shape), (0.0, 0.0, 0.0)
    else:
        width = 0.0
        qkv_shape, proj_shape = (x.tokens, q + 2 * kv, h), (x.tokens, h, q)
        qkv, proj = _gemm3(profile, x, *qkv_shape), _gemm3(profile, x, *proj_shape)
    core_flops = core_attention_forward_flops_per_token(model, job.seq_length) * x.tokens / x.tp
    core = {}
    for direction in ("forward", "backward"):
        core[direction] = sum(
            ops.attention_core_time_s(
                profile,
                causal_forward_flops=core_flops * share,
                batch_heads=x.micro_batch * model.num_attention_heads / x.tp,
                seq_q=x.seq / x.cp,
                seq_kv=seq_kv if kernel == "flash" else x.seq,
                head_dim=head_dim,
                precision=x.precision,
                kernel=kernel,
                direction=direction,
            )
            for share, seq_kv in cp_attention_steps(plan, x.seq)
        )
    rope = model.position_embedding == "rope"
    ew_fwd, ew_bwd = _norm_and_residual(profile, x, h, options)
    if rope:
        fused = options.rope_fusion
        ew_fwd += rope_time_s(profile, x.tokens, q + kv, x.elem, "forward", fused=fused)
        ew_bwd += rope_time_s(profile, x.tokens, q + kv, x.elem, "backward", fused=fused)
    if model.qk_layernorm and not model.uses_mla:
        qk_f, qk_b = qk_norm_time_s(profile, x.tokens, q + kv, x.elem)
        ew_fwd, ew_bwd = ew_fwd + qk_f, ew_bwd + qk_b
    if kernel == "materialized":
        ew_fwd += ops.memory_bound_time_s(profile, 2 * x.elem * x.tokens * q)
        ew_bwd += ops.memory_bound_time_s(profile, 2 * x.elem * x.tokens * (q + 2 * kv))
    if model.add_bias_linear and not options.bias_fusion:
        ew_fwd += ops.bias_time_s(profile, x.tokens, q + 2 * kv, x.elem, "forward")
        ew_bwd += ops.bias_time_s(profile, x.tokens, q + 2 * kv, x.elem, "backward")
        ew_bwd += ops.bias_time_s(profile, x.norm_tokens, h, x.elem, "backward")
    qkv_width = width if model.uses_mla else q + 2 * kv
    row_in = 0.0 if model.uses_mla else q
    fp8_f, fp8_b = _fp8_pair_s(
        profile, x, h, qkv_width, row_in, options.fp8_recipe, options.cudnn_norm
    )
    ew_fwd += fp8_f
    ew_bwd += fp8_b
    tp_f, tp_b = _tp_pair(profile, plan, x, h, groups, qkv_shape, proj_shape, options)
    amax_f, amax_b = _fp8_amax_pair(profile, x, groups, options.fp8_recipe, row_in)
    tp_f, tp_b = tp_f.plus(amax_f), tp_b.plus(amax_b)
    cp_f, cp_b = _cp_exchange(profile, plan, x, kv, groups.cp, core)
    merge_fwd, merge_bwd = _cp_step_merge_s(profile, plan, x, q, kv)
    ew_fwd += merge_fwd
    ew_bwd += merge_bwd
    dgrad = qkv[1] + proj[1] + core["backward"] + ew_bwd
    wgrad = qkv[2] + proj[2]
    forward = PassCost(compute_s=qkv[0] + proj[0] + core["forward"] + ew_fwd).plus(tp_f).plus(cp_f)
    backward = PassCost(compute_s=dgrad + wgrad).plus(tp_b).plus(cp_b)
    rerun = {
        "core_attn": PassCost(compute_s=core["forward"]).plus(cp_f),
        "mla_up_proj": PassCost(
            compute_s=mla_up_projection_share(model) * qkv[0]
            + (
                rope_time_s(profile, x.tokens, q + kv, x.elem, "forward", fused=options.rope_fusion)
                if rope
                else 0
            )
        ),
    }
    return forward, backward, rerun, dgrad, wgrad


def fp8_pair_quantize_s(
    profile: HardwareProfile,
    job: TrainingJob,
    plan: ParallelPlan,
    h: int,
    column_out: float,
    row_in: float,
    *,
    recipe: Fp8Recipe,
    cudnn_norm: bool = False,
) -> tuple[float, float]:
    """FP8 quantization of one column-parallel / row-parallel linear pair (QKV and output
    projection, or FC1 and FC2) under Transformer Engine's ``recipe`` (forward, backward),
    in seconds; 0 unless the job runs fp8 GEMMs.

    Forward quantizes the column-parallel input where the norm of the ``LayerNormLinear``
    writes it (with sequence parallelism on T/tp tokens, before the fp8 all-gather), on the
    path `costmodel.compute.norm_quantization` gives for the recipe and the norm backend
    (``cudnn_norm``: `ExecutionOptions.cudnn_norm`), and the row-parallel input (T x
    ``row_in`` per rank). Backward quantizes
    both output gradients: the column-parallel one (T x ``column_out``) and the row-parallel
    one (T/tp x h with sequence parallelism); bytes per element and the current-scaling
    amax pass in `costmodel.compute.fp8_quantize_time_s`, the current-scaling amax
    all-reduce in `costmodel.runtimes.megatron.fp8_scaling`. ``column_out`` and ``row_in``
    are per-rank widths. The fp8 weight copies (and their amax) are made on the first
    microbatch of an iteration (TE ``is_first_microbatch``, the cached weight workspace)
    or after the optimizer step (``fp8_param``): not counted."""
    x = _shape(job, plan)
    return _fp8_pair_s(profile, x, h, column_out, row_in, recipe, cudnn_norm)


def _fp8_pair_s(
    profile: HardwareProfile,
    x: _Shape,
    h: int,
    column_out: float,
    row_in: float,
    recipe: Fp8Recipe,
    cudnn_norm: bool,
) -> tuple[float, float]:
    if x.dtype != "fp8":
        return 0.0, 0.0

    def quantize(elements: float, norm: ops.NormQuantization | None = None) -> float:
        return ops.fp8_quantize_time_s(profile, elements, x.elem, recipe=recipe, norm=norm)

    path = ops.norm_quantization(recipe, cudnn_norm=cudnn_norm, rows=x.norm_tokens, hidden=h)
    forward = quantize(x.norm_tokens * h, norm=path)
    backward = quantize(x.tokens * column_out)
    if row_in > 0:
        forward += quantize(x.tokens * row_in)
        backward += quantize(x.norm_tokens * h)
    return forward, backward


def _fp8_amax_pair(
    profile: HardwareProfile, x: _Shape, groups: CommGroups, recipe: Fp8Recipe, row_in: float
) -> tuple[PassCost, PassCost]:
    if x.dtype != "fp8":
        return ZERO, ZERO
    return amax_reduction_pair(
        profile, recipe=recipe, sequence_parallel=x.sp, tp_group=groups.tp, row_parallel=row_in > 0
    )


def cp_attention_steps(plan: ParallelPlan, seq: int) -> tuple[tuple[float, int], ...]:
    """(share of the rank's causal attention work, K/V length of its kernel) per kind of
    fused-attention kernel one rank runs for one sequence of length ``seq``.

    Without context parallelism (or with the all-gather exchange, one kernel over the
    gathered K/V): one kernel, indexed by s/cp. Ring (``p2p``) context parallelism with the
    causal load balance of Transformer Engine's `AttnFuncWithCPAndKVP2P`
    (`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`):
    each rank holds chunks r and 2·cp-1-r of 2·cp chunks (s/cp tokens in all) and runs one
    kernel per ring step, every step the same work. Step 0 is causal over its own K/V
    (length s/cp); of the other cp-1 steps, those whose K/V come from an earlier rank attend
    all local queries to the first half of that K/V (length s/(2·cp)), the others attend
    the second local half of the queries to all of it (length s/cp); over the ranks, half
    of the steps are of each kind. Each kernel's throughput is read at its K/V length
    (`costmodel.compute.attention_core_time_s`), so short chunks run at the curve's lower
    rates.
    """
    cp = plan.cp
    if cp < 2 or plan.cp_comm_type != "p2p":
        return ((1.0, max(seq // cp, 1)),)
    rest = (cp - 1) / cp
    return (
        (1 / cp + rest / 2, max(seq // cp, 1)),
        (rest / 2, max(seq // (2 * cp), 1)),
    )


def _cp_step_merge_s(
    profile: HardwareProfile, plan: ParallelPlan, x: _Shape, q_width: float, kv_width: float
) -> tuple[float, float]:
    """Memory-bound merges of the per-step partial results of ring (``p2p``) context
    parallelism (forward, backward), in seconds.

    Transformer Engine's `AttnFuncWithCPAndKVP2P`
    (`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`) runs
    the attention of the local queries against each of the cp K/V chunks as a separate
    kernel and, after each step, merges the step's partial output into the running output
    with the log-sum-exp correction (`flash_attn_fwd_out_correction`: read the step output
    and the running output, write the running output: 3·T·q·e bytes per step). Backward
    accumulates each step's dQ into dQ (3·T·q·e) and each step's dK/dV into the dK/dV that
    travels the ring (3·T·2·kv·e) per step. T = b·s/cp tokens, q and kv the per-rank query
    and key/value widths, e the activation element size. The all-gather variant computes
    one attention over the gathered K/V and has no merges.
    """
    if plan.cp < 2 or plan.cp_comm_type != "p2p":
        return 0.0, 0.0
    step_fwd_bytes = 3 * x.tokens * q_width * x.elem
    step_bwd_bytes = 3 * x.tokens * (q_width + 2 * kv_width) * x.elem
    return (
        plan.cp * ops.memory_bound_time_s(profile, step_fwd_bytes),
        plan.cp * ops.memory_bound_time_s(profile, step_bwd_bytes),
    )


def _cp_exchange(
    profile: HardwareProfile,
    plan: ParallelPlan,
    x: _Shape,
    kv_width: float,
    group: GroupPlacement,
    core: dict[str, float],
) -> tuple[PassCost, PassCost]:
    """Context-parallel K/V exchange (forward, backward).

    ``p2p``: Transformer Engine's `AttnFuncWithCPAndKVP2P` runs cp attention steps, one
    per K/V chunk; the send of the next chunk runs under the current step's attention, and
    the next step waits for it. Each of the cp - 1 sends is therefore hidden only by one
    step's attention (a cp-th of the core time), not by the whole attention."""
    if plan.cp < 2:
        return ZERO, ZERO
    chunk = 2 * x.tokens * kv_width * x.elem  # K and V of this rank's tokens
    if plan.cp_comm_type == "p2p":
        fwd = ring_exchange_time_s(profile, chunk, plan.cp - 1, group)
        bwd = ring_exchange_time_s(profile, 2 * chunk, plan.cp - 1, group)
        fwd_bytes, bwd_bytes = (plan.cp - 1) * chunk, 2 * (plan.cp - 1) * chunk
        steps = plan.cp - 1
        fwd_exposed = steps * max(0.0, fwd / steps - core["forward"] / plan.cp)
        bwd_exposed = steps * max(0.0, bwd / steps - core["backward"] / plan.cp)
    else:
        total = plan.cp * chunk
        fwd = collective_time_s(profile, "all_gather", total, group)
        bwd = fwd + collective_time_s(profile, "reduce_scatter", total, group)
        fwd_bytes, bwd_bytes = total, 2 * total
        fwd_exposed, bwd_exposed = fwd, bwd
    return (
        PassCost(cp_s=fwd, cp_exposed_s=fwd_exposed, cp_bytes=fwd_bytes),
        PassCost(cp_s=bwd, cp_exposed_s=bwd_exposed, cp_bytes=bwd_bytes),
    )


def _mlp(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: _Shape,
    groups: CommGroups,
    ffn: int,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost, float, float]:
    """A TP-sharded MLP of inner size ``ffn`` over all tokens (dense MLP or shared expert).

    Without ``bias_fusion`` the FC1 and FC2 bias gradients are reductions of their output
    gradients (the forward adds ride in the fused bias-GeLU and bias-dropout-add)."""
    if ffn == 0:
        return ZERO, ZERO, 0.0, 0.0
    h, gated = model.hidden_size, model.activation == "swiglu"
    width = ffn / x.tp
    fc1_shape: Shape = (x.tokens, (2 if gated else 1) * width, h)
    fc2_shape: Shape = (x.tokens, h, width)
    fc1, fc2 = _gemm3(profile, x, *fc1_shape), _gemm3(profile, x, *fc2_shape)
    act_f = ops.activation_time_s(
        profile, x.tokens, width, x.elem, gated=gated, direction="forward"
    )
    act_b = ops.activation_time_s(
        profile, x.tokens, width, x.elem, gated=gated, direction="backward"
    )
    if model.add_bias_linear and not options.bias_fusion:
        fc1_width = (2 if gated else 1) * width
        act_b += ops.bias_time_s(profile, x.tokens, fc1_width, x.elem, "backward")
        act_b += ops.bias_time_s(profile, x.norm_tokens, h, x.elem, "backward")
    recipe = options.fp8_recipe
    fp8_f, fp8_b = _fp8_pair_s(
        profile, x, h, (2 if gated else 1) * width, width, recipe, options.cudnn_norm
    )
    act_f, act_b = act_f + fp8_f, act_b + fp8_b
    tp_f, tp_b = _tp_pair(profile, plan, x, h, groups, fc1_shape, fc2_shape, options)
    amax_f, amax_b = _fp8_amax_pair(profile, x, groups, recipe, width)
    tp_f, tp_b = tp_f.plus(amax_f), tp_b.plus(amax_b)
    dgrad, wgrad = fc1[1] + fc2[1] + act_b, fc1[2] + fc2[2]
    forward = PassCost(compute_s=fc1[0] + fc2[0] + act_f).plus(tp_f)
    return forward, PassCost(compute_s=dgrad + wgrad).plus(tp_b), dgrad, wgrad


def qk_norm_time_s(
    profile: HardwareProfile, tokens: float, qk_width: float, elem: int
) -> tuple[float, float]:
    """(forward, backward) seconds of the query and key norms (``ModelSpec.qk_layernorm``)
    over ``tokens`` rows of the rank's ``qk_width`` = query plus key width.

    Megatron-core applies ``q_layernorm`` and ``k_layernorm`` (Transformer Engine RMSNorm,
    ``TENorm``, over each head's ``head_dim``) to the split query and key before RoPE
    (``megatron/core/transformer/attention.py``, ``get_query_key_value_tensors``); each is
    one norm kernel per pass (`costmodel.compute.norm_time_s`)."""
    return (
        ops.norm_time_s(profile, tokens, qk_width, elem, "forward"),
        ops.norm_time_s(profile, tokens, qk_width, elem, "backward"),
    )


def _norm_and_residual(
    profile: HardwareProfile, x: _Shape, h: int, options: ExecutionOptions
) -> tuple[float, float]:
    """One pre-norm and one residual (bias-dropout-add) of a block: (forward, backward)
    seconds, with the framework's norm backward and dropout (`costmodel.execution`)."""
    two_pass, dropout = options.two_pass_norm_backward, options.hidden_dropout
    fwd = ops.norm_time_s(profile, x.norm_tokens, h, x.elem, "forward")
    fwd += ops.residual_time_s(profile, x.norm_tokens, h, x.elem, "forward", dropout=dropout)
    bwd = ops.norm_time_s(profile, x.norm_tokens, h, x.elem, "backward", two_pass_backward=two_pass)
    bwd += ops.residual_time_s(profile, x.norm_tokens, h, x.elem, "backward", dropout=dropout)
    return fwd, bwd


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerPasses:
    """One layer's forward and backward on one rank for one microbatch, before the plan's
    recompute and activation offloading are applied: what every per-module recompute set
    of the same layer shares (`layer_cost_from_passes` adds each set's rerun)."""

    forward: PassCost
    """Forward pass."""
    backward: PassCost
    """Backward pass without recompute."""
    rerun: dict[str, PassCost]
    """Forward passes of the modules selective recompute can rerun, by module name."""
    dgrad_s: float
    """As `LayerCost.dgrad_s`."""
    wgrad_s: float
    """As `LayerCost.wgrad_s`."""
    norm_tokens: float
    """Token rows of the layer's norms and element-wise ops on this rank."""
    elem: int
    """Bytes per activation element."""


def layer_passes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    is_moe: bool,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> LayerPasses:
    """The passes of one dense (``is_moe=False``) or MoE layer (`layer_cost` without the
    recompute and offloading terms); none of them depends on ``plan.recompute_modules``."""
    comm = groups or _intra_groups(plan)
    x = _shape(job, plan)
    att_f, att_b, rerun, dgrad, wgrad = _attention(model, job, plan, profile, x, comm, options)
    extra_f, extra_b = _norm_and_residual(profile, x, model.hidden_size, options)
    if is_moe:
        mlp_f, mlp_b, mlp_d, mlp_w = routed_experts(
            model, plan, profile, x.norm_tokens, x.elem, x.dtype, comm, options
        )
        routed_forward_s = mlp_f.duration_s
        shared = model.moe_shared_expert_size
        sh_f, sh_b, sh_d, sh_w = _mlp(model, plan, profile, x, comm, shared, options)
        rerun["shared_experts"] = sh_f
        mlp_f, mlp_b = mlp_f.plus(sh_f), mlp_b.plus(sh_b)
        mlp_d, mlp_w = mlp_d + sh_d, mlp_w + sh_w
        rerun["moe"] = mlp_f
    else:
        ffn = model.ffn_hidden_size
        mlp_f, mlp_b, mlp_d, mlp_w = _mlp(model, plan, profile, x, comm, ffn, options)
        rerun["mlp"] = mlp_f
    forward = att_f.plus(mlp_f).plus(PassCost(compute_s=extra_f))
    backward = att_b.plus(mlp_b).plus(PassCost(compute_s=extra_b))
    if is_moe and a2a_overlap_applies(plan, options):
        paired = a2a_paired_fraction(
            plan.pp, plan.vpp, plan.num_microbatches(job.global_batch_size)
        )
        experts, share = (mlp_f, mlp_b, mlp_w), flex_comm_sm_share(sm_count(profile), options)
        forward, backward = a2a_overlapped_passes(forward, backward, experts, paired, share)
    if is_moe:
        host_f, host_b = _moe_host_floor(
            model, plan, x, forward, backward, options, routed_forward_s
        )
        forward, backward = forward.plus(host_f), backward.plus(host_b)
        extra_b += host_b.compute_s
    return LayerPasses(
        forward=forward,
        backward=backward,
        rerun=rerun,
        dgrad_s=dgrad + mlp_d + extra_b,
        wgrad_s=wgrad + mlp_w,
        norm_tokens=x.norm_tokens,
        elem=x.elem,
    )


def layer_cost_from_passes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    passes: LayerPasses,
    *,
    is_moe: bool,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> LayerCost:
    """`LayerCost` of a layer from its `layer_passes`: the rerun of the plan's recompute
    mode (selective: its modules, `saver_costs.selective_rerun`; full: the whole forward)
    and the copy time activation offloading leaves exposed
    (`saver_costs.layer_offload_exposed_s`)."""
    forward, backward = passes.forward, passes.backward
    recompute = ZERO if plan.recompute == "none" else forward
    if plan.recompute == "selective":
        recompute = selective_rerun(
            model,
            job,
            plan,
            profile,
            is_moe=is_moe,
            rerun=passes.rerun,
            norm_tokens=passes.norm_tokens,
            elem=passes.elem,
        )
    if plan.offloads_activations:
        off_f, off_b = layer_offload_exposed_s(
            model,
            job,
            plan,
            profile,
            is_moe=is_moe,
            forward=forward,
            backward=backward,
            fp8_recipe=options.fp8_recipe,
        )
        forward = forward.plus(PassCost(compute_s=off_f))
        backward = backward.plus(PassCost(compute_s=off_b))
    return LayerCost(
        forward=forward,
        backward=backward,
        recompute=recompute,
        dgrad_s=passes.dgrad_s,
        wgrad_s=passes.wgrad_s,
    )


def layer_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    is_moe: bool,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> LayerCost:
    """Costs of one dense (``is_moe=False``) or MoE layer for one microbatch on one rank.

    ``groups`` places the TP/CP/EP groups (default: every group inside one scale-up
    domain); ``options`` are the framework's kernels (attention implementation, bias
    fusion: `costmodel.execution`).
    """
    passes = layer_passes(model, job, plan, profile, is_moe=is_moe, groups=groups, options=options)
    return layer_cost_from_passes(model, job, plan, profile, passes, is_moe=is_moe, options=options)


def _moe_host_floor(
    model: ModelSpec,
    plan: ParallelPlan,
    x: _Shape,
    forward: PassCost,
    backward: PassCost,
    options: ExecutionOptions,
    routed_forward_s: float,
) -> tuple[PassCost, PassCost]:
    """Host-bound time a MoE layer adds per pass: its launches
    (`moe_costs.moe_host_launches`) at `ExecutionOptions.moe_host_launch_s` each, against the
    whole layer's kernels and exposed communication. Launches inside CUDA-graph-captured
    scopes (`ExecutionOptions.cuda_graph_scopes`, `moe_costs.captured_moe_launches`) cost no
    host time. Dropless routing (no capacity factor) synchronizes the stream once per
    forward on the received token counts: the device then waits one launch for the next
    kernel, and the launches after the router and the dispatch preprocessing
    (`moe_costs.pre_sync_launches`, by `ExecutionOptions.moe_dispatcher`) hide only
    behind the routed experts' own forward, ``routed_forward_s`` (dispatch, experts,
    combine; its router kernels, which run before the synchronization, are a small part:
    `moe_experts.forward_host_floor_s`). The backward reuses the forward's split sizes and
    does not synchronize (`moe_costs.host_bound_s`)."""
    launch_s = options.moe_host_launch_s
    local = moe_shape(model, plan, x.norm_tokens).local_experts
    fp8 = x.dtype == "fp8"
    fused = options.moe_fused_grouped_mlp
    scopes = options.cuda_graph_scopes
    disp = options.moe_dispatcher
    launches_f = moe_host_launches(local, fp8, "forward", fused_mlp=fused, dispatcher=disp)
    launches_b = moe_host_launches(local, fp8, "backward", fused_mlp=fused, dispatcher=disp)
    host_f = (launches_f - captured_moe_launches(scopes, launches_f, disp)) * launch_s
    host_b = (launches_b - captured_moe_launches(scopes, launches_b, disp)) * launch_s
    dropless = model.moe_capacity_factor is None and not scopes & WHOLE_MOE_SCOPES
    extra_f = host_bound_s(forward.duration_s, host_f)
    if dropless:
        post_sync = max(launches_f - pre_sync_launches(disp), 0) * launch_s
        extra_f = forward_host_floor_s(
            layer_gpu_s=forward.duration_s,
            post_sync_gpu_s=min(routed_forward_s, forward.duration_s),
            host_s=host_f,
            post_sync_host_s=post_sync,
        )
        extra_f += launch_s
    extra_b = host_bound_s(backward.duration_s, host_b)
    return PassCost(compute_s=extra_f), PassCost(compute_s=extra_b)


def _intra_groups(plan: ParallelPlan) -> CommGroups:
    def intra(axes: str, size: int) -> GroupPlacement:
        return GroupPlacement(
            axes=axes,
            size=size,
            num_nodes=1,
            num_domains=1,
            ranks_per_node=size,
            ranks_per_domain=size,
            nics_per_node=0,
        )

    return CommGroups(
        tp=intra("tp", plan.tp),
        cp=intra("cp", plan.cp),
        ep=intra("ep", plan.ep),
        etp=intra("etp", plan.expert_tp),
    )


def embedding_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) of the vocab-parallel word embedding for one microbatch: the
    lookup, then an all-reduce (no SP) or reduce-scatter (SP) of its output over TP;
    backward sums the gradient into the token rows (after all-gathering it with SP), and
    builds the dense gradient of the rank's vocabulary slice and adds it into the main
    gradient (`costmodel.compute.embedding_weight_grad_time_s`, ``options.main_grad_bytes``)."""
    comm = groups or _intra_groups(plan)
    x = _shape(job, plan)
    h = model.hidden_size
    rows = padded_vocab_size(model.vocab_size, plan.tp) / plan.tp
    fwd = PassCost(compute_s=ops.embedding_time_s(profile, x.tokens, h, x.elem, "forward"))
    bwd_s = ops.embedding_time_s(profile, x.tokens, h, x.elem, "backward")
    bwd_s += ops.embedding_weight_grad_time_s(profile, rows, h, x.elem, options.main_grad_bytes)
    bwd = PassCost(compute_s=bwd_s)
    if x.tp > 1:
        size = x.tokens * h * x.elem
        op = "reduce_scatter" if x.sp else "all_reduce"
        t = collective_time_s(profile, op, size, comm.tp)
        fwd = fwd.plus(PassCost(tp_s=t, tp_exposed_s=t, tp_bytes=size))
        if x.sp:
            t = collective_time_s(profile, "all_gather", size, comm.tp)
            bwd = bwd.plus(PassCost(tp_s=t, tp_exposed_s=t, tp_bytes=size))
    return fwd, bwd


def logits_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) of the final norm, the vocab-parallel output layer and the
    cross entropy for one microbatch (padded vocabulary, split over TP).

    TP: with SP the norm output is all-gathered before the output GEMM and its gradient
    reduce-scattered; without SP the input gradient is all-reduced; the loss adds three
    small all-reduces of fp32 [tokens] (max, target logit, sum of exponentials).
    """
    comm = groups or _intra_groups(plan)
    x = _shape(job, plan)
    h = model.hidden_size
    vocab = padded_vocab_size(model.vocab_size, plan.tp) / x.tp
    gemm = _gemm3(profile, x, x.tokens, vocab, h)
    fwd_s = ops.norm_time_s(profile, x.norm_tokens, h, x.elem, "forward") + gemm[0]
    fwd_s += ops.cross_entropy_time_s(profile, x.tokens, vocab, x.elem, "forward")
    bwd_s = ops.norm_time_s(
        profile,
        x.norm_tokens,
        h,
        x.elem,
        "backward",
        two_pass_backward=options.two_pass_norm_backward,
    )
    bwd_s += gemm[1] + gemm[2]
    bwd_s += ops.cross_entropy_time_s(profile, x.tokens, vocab, x.elem, "backward")
    fwd, bwd = PassCost(compute_s=fwd_s), PassCost(compute_s=bwd_s)
    if x.tp > 1:
        size = x.tokens * h * x.elem
        loss = 3 * collective_time_s(profile, "all_reduce", 4 * x.tokens, comm.tp)
        first = collective_time_s(profile, "all_gather", size, comm.tp) if x.sp else 0.0
        grad_op = "reduce_scatter" if x.sp else "all_reduce"
        second = collective_time_s(profile, grad_op, size, comm.tp)
        fwd_bytes = (size if x.sp else 0.0) + 12 * x.tokens
        fwd = fwd.plus(PassCost(tp_s=first + loss, tp_exposed_s=first + loss, tp_bytes=fwd_bytes))
        bwd = bwd.plus(PassCost(tp_s=second, tp_exposed_s=second, tp_bytes=size))
    return fwd, bwd
