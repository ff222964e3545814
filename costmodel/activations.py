"""Activation memory per rank: per layer, per model chunk and per pipeline stage.

Per-layer bytes generalise Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models", arXiv 2205.05198, Table 2 and §4): for a multi-head attention
layer with F = 4h, SP and selective recompute it is 34·s·b·h/t bytes, without SP
s·b·h·(10 + 24/t). The generalisations:

- GQA: Q is s·b·q and K, V are s·b·kv elements (q = a·d, kv = g·d), not s·b·h each; with
  tp > g every rank keeps one replicated K/V head.
- SwiGLU: the first MLP GEMM has two outputs (gate and up), so the MLP keeps 2·s·b·F more.
- MoE: each token's top-k rows are dispatched to the experts; the experts keep their input
  rows and inner activations (split by expert TP) and the fp32 routing probability of each
  row (Megatron-core multiplies it in the expert activation, `TEGroupedMLP`), the router
  keeps fp32 logits and probabilities. The combine keeps nothing: its unpermutation runs
  without probabilities (`MoEAlltoAllTokenDispatcher.combine_postprocess`), so its backward
  is a permutation of the gradient by the saved row map.
- MLA: the q and kv latents (before and after their norms) replace the QKV input width.
- CP divides the sequence of every token-linear term; attention scores are s/cp x s.
- Attention kernel: ``flash`` (fused attention, Megatron's default through Transformer
  Engine) keeps only fp32 log-sum-exp statistics (4·b·a·s/(t·cp) bytes) besides Q, K, V
  and the output; ``materialized`` keeps Table 2's 5·a·s²·b term (softmax output, dropout
  mask and dropout output). Selective recompute drops exactly that core-attention part.
- Per-module selective recompute (`ParallelPlan.recompute_modules`) drops the saved tensors
  of the named modules and CPU activation offloading moves the tensors it offloads to host
  memory (`costmodel.activation_savers`). Layer-level offloading leaves (L - N) layers'
  activations on the device, as Transformer Engine's default schedule guarantees
  (``get_cpu_offload_context`` docstring, `transformer_engine/pytorch/cpu_offload.py`);
  fine-grained offloading keeps one layer's offloaded inputs on the device (Megatron-core
  leaves the last offload group of a step on the device to avoid a reload stall:
  `docs/user-guide/features/fine_grained_activation_offloading.md`).
- Full recompute keeps only each checkpoint's input (2·s·b·h, /t with SP) and rebuilds one
  checkpoint at a time in the backward pass; that rebuilt group is the recompute working
  set, counted once per stage. Selective recompute likewise rebuilds one layer's core
  attention at a time.
- The loss keeps per in-flight microbatch what its cross-entropy implementation saves of
  the logits: an fp32 softmax (Megatron-core's own implementations) or the logits
  themselves with the gradient written into them (Transformer Engine up to v2.17);
  `logits_element_bytes`.

Table 2 keeps two 1-byte dropout masks per layer (attention and MLP output) and one for
the embedding; they are kept only when the run applies hidden dropout (``dropout``, from
`ExecutionOptions.hidden_dropout`: Megatron-core's bias-dropout-add saves no mask when the
dropout probability is 0, as in Llama-style recipes).

FP8 (Transformer Engine, `te.pytorch` ``LayerNormLinear``/``Linear``/``GroupedLinear``
forward: the FP8-cast GEMM input is what is saved for the weight-gradient GEMM): the input
of every linear layer (the normalized QKV and fc1 input, the attention output before the
output projection, the activation output before fc2, the expert inputs) is kept as 1-byte
FP8; the layer-norm input, Q, K, V, the attention output kept by the fused attention
kernel and the first MLP GEMM's outputs stay in bf16. Under bf16 the attention output is
one tensor shared by the attention kernel and the output projection; under FP8 the
projection keeps its own FP8 copy, except where it saves its original input
(`projection_saves_original_input`: current-scaling and MXFP8 recipes), which is the
tensor the attention kernel keeps.

Units: bytes per rank. ``e`` is the activation element size (2 for bf16/fp8, 4 for fp32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from costmodel.activation_savers import offloaded_bytes, recomputed_bytes
from costmodel.compute import FP32_BYTES, MASK_BYTES
from costmodel.schedules import (
    chunk_layers,
    warmup_microbatches_1f1b,
    warmup_microbatches_interleaved,
)
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import mla_head_dims, padded_vocab_size
from specs.plan import ParallelPlan

AttentionKernel = Literal["flash", "materialized"]
CrossEntropyFusion = Literal["unfused", "native", "te", "te_fp32_grad"]
CROSS_ENTROPY_FUSIONS: tuple[CrossEntropyFusion, ...] = ("unfused", "native", "te", "te_fp32_grad")
"""Cross-entropy implementations of the loss (`logits_element_bytes`), Megatron-core's
default first."""

TOKEN_ID_BYTES = 8
"""Token ids are int64 (Megatron's estimator: 8·s·b for the embedding input)."""


def activation_element_bytes(job: TrainingJob) -> int:
    """Bytes of one stored activation: 2 for bf16 and fp8 runs (fp8 GEMMs still keep bf16
    layer outputs), 4 for fp32 runs."""
    return 4 if job.precision == "fp32" else 2


@dataclass(frozen=True, kw_only=True, slots=True)
class _Shard:
    """The activation shape one rank sees for one microbatch."""

    tokens: float
    """b·s/cp: tokens of the microbatch on this CP rank."""
    seq_length: int
    """Full sequence s (keys each query attends to)."""
    tp: int
    """Divisor of TP-sharded activations."""
    sp: int
    """Divisor of activations outside TP regions: tp with sequence parallelism, else 1."""
    element_bytes: int
    """Bytes per stored activation element."""
    gemm_input_bytes: int
    """Bytes per element of a saved linear-layer input: 1 under FP8, else element_bytes."""
    mask_bytes: int
    """Bytes per element of a hidden-dropout mask: 1 with dropout, 0 without."""
    proj_saves_input: bool = False
    """The attention output projection saves its original (bf16) input, the tensor the
    attention kernel keeps, instead of an FP8 copy (`projection_saves_original_input`)."""

    @property
    def fp8_copy_bytes(self) -> int:
        """Bytes of the separate FP8 copy of a tensor another kernel keeps in bf16."""
        return self.gemm_input_bytes if self.gemm_input_bytes < self.element_bytes else 0

    @property
    def proj_copy_bytes(self) -> int:
        """Bytes per element the output projection keeps beside the attention output."""
        return 0 if self.proj_saves_input else self.fp8_copy_bytes


def projection_saves_original_input(fp8_recipe: str) -> bool:
    """True when, in an fp8 run with Transformer Engine's ``fp8_recipe``, Megatron-core's
    attention output projection saves its original input rather than the FP8-cast copy.

    Megatron-core calls ``set_save_original_input(self.linear_proj)`` when ``config.fp8``,
    ``fp8_recipe != 'delayed'`` and Transformer Engine is at least 2.6
    (``megatron/core/transformer/attention.py``, ``Attention.__init__``, from core_v0.14.0;
    ``megatron/core/extensions/transformer_engine.py`` ``set_save_original_input``): "the
    output of the fused core_attn is saved by itself, and linear_proj also saves the
    quantized tensor of this output". TE's ``Linear`` with ``save_original_input`` saves
    ``inp`` and quantizes it again in the backward (TE v2.6+,
    ``transformer_engine/pytorch/module/linear.py``; not supported with delayed scaling).
    Current scaling (``tensorwise``) and ``mxfp8`` therefore keep no FP8 copy of the
    attention output; ``delayed`` keeps it.
    """
    return fp8_recipe != "delayed"


def _shard(
    job: TrainingJob, plan: ParallelPlan, dropout: bool = True, proj_saves_input: bool = False
) -> _Shard:
    element = activation_element_bytes(job)
    return _Shard(
        gemm_input_bytes=1 if job.precision == "fp8" else element,
        mask_bytes=MASK_BYTES if dropout else 0,
        tokens=plan.micro_batch_size * job.seq_length / plan.cp,
        seq_length=job.seq_length,
        tp=plan.tp,
        sp=plan.tp if plan.sequence_parallel else 1,
        element_bytes=element,
        proj_saves_input=proj_saves_input,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerActivations:
    """Bytes one layer keeps for one microbatch on one rank."""

    full_bytes: float
    """Everything the backward pass needs when nothing is recomputed."""
    core_attention_bytes: float
    """The part selective recompute drops: softmax statistics (flash) or scores (materialized)."""
    input_bytes: float
    """The layer input: all a full-recompute checkpoint keeps."""
    tensors: tuple[tuple[str, float], ...] = ()
    """The saved tensors by name (`costmodel.activation_savers.SAVED_TENSORS`), summing to
    full_bytes: what per-module recompute and activation offloading act on."""

    @property
    def selective_bytes(self) -> float:
        """Kept with selective (core-attention) recompute."""
        return self.full_bytes - self.core_attention_bytes


def _attention_tensors(model: ModelSpec, x: _Shard, kernel: AttentionKernel) -> dict[str, float]:
    """Attention block: norm input, QKV GEMM input (the norm output), dropout mask, the
    projected heads (Q, K, V; MLA: with its latents), the core's own saved tensors, and
    the attention output (with its FP8 copy for the output projection)."""
    e, t, n = x.element_bytes, x.tp, x.tokens
    h, a = model.hidden_size, model.num_attention_heads
    out: dict[str, float] = {
        "attn_norm_input": e * n * h / x.sp,
        "qkv_input": x.gemm_input_bytes * n * h / x.sp,
        "attn_mask": x.mask_bytes * n * h / x.sp,
        "core_attention": _core_attention_bytes(model, x, kernel),
    }
    if model.uses_mla:
        d_qk, d_rope, d_v = mla_head_dims(model)
        q_lora, kv_lora = model.q_lora_rank or 0, model.kv_lora_rank or 0
        out["mla_latents"] = e * n * (2 * q_lora + 2 * kv_lora + d_rope) / x.sp
        out["qkv_heads"] = e * n * a * (2 * (d_qk + d_rope) + d_v) / t
        out["attn_output"] = (e + x.proj_copy_bytes) * n * a * d_v / t
        return out
    q, g = a * model.head_dim, model.query_groups
    # with tp > g each rank keeps a replica of one K/V head (Megatron allows tp % g == 0)
    kv_per_rank = g * model.head_dim / min(t, g)
    out["qkv_heads"] = e * n * (q / t + 2 * kv_per_rank)
    if model.qk_layernorm:
        out["qk_norm_input"] = qk_norm_saved_bytes(model, x)
    out["attn_output"] = (e + x.proj_copy_bytes) * n * q / t
    return out


def qk_norm_saved_bytes(model: ModelSpec, x: _Shard) -> float:
    """Bytes the query and key norms (``ModelSpec.qk_layernorm``) keep for backward: their
    inputs, the query and key heads before the norm, in the activation dtype, and one fp32
    reciprocal RMS per head and token.

    Source: Transformer Engine's RMSNorm (``transformer_engine/pytorch/ops/basic/rmsnorm.py``)
    saves ``input_.contiguous()`` and ``rstdevs``; Megatron-core's query is a reshaped copy
    and its key a view of the fused QKV output (``attention.py``,
    ``get_query_key_value_tensors``), so both saved inputs are tensors of their own. The
    normed heads go through RoPE into the attention core, which saves its own Q and K
    (``qkv_heads``). No recompute module drops them."""
    t, n, d = x.tp, x.tokens, model.head_dim
    heads = model.num_attention_heads / t
    groups = model.query_groups / min(t, model.query_groups)
    return (x.element_bytes * d + FP32_BYTES) * n * (heads + groups)


def _core_attention_bytes(model: ModelSpec, x: _Shard, kernel: AttentionKernel) -> float:
    """What the attention core keeps beyond Q, K, V and its output."""
    heads_per_rank = model.num_attention_heads / x.tp
    if kernel == "flash":
        return FP32_BYTES * x.tokens * heads_per_rank
    scores = x.tokens * x.seq_length * heads_per_rank
    return (2 * x.element_bytes + MASK_BYTES) * scores


def _mlp_tensors(
    model: ModelSpec, x: _Shard, ffn: int, rows: float, tp: int, prefix: str
) -> dict[str, float]:
    """One MLP's inner activations for ``rows`` token rows, split over ``tp``: the first
    GEMM's output(s) (``<prefix>fc1_output``) and the activation output, the second GEMM's
    input (``<prefix>act_output``)."""
    up = 2 if model.activation == "swiglu" else 1
    return {
        f"{prefix}fc1_output": x.element_bytes * up * rows * ffn / tp,
        f"{prefix}act_output": x.gemm_input_bytes * rows * ffn / tp,
    }


def _moe_tensors(model: ModelSpec, x: _Shard, plan: ParallelPlan) -> dict[str, float]:
    """Router, shared expert(s) and routed experts (with their rows' probabilities)."""
    h = model.hidden_size
    routed_tokens = x.tokens / x.sp
    shared = _mlp_tensors(model, x, model.moe_shared_expert_size, x.tokens, x.tp, "shared_")
    rows = model.moe_top_k * routed_tokens * (model.moe_capacity_factor or 1.0)
    etp = plan.expert_tp
    return {
        "router": 2 * FP32_BYTES * routed_tokens * model.num_experts,  # logits, probabilities
        **shared,
        "expert_input": x.gemm_input_bytes * rows * etp * h,  # rows gathered over expert TP
        **_mlp_tensors(model, x, model.expert_ffn_hidden_size, rows * etp, etp, "expert_"),
        "expert_row_probs": FP32_BYTES * rows * etp,  # the probability-weighted activation
    }


def layer_activations(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    layer_index: int,
    *,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    proj_saves_input: bool = False,
) -> LayerActivations:
    """Bytes layer ``layer_index`` keeps per microbatch on one rank (see module docstring);
    ``proj_saves_input``: `projection_saves_original_input` of the run's FP8 recipe."""
    if not 0 <= layer_index < model.num_layers:
        raise SpecError(
            f"layer_index {layer_index} is outside 0..{model.num_layers - 1} for model "
            f"{model.name!r}; pass a layer of the model"
        )
    is_moe = model.moe_layer_mask()[layer_index]
    x = _shard(job, plan, dropout, proj_saves_input)
    return _layer_activations(model, x, plan, is_moe, attention)


def _layer_activations(
    model: ModelSpec, x: _Shard, plan: ParallelPlan, is_moe: bool, attention: AttentionKernel
) -> LayerActivations:
    h, n, e = model.hidden_size, x.tokens, x.element_bytes
    tensors = _attention_tensors(model, x, attention)
    tensors["mlp_norm_input"] = e * n * h / x.sp
    tensors["fc1_input"] = x.gemm_input_bytes * n * h / x.sp
    tensors["mlp_mask"] = x.mask_bytes * n * h / x.sp
    if is_moe:
        tensors.update(_moe_tensors(model, x, plan))
    else:
        tensors.update(_mlp_tensors(model, x, model.ffn_hidden_size, n, x.tp, ""))
    return LayerActivations(
        full_bytes=sum(tensors.values()),
        core_attention_bytes=tensors["core_attention"],
        input_bytes=e * n * h / x.sp,
        tensors=tuple(tensors.items()),
    )


# ---- recompute ---------------------------------------------------------------------------


def checkpoint_groups(plan: ParallelPlan, layers: range) -> tuple[tuple[int, ...], ...]:
    """Full-recompute checkpoints of one model chunk, each a run of consecutive layers.

    Megatron-LM `--recompute-method`: ``uniform`` checkpoints every group of N =
    recompute_num_layers consecutive layers (all layers are recomputed); ``block``
    checkpoints each of the first N layers of the chunk on its own and keeps the rest.
    recompute_num_layers None means N = 1 for uniform and every layer for block, i.e. each
    layer its own checkpoint. Empty unless ``plan.recompute == "full"``.
    """
    if plan.recompute != "full":
        return ()
    n = plan.recompute_num_layers
    if plan.recompute_method == "block":
        count = len(layers) if n is None else min(n, len(layers))
        return tuple((layer,) for layer in layers[:count])
    size = n or 1
    return tuple(tuple(layers[i : i + size]) for i in range(0, len(layers), size))


def recomputed_layers(model: ModelSpec, plan: ParallelPlan) -> frozenset[int]:
    """Layers whose whole forward runs twice under full recompute (empty otherwise)."""
    chosen: set[int] = set()
    for stage in range(plan.pp):
        for chunk in range(plan.vpp):
            layers = chunk_layers(model, plan, stage, chunk)
            for group in checkpoint_groups(plan, layers):
                chosen.update(group)
    return frozenset(chosen)


# ---- pipeline: microbatches in flight ----------------------------------------------------


def in_flight_chunk_counts(
    pp: int, vpp: int, pp_rank: int, num_microbatches: int
) -> tuple[int, ...]:
    """Per model chunk, the microbatches whose activations stage ``pp_rank`` holds at its peak.

    1F1B: stage r holds min(pp - r, m) microbatches (Megatron warmup min(pp - r - 1, m),
    plus the one in its first steady forward). Interleaved: warmup
    2·(pp - r - 1) + (vpp - 1)·pp forwards plus one, at most m·vpp; forward k runs chunk
    (k // pp) % vpp (Megatron's schedule table, group size pp), so the peak set is the first
    that-many forwards (megatron-facts.md §3.2, §3.3).
    """
    if num_microbatches < 1:
        raise SpecError(
            f"num_microbatches must be >= 1, got {num_microbatches}; raise global_batch_size "
            "to at least micro_batch_size·dp"
        )
    if vpp == 1:
        return (min(warmup_microbatches_1f1b(pp, pp_rank, num_microbatches) + 1, num_microbatches),)
    warmup = warmup_microbatches_interleaved(pp, vpp, pp_rank, num_microbatches)
    held = min(warmup + 1, num_microbatches * vpp)
    counts = [0] * vpp
    for k in range(held):
        counts[(k // pp) % vpp] += 1
    return tuple(counts)


# ---- one pipeline stage --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class StageActivations:
    """Activation bytes one rank of a pipeline stage holds at its peak."""

    in_flight_microbatches: int
    """Microbatch-chunks held at the peak (all chunks together)."""
    layers_bytes: float
    """Stored layer activations, summed over the in-flight microbatch-chunks."""
    recompute_working_bytes: float
    """What the backward rebuilds at once: one checkpoint (full) or one layer's core
    attention (selective); 0 without recompute."""
    embedding_bytes: float
    """First stage: token ids and the embedding dropout mask of each in-flight microbatch."""
    output_bytes: float
    """Last stage: final-norm and output-layer inputs and what the loss keeps of the logits
    for the in-flight microbatches of the last chunk, plus the loss's transient logits bytes
    of one microbatch (`output_microbatch_bytes`)."""
    offloaded_bytes: float = 0.0
    """Layer activations held in host memory at the peak (CPU activation offloading); not
    part of layers_bytes, which under fine-grained offloading keeps one offloaded layer in
    flight on the device."""


def _chunk_bytes(
    per_layer: dict[int, LayerActivations], plan: ParallelPlan, layers: range
) -> tuple[float, float]:
    """(stored bytes per microbatch, recompute working bytes) of one chunk."""
    if plan.recompute == "none":
        return sum(per_layer[i].full_bytes for i in layers), 0.0
    if plan.recompute == "selective":
        modules = plan.selective_modules
        freed = {i: recomputed_bytes(per_layer[i].tensors, modules) for i in layers}
        stored = sum(per_layer[i].full_bytes - freed[i] for i in layers)
        return stored, max(freed.values(), default=0.0)
    groups = checkpoint_groups(plan, layers)
    checkpointed = {i for group in groups for i in group}
    stored = sum(per_layer[group[0]].input_bytes for group in groups)
    stored += sum(per_layer[i].full_bytes for i in layers if i not in checkpointed)
    working = max(
        (sum(per_layer[i].full_bytes for i in g) - per_layer[g[0]].input_bytes for g in groups),
        default=0.0,
    )
    return stored, working


def logits_element_bytes(fusion: CrossEntropyFusion, element_bytes: int) -> tuple[int, int]:
    """(kept, transient) bytes per logits element of one microbatch under the loss's
    cross-entropy implementation ``fusion``, for logits of ``element_bytes`` (the output
    layer's dtype). Kept: what the loss saves for its backward, per in-flight microbatch.
    Transient: what exists beside it only while one microbatch's loss runs (forward or
    backward), counted once per stage.

    - ``unfused`` (``tensor_parallel.vocab_parallel_cross_entropy``, Megatron-core's default
      ``cross_entropy_loss_fusion=False``) and ``native`` (``fused_vocab_parallel_cross_
      entropy``): ``calculate_logits_max`` casts the logits to fp32 (``.float()``, a copy
      unless they are fp32), exp and the softmax division run in place on that copy, which
      is saved (``ctx.save_for_backward(exp_logits, ...)``); the backward writes the
      gradient into it and casts it back to the logits' dtype. Kept 4; transient: the
      logits' own storage beside the fp32 copy (0 for fp32 logits). Sources:
      NVIDIA/Megatron-LM ``megatron/core/tensor_parallel/cross_entropy.py`` and
      ``megatron/core/fusions/fused_cross_entropy.py``.
    - ``te`` (Transformer Engine ``parallel_cross_entropy``, v2.2 to v2.17): the Triton
      kernel writes the gradient into the logits' own storage and saves that tensor
      (``cross_entropy_forward`` returns ``_input``), so no fp32 copy exists. Kept: the
      logits' element size; no transient. Source: NVIDIA/TransformerEngine
      ``transformer_engine/pytorch/triton/cross_entropy.py`` at v2.17.
    - ``te_fp32_grad`` (Transformer Engine from v2.18, commit 01bbe3eea "Fix the numerical
      issue with the Fused CE loss"): the gradient goes to a new fp32 buffer
      (``torch.empty_like(_input, dtype=torch.float32)``), which is saved. Kept 4;
      transient: the logits, alive while that buffer is written.
    """
    if fusion == "te":
        return element_bytes, 0
    if fusion == "te_fp32_grad":
        return FP32_BYTES, element_bytes
    if fusion in ("unfused", "native"):
        return FP32_BYTES, 0 if element_bytes == FP32_BYTES else element_bytes
    raise SpecError(
        f"cross-entropy fusion must be one of {', '.join(CROSS_ENTROPY_FUSIONS)}, got "
        f"{fusion!r}; te for Transformer Engine's parallel_cross_entropy"
    )


def output_microbatch_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    cross_entropy: CrossEntropyFusion = "unfused",
) -> tuple[float, float]:
    """(kept, transient) bytes of the output layer and loss for one microbatch on the last
    stage: kept, the final-norm input, the output-layer input and what the loss saves of the
    logits; transient, the logits bytes that exist only while one microbatch's loss runs
    (`logits_element_bytes`). The logits are in the activation dtype (Megatron-core's output
    layer is a bf16 ``ColumnParallelLinear``, never FP8), over the padded vocabulary split
    over TP."""
    x = _shard(job, plan)
    vocab = padded_vocab_size(model.vocab_size, plan.tp)
    inputs = 2 * x.element_bytes * x.tokens * model.hidden_size / x.sp
    logits = x.tokens * vocab / x.tp
    kept, transient = logits_element_bytes(cross_entropy, x.element_bytes)
    return inputs + kept * logits, transient * logits


def _embedding_bytes(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, dropout: bool = True
) -> float:
    """Token ids and the embedding dropout mask of one microbatch."""
    x = _shard(job, plan, dropout)
    return TOKEN_ID_BYTES * x.tokens + x.mask_bytes * x.tokens * model.hidden_size / x.sp


def stage_activations(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    *,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    keep_outputs: bool = False,
    cross_entropy: CrossEntropyFusion = "unfused",
    proj_saves_input: bool = False,
) -> StageActivations:
    """Peak activation bytes of one rank of pipeline stage ``pp_rank``; ``dropout``: the run
    applies hidden dropout (its masks are kept); ``keep_outputs``: every chunk but the
    model's last keeps the output it sent, [s/cp, b, h] (/tp with SP), for each in-flight
    microbatch (`costmodel.execution.ExecutionOptions.deallocate_pipeline_outputs` off),
    counted with the layer activations; ``cross_entropy``: the loss's implementation
    (`output_microbatch_bytes`); ``proj_saves_input``: the attention output projection keeps
    no FP8 copy of its input (`projection_saves_original_input`)."""
    m = plan.num_microbatches(job.global_batch_size)
    counts = in_flight_chunk_counts(plan.pp, plan.vpp, pp_rank, m)
    x, mask = _shard(job, plan, dropout, proj_saves_input), model.moe_layer_mask()
    by_kind = {kind: _layer_activations(model, x, plan, kind, attention) for kind in set(mask)}
    per_layer = {i: by_kind[is_moe] for i, is_moe in enumerate(mask)}
    layers_bytes = working = offloaded = in_flight = 0.0
    for chunk, count in enumerate(counts):
        layers = chunk_layers(model, plan, pp_rank, chunk)
        stored, chunk_working = _chunk_bytes(per_layer, plan, layers)
        moved = [_offloaded_layer_bytes(per_layer[i], plan, i) for i in layers]
        layers_bytes += count * stored
        offloaded += count * sum(moved)
        if count and plan.offload_modules:
            in_flight = max(in_flight, max(moved, default=0.0))
        working = max(working, chunk_working)
    # the offloaded activations leave the device (fine-grained: but one layer's, in flight)
    layers_bytes += in_flight - offloaded
    first, last = pp_rank == 0, pp_rank == plan.pp - 1
    kept, transient = output_microbatch_bytes(model, job, plan, cross_entropy)
    if keep_outputs and plan.pp > 1:
        sending = sum(counts) - (counts[-1] if last else 0)
        layers_bytes += sending * x.element_bytes * x.tokens * model.hidden_size / x.sp
    return StageActivations(
        in_flight_microbatches=sum(counts),
        layers_bytes=layers_bytes,
        recompute_working_bytes=working,
        embedding_bytes=counts[0] * _embedding_bytes(model, job, plan, dropout) if first else 0.0,
        output_bytes=counts[-1] * kept + transient if last and counts[-1] else 0.0,
        offloaded_bytes=max(offloaded - in_flight, 0.0),
    )


def _offloaded_layer_bytes(layer: LayerActivations, plan: ParallelPlan, index: int) -> float:
    """Bytes of one stored layer that CPU activation offloading moves to host memory:
    every saved tensor of the first ``cpu_offloading_num_layers`` layers (Transformer
    Engine's ``get_cpu_offload_context`` offloads layers in forward order and keeps the
    last ones, whose backward comes first), or the inputs of ``offload_modules`` not
    already recomputed (`costmodel.activation_savers`)."""
    if plan.cpu_offloading_num_layers:
        return layer.full_bytes if index < plan.cpu_offloading_num_layers else 0.0
    if not plan.offload_modules:
        return 0.0
    return offloaded_bytes(layer.tensors, plan.offload_modules, plan.selective_modules)
