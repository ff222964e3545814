"""Activation bytes one transformer layer keeps per microbatch on one rank, tensor by tensor
(`LayerActivations`); pipeline stages, recompute, offloading and the loss are in
`costmodel.activations`.

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
  DeepSeek sparse attention runs MLA absorbed: `costmodel.dsa_activations` gives its heads,
  output, top-k indices and indexer tensors.
- CP divides the sequence of every token-linear term; attention scores are s/cp x s.
- Attention kernel: ``flash`` (fused attention, Megatron's default through Transformer
  Engine) keeps only fp32 log-sum-exp statistics (4·b·a·s/(t·cp) bytes) besides Q, K, V
  and the output; ``materialized`` keeps Table 2's 5·a·s²·b term (softmax output, dropout
  mask and dropout output). Selective recompute drops exactly that core-attention part.

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
tensor the attention kernel keeps. With FP8 attention (Megatron-core
``fp8_dot_product_attention``) the fused attention core saves its Q, K, V and output in
the recipe's FP8 form instead (`costmodel.fp8_attention.core_saved_bytes`). A MoE layer keeps
its 16-bit pre-MLP norm output for the router (``router_input``) and, where its shared
expert's ``linear_fc1`` does not save that tensor itself (`costmodel.saved_inputs`), the
shared expert's quantized copy (``shared_fc1_input``; `_moe_input_tensors`); the other
``set_save_original_input`` calls act on tensors their recompute frees.

LoRA (`TrainingJob.lora`; Transformer Engine 4220403e, the pin of Megatron-Bridge v0.5.0,
``pytorch/module/linear.py`` and ``layernorm_linear.py``; Megatron-core d0b3b775
``tensor_parallel/layers.py``; Bridge ``peft/utils.py``, `lora_column_input_bytes`):

- A frozen TE linear saves no input for a wgrad GEMM (``backward_needs_input = ... and
  weight.requires_grad``): the untargeted QKV and FC1 inputs and the FC2 input are not
  kept, and the output projection keeps no FP8 copy of the attention output.
- A targeted ``LayerNormLinear`` (QKV, FC1) returns its norm output to the adapter
  (``return_layernorm_output``, gathered over the sequence with SP), which TE then keeps
  (it frees ``ln_out`` only for a frozen weight that does not return it): its own GEMM
  input, the FP8 (or NVFP4) row-wise copy, plus the 16-bit norm output the adapter's A
  saves, one tensor when both are the same 16-bit tensor (no SP, no quantization).
- A targeted row-parallel base (output projection, FC2): the adapter's A saves the base's
  16-bit input, which for FC2 is the activation output, otherwise freed once quantized.
- Each adapter's B saves A's output, T x rank elements (``{target}_adapter``).
- The attention core, norms, activation function and the residual keep what they keep
  in full training.

A parallel attention+MLP block (``ModelSpec.layer_block``): the two norms read the layer
input, kept once; no second residual sum is kept; a shared norm's output is kept once for
QKV and FC1; the two dropout masks cover the branches' unreduced T tokens
(`_mlp_input_tensors`).

Units: bytes per rank. ``e`` is the activation element size (2 for bf16/fp8, 4 for fp32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from costmodel.activation_shard import (
    ActivationShard,
    activation_shard,
    lora_adapter_tensors,
    lora_column_input_bytes,
    lora_row_input_bytes,
)
from costmodel.compute import FP32_BYTES, MASK_BYTES
from costmodel.dsa_activations import dsa_tensors
from costmodel.gdn_activations import gdn_tensors
from costmodel.mamba_activations import mamba_tensors
from costmodel.saved_inputs import shared_fc1_saves_input
from specs.attention_params import mla_head_dims
from specs.block_checks import is_parallel_block
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.plan import ParallelPlan

AttentionKernel = Literal["flash", "materialized"]


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
    """The saved tensors by name (the names of
    `costmodel.activation_savers.RECOMPUTE_TENSORS`), summing to full_bytes: what per-module
    recompute and activation offloading act on."""

    @property
    def selective_bytes(self) -> float:
        """Kept with selective (core-attention) recompute."""
        return self.full_bytes - self.core_attention_bytes


def _attention_tensors(
    model: ModelSpec, x: ActivationShard, kernel: AttentionKernel
) -> dict[str, float]:
    """Attention block: norm input, QKV GEMM input (the norm output), dropout mask, the
    projected heads (Q, K, V; MLA: with its latents), the core's own saved tensors, and
    the attention output (with its FP8 copy for the output projection). Gated attention
    (``attention_output_gate``; Megatron-core `Attention._apply_output_gate`, a fused
    ``x * sigmoid(gate)``): ``attn_gate`` holds the gate and the gated output the output
    projection keeps (at the saved-GEMM-input size)."""
    e, t, n = x.element_bytes, x.tp, x.tokens
    h, a = model.hidden_size, model.num_attention_heads
    out: dict[str, float] = {
        "attn_norm_input": e * n * h / x.sp,
        "qkv_input": lora_column_input_bytes(x, h, "linear_qkv"),
        "attn_mask": x.mask_bytes * n * h / _branch_mask_divisor(model, x),
        "core_attention": _core_attention_bytes(model, x, kernel),
    }
    if model.uses_mla:
        d_qk, d_rope, d_v = mla_head_dims(model)
        q_lora, kv_lora = model.q_lora_rank or 0, model.kv_lora_rank or 0
        out["mla_latents"] = e * n * (2 * q_lora + 2 * kv_lora + d_rope) / x.sp
        if model.uses_dsa:  # absorbed MLA, the top-k and the indexer
            out.update(dsa_tensors(model, x))
            return out
        out["qkv_heads"] = x.core_qkv_bytes * n * a * (2 * (d_qk + d_rope) + d_v) / t
        out["attn_output"] = (x.core_output_bytes + x.proj_copy_bytes) * n * a * d_v / t
        return out
    q, g = a * model.head_dim, model.query_groups
    # with tp > g each rank keeps a replica of one K/V head (Megatron allows tp % g == 0)
    kv_per_rank = g * model.head_dim / min(t, g)
    out["qkv_heads"] = x.core_qkv_bytes * n * (q / t + 2 * kv_per_rank)
    if model.qk_layernorm:
        out["qk_norm_input"] = qk_norm_saved_bytes(model, x)
    if model.attention_output_gate:
        # the gate's sigmoid-multiply keeps the gate and the core output (the kernel's);
        # the output projection keeps the gated product, a tensor of its own
        out["attn_output"] = x.core_output_bytes * n * q / t
        out["attn_gate"] = (x.element_bytes + x.gemm_input_bytes) * n * q / t
        return out
    out["attn_output"] = (x.core_output_bytes + x.proj_copy_bytes) * n * q / t
    return out


def qk_norm_saved_bytes(model: ModelSpec, x: ActivationShard) -> float:
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


def _core_attention_bytes(model: ModelSpec, x: ActivationShard, kernel: AttentionKernel) -> float:
    """What the attention core keeps beyond Q, K, V and its output."""
    heads_per_rank = model.num_attention_heads / x.tp
    if kernel == "flash":
        return FP32_BYTES * x.tokens * heads_per_rank
    scores = x.tokens * x.seq_length * heads_per_rank
    return (2 * x.element_bytes + MASK_BYTES) * scores


def _branch_mask_divisor(model: ModelSpec, x: ActivationShard) -> int:
    """Divisor of a hidden-dropout mask's T·h elements: the SP divisor in the sequential
    block; 1 in a parallel block, whose dropouts act on the branches' unreduced T-token
    outputs (`costmodel.runtimes.megatron.layer_shape.block_elementwise_s`)."""
    return 1 if is_parallel_block(model.layer_block) else x.sp


def _mlp_input_tensors(
    model: ModelSpec, x: ActivationShard, plan: ParallelPlan, kind: LayerKind
) -> dict[str, float]:
    """The MLP part's norm input, FC1 input (the norm output) and dropout mask.

    Parallel block (GPT-NeoX ``ParallelTransformerLayer.forward``, ``gpt_j_residual``):
    both norms read the layer input, which ``attn_norm_input`` counts, so
    ``mlp_norm_input`` is 0 (the sequential block's second norm reads the attention
    residual's sum, a tensor of its own). ``parallel`` keeps the second norm's output for
    FC1; ``parallel_shared_norm`` hands QKV and FC1 one norm output (``x1, x2 = x, x``),
    kept once in ``qkv_input``, so FC1 adds only its own FP8 or NVFP4 copy
    (`ActivationShard.fp8_copy_bytes`). The mask covers the MLP branch's unreduced T
    tokens (`_branch_mask_divisor`)."""
    h, n, e = model.hidden_size, x.tokens, x.element_bytes
    mask = x.mask_bytes * n * h / _branch_mask_divisor(model, x)
    if model.layer_block == "sequential":
        norm_input = e * n * h / x.sp
        if kind.is_moe:
            return {
                "mlp_norm_input": norm_input,
                **_moe_input_tensors(model, x, plan),
                "mlp_mask": mask,
            }
        fc1 = lora_column_input_bytes(x, h, "linear_fc1")
        return {"mlp_norm_input": norm_input, "fc1_input": fc1, "mlp_mask": mask}
    shared = model.layer_block == "parallel_shared_norm"
    fc1 = (x.fp8_copy_bytes if shared else x.gemm_input_bytes) * n * h / x.sp
    return {"mlp_norm_input": 0.0, "fc1_input": fc1, "mlp_mask": mask}


def _mlp_tensors(
    model: ModelSpec, x: ActivationShard, ffn: int, rows: float, tp: int, prefix: str
) -> dict[str, float]:
    """One MLP's inner activations for ``rows`` token rows, split over ``tp``: the first
    GEMM's output(s) (``<prefix>fc1_output``) and the activation output, the second GEMM's
    input (``<prefix>act_output``)."""
    up = 2 if model.activation == "swiglu" else 1
    return {
        f"{prefix}fc1_output": x.element_bytes * up * rows * ffn / tp,
        f"{prefix}act_output": x.gemm_input_bytes * rows * ffn / tp,
    }


def _moe_tensors(model: ModelSpec, x: ActivationShard, plan: ParallelPlan) -> dict[str, float]:
    """Router, shared expert(s) and routed experts (with their rows' probabilities); the
    experts' rows are `ModelSpec.expert_hidden_size` wide, and a latent MoE layer adds its
    projections' inputs (`_latent_tensors`). A gated shared expert (Megatron-core
    `SharedExpertMLP.forward`: ``output * sigmoid(linear(x, gate_weight))``) adds
    ``shared_gate``: the shared expert's output and the sigmoid's, on the rank's sequence
    shard, which the product keeps (the GEMV's input is the layer's norm output, kept
    already)."""
    routed_tokens = x.tokens / x.sp
    shared = _mlp_tensors(model, x, model.moe_shared_expert_size, x.tokens, x.tp, "shared_")
    if model.moe_shared_expert_gate:
        shared["shared_gate"] = x.element_bytes * routed_tokens * (model.hidden_size + 1)
    rows = model.moe_top_k * routed_tokens * (model.moe_capacity_factor or 1.0)
    expert_bytes = x.element_bytes if x.expert_fc1_saves_input else x.gemm_input_bytes
    etp, row_width = plan.expert_tp, model.expert_hidden_size
    return {
        "router": 2 * FP32_BYTES * routed_tokens * model.num_experts,  # logits, probabilities
        **shared,
        **_latent_tensors(model, x, routed_tokens),
        "expert_input": expert_bytes * rows * etp * row_width,  # gathered over expert TP
        **_mlp_tensors(model, x, model.expert_ffn_hidden_size, rows * etp, etp, "expert_"),
        "expert_row_probs": FP32_BYTES * rows * etp,  # the probability-weighted activation
    }


def _latent_tensors(model: ModelSpec, x: ActivationShard, tokens: float) -> dict[str, float]:
    """What a latent MoE layer's duplicated projections keep of their inputs on the rank's
    ``tokens`` (Megatron-LM `MoELayer.preprocess` / ``postprocess``, TE ``Linear`` saving
    its GEMM input): ``fc1_latent_proj`` reads the h-wide norm output that ``router_input``
    already counts, so it adds only its own FP8 or NVFP4 copy; ``fc2_latent_proj`` keeps
    the ℓ-wide combined rows. Empty without ``moe_latent_size``."""
    latent = model.moe_latent_size
    if latent is None:
        return {}
    return {
        "latent_fc1_input": x.fp8_copy_bytes * tokens * model.hidden_size,
        "latent_fc2_input": x.gemm_input_bytes * tokens * latent,
    }


def _moe_input_tensors(
    model: ModelSpec, x: ActivationShard, plan: ParallelPlan
) -> dict[str, float]:
    """What a MoE layer keeps of its pre-MLP norm output, a 16-bit tensor on the rank's
    T/sp tokens (the MoE layer spec keeps ``pre_mlp_layernorm`` a norm of its own).

    - ``router_input``: the 16-bit norm output itself. The router's gating GEMM
      (``TopKRouter.gating``, `moe/router.py`) runs ``RouterGatingLinearFunction``
      (`moe/moe_utils.py`), whose forward calls ``ctx.save_for_backward(inp, weight, bias)``
      on its input as given and casts to ``moe_router_dtype`` inside the function, so no
      fp32 copy is kept whatever the router dtype (the backward casts ``inp`` again); the
      same at the core pins of Megatron-Bridge v0.2.0 to v0.6.0 and at HEAD. A shared
      expert whose ``linear_fc1`` saves its original input
      (`costmodel.saved_inputs.shared_fc1_saves_input`), the ``moe`` checkpoint (its input
      is this tensor) and the latent projection's 16-bit view keep the same tensor: it is
      counted once.
    - ``shared_fc1_input``: the shared expert's quantized copy where its ``linear_fc1``
      keeps one (FP8 or NVFP4 with a trained weight and no ``set_save_original_input``:
      delayed scaling, or ``shared_experts`` recomputed); absent without a shared expert."""
    tokens_h = x.tokens * model.hidden_size / x.sp
    out = {"router_input": x.element_bytes * tokens_h}
    if model.moe_shared_expert_size:
        saves = shared_fc1_saves_input(model, plan, recipe_saves=x.proj_saves_input)
        frozen = x.lora is not None  # a frozen linear keeps no input for a wgrad GEMM
        out["shared_fc1_input"] = 0.0 if saves or frozen else x.fp8_copy_bytes * tokens_h
    return out


def layer_activations(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    layer_index: int,
    *,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    proj_saves_input: bool = False,
    fp8_attention_recipe: str | None = None,
    expert_fc1_saves_input: bool = False,
) -> LayerActivations:
    """Bytes layer ``layer_index`` keeps per microbatch on one rank (see module docstring);
    ``proj_saves_input``: `projection_saves_original_input` of the run's FP8 recipe;
    ``fp8_attention_recipe``: that recipe when attention runs in FP8, else None;
    ``expert_fc1_saves_input``: `costmodel.saved_inputs.expert_fc1_saves_input` of the run."""
    if not 0 <= layer_index < model.num_layers:
        raise SpecError(
            f"layer_index {layer_index} is outside 0..{model.num_layers - 1} for model "
            f"{model.name!r}; pass a layer of the model"
        )
    return kind_activations(
        model,
        job,
        plan,
        model.layer_kinds()[layer_index],
        attention=attention,
        dropout=dropout,
        proj_saves_input=proj_saves_input,
        fp8_attention_recipe=fp8_attention_recipe,
        expert_fc1_saves_input=expert_fc1_saves_input,
    )


def kind_activations(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    kind: LayerKind,
    *,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    proj_saves_input: bool = False,
    fp8_attention_recipe: str | None = None,
    expert_fc1_saves_input: bool = False,
) -> LayerActivations:
    """`layer_activations` of a layer of ``kind`` (`specs.layer_kinds.LayerKind`) of the
    model's shape, whether or not the model has one."""
    x = activation_shard(
        job, plan, dropout, proj_saves_input, fp8_attention_recipe, expert_fc1_saves_input
    )
    return shard_layer_activations(model, x, plan, kind, attention)


def shard_layer_activations(
    model: ModelSpec,
    x: ActivationShard,
    plan: ParallelPlan,
    kind: LayerKind,
    attention: AttentionKernel,
) -> LayerActivations:
    """`layer_activations` of a layer of ``kind`` on the shard ``x``: its token mixer's
    tensors (`_attention_tensors`, a Mamba-2 mixer's `costmodel.mamba_activations.mamba_tensors`,
    a gated DeltaNet's `costmodel.gdn_activations.gdn_tensors`)
    and its MLP's or routed experts' with their pre-norm input."""
    h, n, e = model.hidden_size, x.tokens, x.element_bytes
    tensors: dict[str, float] = {}
    if kind.mixer == "attention":
        tensors.update(_attention_tensors(model, x, attention))
    elif kind.mixer == "mamba":
        tensors.update(mamba_tensors(model, x))
    elif kind.mixer == "gdn":
        tensors.update(gdn_tensors(model, x))
    if kind.mlp != "none":
        tensors.update(_mlp_input_tensors(model, x, plan, kind))
    if kind.is_moe:
        tensors.update(_moe_tensors(model, x, plan))
    elif kind.mlp == "dense":
        tensors.update(_mlp_tensors(model, x, model.ffn_hidden_size, n, x.tp, ""))
    if x.lora is not None and kind.mlp == "dense":  # FC2's input: the adapter's, 16-bit, or none
        kept = lora_row_input_bytes(x, "linear_fc2")
        tensors["act_output"] = kept * n * model.ffn_hidden_size / x.tp
    tensors.update(lora_adapter_tensors(x, kind))
    return LayerActivations(
        full_bytes=sum(tensors.values()),
        core_attention_bytes=tensors.get("core_attention", 0.0),
        input_bytes=e * n * h / x.sp,
        tensors=tuple(tensors.items()),
    )
