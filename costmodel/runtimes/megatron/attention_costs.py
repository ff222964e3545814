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
dK/dV in backward), all exposed (`costmodel.runtimes.megatron.attention_cp`).

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
from costmodel.collectives import collective_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_attention_recipe
from costmodel.flops import (
    attention_projection_forward_flops_per_token,
    core_attention_forward_flops_per_token,
)
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.attention_cp import (
    cp_attention_steps,
    cp_exchange,
    cp_step_merge_s,
)
from costmodel.runtimes.megatron.dsa_costs import dsa_core_s, dsa_gathered_width, indexer_pair
from costmodel.runtimes.megatron.layer_shape import LayerShape, block_elementwise_s, gemm3
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.runtimes.megatron.pair_quantization import fp8_amax_pair, fp8_pair_s
from costmodel.runtimes.megatron.requant_costs import mla_requant_s
from costmodel.runtimes.megatron.saver_costs import mla_up_projection_share
from costmodel.runtimes.megatron.unfused_costs import rope_time_s
from costmodel.runtimes.megatron.userbuffers import Shape
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
    ``core_attn`` and ``mla_up_proj``, dgrad_s, wgrad_s). Its GEMMs are
    `_projection_gemms`, its core `_core_s` (DSA: `dsa_costs.dsa_core_s`), its element-wise
    and quantization work `_block_elementwise_s`, its TP collectives `_attention_tp_pair`
    and its CP exchange `attention_cp.cp_exchange`; a LoRA job's frozen projections run no
    wgrad GEMM."""
    frozen = job.lora is not None
    q, kv, head_dim = _attention_dims(model, x.tp)
    width, qkv_shape, proj_shape = _projection_shapes(model, x)
    qkv, proj = _projection_gemms(profile, x, qkv_shape, proj_shape)
    if model.uses_dsa:  # the sparse core over the top-k keys, then the indexer
        core, cp_kv = dsa_core_s(model, profile, x), dsa_gathered_width(model)
    else:
        core, cp_kv = _core_s(model, job, plan, profile, x, options, head_dim), kv
    row_in = 0.0 if model.uses_mla else q
    ew_fwd, ew_bwd = _block_elementwise_s(
        model, job, plan, profile, x, (q, kv), width, row_in, options
    )
    tp_f, tp_b = _attention_tp_pair(
        profile, plan, x, groups, model, job, (qkv_shape, proj_shape), row_in, options
    )
    cp_f, cp_b = cp_exchange(profile, plan, x, cp_kv, groups.cp, core)
    dgrad = qkv[1] + proj[1] + core["backward"] + ew_bwd
    wgrad = 0.0 if frozen else qkv[2] + proj[2]
    forward = PassCost(compute_s=qkv[0] + proj[0] + core["forward"] + ew_fwd).plus(tp_f).plus(cp_f)
    backward = PassCost(compute_s=dgrad + wgrad).plus(tp_b).plus(cp_b)
    rerun = {
        "core_attn": PassCost(compute_s=core["forward"]).plus(cp_f),
        "mla_up_proj": PassCost(
            compute_s=_mla_up_rerun_s(model, profile, x, q + kv, qkv[0], options)
        ),
    }
    return forward, backward, rerun, dgrad, wgrad


def _projection_shapes(model: ModelSpec, x: LayerShape) -> tuple[float, Shape, Shape | None]:
    """(output width of the QKV GEMM per rank, its (tokens, width, h) shape, the output
    projection's (tokens, h, q) shape). MLA's chain of small projections is timed as one
    GEMM of the same FLOPs (`costmodel.flops.attention_projection_forward_flops_per_token`)
    and has no separate output projection shape (None)."""
    h = model.hidden_size
    if model.uses_mla:
        width = attention_projection_forward_flops_per_token(model) / (2 * h * x.tp)
        return width, (x.tokens, width, h), None
    q, _, _ = _attention_dims(model, x.tp)
    width = _qkv_gemm_width(model, x.tp)
    return width, (x.tokens, width, h), (x.tokens, h, q)


def _projection_gemms(
    profile: HardwareProfile, x: LayerShape, qkv_shape: Shape, proj_shape: Shape | None
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(forward, dgrad, wgrad) seconds of the QKV GEMM and of the output projection
    (`layer_shape.gemm3`); zeros for the output projection without a shape (MLA)."""
    qkv = gemm3(profile, x, *qkv_shape)
    proj = (0.0, 0.0, 0.0) if proj_shape is None else gemm3(profile, x, *proj_shape)
    return qkv, proj


def _block_elementwise_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    widths: tuple[float, float],
    qkv_width: float,
    row_in: float,
    options: ExecutionOptions,
) -> tuple[float, float]:
    """Element-wise and quantization work of the attention block (forward, backward), in
    seconds, summed in this order: `_elementwise_s` at the per-rank query and key-or-value
    ``widths``, the projections' FP8 or NVFP4 casts (`pair_quantization.fp8_pair_s` with
    QKV output width ``qkv_width`` and output-projection input ``row_in``; backward also
    MLA's re-quantization, `requant_costs.mla_requant_s`), ring CP's per-step merges
    (`attention_cp.cp_step_merge_s`) and DSA's indexer (`dsa_costs.indexer_pair`)."""
    q, kv = widths
    frozen = job.lora is not None
    ew_fwd, ew_bwd = _elementwise_s(model, profile, x, q, kv, options)
    fp8_f, fp8_b = fp8_pair_s(
        profile,
        x,
        model.hidden_size,
        qkv_width,
        row_in,
        options.fp8_recipe,
        options.cudnn_norm,
        frozen=frozen,
        norm_returned=has_adapter(job.lora, "linear_qkv"),
        fused_rht=options.nvfp4_fused_rht_cast,
        tn_gemm_only=options.fp8_tn_gemm_only is not False,
        userbuffers=plan.tp_comm_overlap,
        row_saves_input=True,
    )
    ew_fwd += fp8_f
    ew_bwd += fp8_b + mla_requant_s(
        model, profile, x, options.fp8_recipe, frozen=frozen, fused_rht=options.nvfp4_fused_rht_cast
    )
    merge_fwd, merge_bwd = cp_step_merge_s(profile, plan, x, q, kv)
    ew_fwd += merge_fwd
    ew_bwd += merge_bwd
    if model.uses_dsa:
        indexer_f, indexer_b = indexer_pair(model, profile, x)
        ew_fwd += indexer_f
        ew_bwd += indexer_b
    return ew_fwd, ew_bwd


def _attention_tp_pair(
    profile: HardwareProfile,
    plan: ParallelPlan,
    x: LayerShape,
    groups: CommGroups,
    model: ModelSpec,
    job: TrainingJob,
    shapes: tuple[Shape, Shape | None],
    row_in: float,
    options: ExecutionOptions,
) -> tuple[PassCost, PassCost]:
    """TP communication of the attention block (forward, backward): the projections'
    collectives (`linear_pairs.tp_pair` of the QKV and output-projection ``shapes``), the
    FP8 amax reduction (`pair_quantization.fp8_amax_pair`) and the QKV sub-sharding
    all-gather (`_kv_sub_shard_pair`), added in this order."""
    qkv_shape, proj_shape = shapes
    tp_f, tp_b = tp_pair(
        profile,
        plan,
        x,
        model.hidden_size,
        groups,
        qkv_shape,
        proj_shape,
        options,
        frozen=job.lora is not None,
        norm_returned=has_adapter(job.lora, "linear_qkv"),
    )
    amax_f, amax_b = fp8_amax_pair(profile, x, groups, options.fp8_recipe, row_in)
    tp_f, tp_b = tp_f.plus(amax_f), tp_b.plus(amax_b)
    sub_f, sub_b = _kv_sub_shard_pair(model, profile, x, groups)
    return tp_f.plus(sub_f), tp_b.plus(sub_b)


def _mla_up_rerun_s(
    model: ModelSpec,
    profile: HardwareProfile,
    x: LayerShape,
    qk_width: float,
    qkv_forward_s: float,
    options: ExecutionOptions,
) -> float:
    """Seconds of the forward rerun of MLA's up-projection recompute module
    (``mla_up_proj``): its share of the projection chain's forward ``qkv_forward_s``
    (`saver_costs.mla_up_projection_share`) plus, with RoPE, the forward rotary embedding
    over the rank's query plus key width ``qk_width`` (`unfused_costs.rope_time_s`)."""
    rope = model.position_embedding == "rope"
    return mla_up_projection_share(model) * qkv_forward_s + (
        rope_time_s(profile, x.tokens, qk_width, x.elem, "forward", fused=options.rope_fusion)
        if rope
        else 0
    )


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
