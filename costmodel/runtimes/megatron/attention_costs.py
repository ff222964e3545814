"""Per-microbatch costs of the attention block of one transformer layer on one rank: the
QKV and output projections, the attention core, its element-wise work and its TP and CP
communication (`attention_block`).

GQA keeps max(g/tp, 1) key/value heads per rank; MLA's chain of small projections is
timed as one GEMM of the same FLOPs. With more tp ranks than key/value heads
(`specs.kv_sharding`), the fused QKV GEMM keeps its even split, (a + 2g)·d / tp columns
per rank, and its output is all-gathered over the tp group before each rank slices its
key/value head and query heads (`_kv_sub_shard_pair`); the slicing copies are not priced.

CP (`cp_comm_type`): ``p2p`` rotates K/V chunks around the ring in cp-1 steps under the
attention kernel, exposed only beyond the attention time; backward moves K/V and dK/dV
(twice the bytes). ``all_gather`` gathers K/V before attention (and reduce-scatters
dK/dV in backward), all exposed.

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

DeepSeek sparse attention (``ModelSpec.uses_dsa``) replaces the dense core by the sparse
core over the top-k keys and adds the lightning indexer, its top-k and its loss
(`costmodel.runtimes.megatron.dsa_costs`); its context-parallel all-gather moves the latent
key rows and the indexer keys (`dsa_costs.dsa_gathered_width`), not per-head keys and
values. The absorbed projections are priced as MLA's (`costmodel.dsa_work`: the same FLOPs).

A LoRA job's frozen projections run no weight-gradient GEMM
(`costmodel.runtimes.megatron.linear_pairs` for their quantization and TP reduction);
their adapters are priced in `costmodel.runtimes.megatron.lora_costs`.
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.attention_core import attention_core_time_s
from costmodel.collectives import collective_time_s, ring_exchange_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_attention_recipe
from costmodel.flops import (
    attention_projection_forward_flops_per_token,
    core_attention_forward_flops_per_token,
)
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.dsa_costs import dsa_core_s, dsa_gathered_width, indexer_pair
from costmodel.runtimes.megatron.layer_shape import LayerShape, block_elementwise_s, gemm3
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.runtimes.megatron.pair_quantization import fp8_amax_pair, fp8_pair_s
from costmodel.runtimes.megatron.requant_costs import mla_requant_s
from costmodel.runtimes.megatron.saver_costs import mla_up_projection_share
from costmodel.runtimes.megatron.unfused_costs import rope_time_s
from costmodel.runtimes.megatron.userbuffers import Shape
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.attention_params import mla_head_dims
from specs.finetune import has_adapter
from specs.job import TrainingJob
from specs.kv_sharding import kv_sub_sharded
from specs.model import ModelSpec
from specs.plan import ParallelPlan


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


def _qkv_gemm_width(model: ModelSpec, tp: int) -> float:
    """Output columns of the fused QKV GEMM on one rank, (a + 2g)·d / tp: Megatron-core
    splits the fused weight evenly over tp whether or not tp exceeds the key/value heads
    (`ColumnParallelLinear` of width ``query_projection_size + 2 * kv_projection_size``);
    (2a + 2g)·d / tp with ``attention_output_gate``, whose gate doubles the query's columns
    (``query_projection_size * 2`` in `SelfAttention.__init__`)."""
    query_heads = model.num_attention_heads * (2 if model.attention_output_gate else 1)
    return (query_heads + 2 * model.query_groups) * model.head_dim / tp


def _kv_sub_shard_pair(
    model: ModelSpec, profile: HardwareProfile, x: LayerShape, groups: CommGroups
) -> tuple[PassCost, PassCost]:
    """(forward, backward) of QKV activation sub-sharding (`specs.kv_sharding`; Megatron-core
    `SelfAttention.get_query_key_value_tensors`): the forward all-gathers the QKV GEMM's
    output over tp (`all_gather_last_dim_from_tensor_parallel_region`), the backward
    reduce-scatters its gradient; both on the critical path, so exposed. ZERO pairs when the
    model keeps whole key/value heads per rank."""
    if not kv_sub_sharded(model, x.tp):
        return ZERO, ZERO
    size = x.tokens * _qkv_gemm_width(model, 1) * x.elem
    ag = collective_time_s(profile, "all_gather", size, groups.tp)
    rs = collective_time_s(profile, "reduce_scatter", size, groups.tp)
    return (
        PassCost(tp_s=ag, tp_exposed_s=ag, tp_bytes=size),
        PassCost(tp_s=rs, tp_exposed_s=rs, tp_bytes=size),
    )


def attention_block(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    options: ExecutionOptions,
) -> tuple[PassCost, PassCost, dict[str, PassCost], float, float]:
    """Attention block: (forward, backward, rerun forward of its recompute modules
    ``core_attn`` and ``mla_up_proj``, dgrad_s, wgrad_s)."""
    lora = job.lora
    frozen = lora is not None
    h = model.hidden_size
    q, kv, head_dim = _attention_dims(model, x.tp)
    if model.uses_mla:
        # MLA's chain of small projections, timed as one GEMM of the same FLOPs.
        width = attention_projection_forward_flops_per_token(model) / (2 * h * x.tp)
        qkv_shape: Shape = (x.tokens, width, h)
        proj_shape: Shape | None = None
        qkv, proj = gemm3(profile, x, *qkv_shape), (0.0, 0.0, 0.0)
    else:
        width = _qkv_gemm_width(model, x.tp)
        qkv_shape, proj_shape = (x.tokens, width, h), (x.tokens, h, q)
        qkv, proj = gemm3(profile, x, *qkv_shape), gemm3(profile, x, *proj_shape)
    if model.uses_dsa:  # the sparse core over the top-k keys, then the indexer
        core, cp_kv = dsa_core_s(model, profile, x), dsa_gathered_width(model)
    else:
        core, cp_kv = _core_s(model, job, plan, profile, x, options, head_dim), kv
    rope = model.position_embedding == "rope"
    ew_fwd, ew_bwd = _elementwise_s(model, profile, x, q, kv, options)
    qkv_width = width
    row_in = 0.0 if model.uses_mla else q
    fp8_f, fp8_b = fp8_pair_s(
        profile,
        x,
        h,
        qkv_width,
        row_in,
        options.fp8_recipe,
        options.cudnn_norm,
        frozen=frozen,
        norm_returned=has_adapter(lora, "linear_qkv"),
        fused_rht=options.nvfp4_fused_rht_cast,
        tn_gemm_only=options.fp8_tn_gemm_only is not False,
        userbuffers=plan.tp_comm_overlap,
        row_saves_input=True,
    )
    ew_fwd += fp8_f
    ew_bwd += fp8_b + mla_requant_s(
        model, profile, x, options.fp8_recipe, frozen=frozen, fused_rht=options.nvfp4_fused_rht_cast
    )
    tp_f, tp_b = tp_pair(
        profile,
        plan,
        x,
        h,
        groups,
        qkv_shape,
        proj_shape,
        options,
        frozen=frozen,
        norm_returned=has_adapter(lora, "linear_qkv"),
    )
    amax_f, amax_b = fp8_amax_pair(profile, x, groups, options.fp8_recipe, row_in)
    tp_f, tp_b = tp_f.plus(amax_f), tp_b.plus(amax_b)
    sub_f, sub_b = _kv_sub_shard_pair(model, profile, x, groups)
    tp_f, tp_b = tp_f.plus(sub_f), tp_b.plus(sub_b)
    cp_f, cp_b = _cp_exchange(profile, plan, x, cp_kv, groups.cp, core)
    merge_fwd, merge_bwd = _cp_step_merge_s(profile, plan, x, q, kv)
    ew_fwd += merge_fwd
    ew_bwd += merge_bwd
    if model.uses_dsa:
        indexer_f, indexer_b = indexer_pair(model, profile, x)
        ew_fwd += indexer_f
        ew_bwd += indexer_b
    dgrad = qkv[1] + proj[1] + core["backward"] + ew_bwd
    wgrad = 0.0 if frozen else qkv[2] + proj[2]
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


def _core_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    options: ExecutionOptions,
    head_dim: int,
) -> dict[str, float]:
    """Seconds of the attention core by direction (``forward``, ``backward``): one kernel
    per kind of context-parallel step (`cp_attention_steps`), each read at its K/V length
    with the flash kernel (`costmodel.attention_core.attention_core_time_s`), on the FP8
    curve of the options' recipe under `ExecutionOptions.fp8_attention`."""
    kernel = options.attention
    core_flops = core_attention_forward_flops_per_token(model, x.span) * x.tokens / x.tp
    core = {}
    for direction in ("forward", "backward"):
        core[direction] = sum(
            attention_core_time_s(
                profile,
                causal_forward_flops=core_flops * share,
                batch_heads=x.micro_batch * model.num_attention_heads / x.tp,
                seq_q=x.seq / x.cp,
                seq_kv=seq_kv if kernel == "flash" else x.seq,
                head_dim=head_dim,
                precision=x.precision,
                kernel=kernel,
                direction=direction,
                fp8_attention_recipe=fp8_attention_recipe(options),
            )
            for share, seq_kv in cp_attention_steps(plan, x.span)
        )
    return core


def _elementwise_s(
    model: ModelSpec,
    profile: HardwareProfile,
    x: LayerShape,
    q: float,
    kv: float,
    options: ExecutionOptions,
) -> tuple[float, float]:
    """Element-wise work of the attention block before FP8 quantization (forward,
    backward), in seconds: its pre-norm and residual (a parallel block's attention part:
    `layer_shape.block_elementwise_s`), RoPE, the query and key norms, the
    output gate's fused sigmoid-multiply (reads the core output and the gate, writes the
    product: 3 elements per query channel forward; reads the gradient and both inputs,
    writes two gradients: 5 backward), the materialized path's context copy and
    QKV-gradient concatenation, and the unfused bias adds and reductions (module
    docstring); ``q`` and ``kv`` are the per-rank query and key-or-value widths."""
    h = model.hidden_size
    ew_fwd, ew_bwd = block_elementwise_s(profile, x, model, options, "attention")
    if model.position_embedding == "rope":
        fused = options.rope_fusion
        ew_fwd += rope_time_s(profile, x.tokens, q + kv, x.elem, "forward", fused=fused)
        ew_bwd += rope_time_s(profile, x.tokens, q + kv, x.elem, "backward", fused=fused)
    if model.qk_layernorm and not model.uses_mla:
        qk_f, qk_b = qk_norm_time_s(profile, x.tokens, q + kv, x.elem)
        ew_fwd, ew_bwd = ew_fwd + qk_f, ew_bwd + qk_b
    if model.attention_output_gate:  # Attention._apply_output_gate: out = x · sigmoid(gate)
        ew_fwd += ops.memory_bound_time_s(profile, 3 * x.elem * x.tokens * q)
        ew_bwd += ops.memory_bound_time_s(profile, 5 * x.elem * x.tokens * q)
    if options.attention == "materialized":
        ew_fwd += ops.memory_bound_time_s(profile, 2 * x.elem * x.tokens * q)
        ew_bwd += ops.memory_bound_time_s(profile, 2 * x.elem * x.tokens * (q + 2 * kv))
    if model.add_bias_linear and not options.bias_fusion:
        ew_fwd += ops.bias_time_s(profile, x.tokens, q + 2 * kv, x.elem, "forward")
        ew_bwd += ops.bias_time_s(profile, x.tokens, q + 2 * kv, x.elem, "backward")
        ew_bwd += ops.bias_time_s(profile, x.norm_tokens, h, x.elem, "backward")
    return ew_fwd, ew_bwd


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
    (`costmodel.attention_core.attention_core_time_s`), so short chunks run at the curve's lower
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
    profile: HardwareProfile, plan: ParallelPlan, x: LayerShape, q_width: float, kv_width: float
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
    x: LayerShape,
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
