"""Forward FLOPs per token of a model's parts, by Megatron-LM's model-FLOP (MFU) convention:
attention projections and core, MLP and MoE, Mamba-2 and gated-DeltaNet mixers, logits,
multi-token prediction, LoRA adapters.

Convention (DESIGN.md, megatron-facts.md §1.3): Megatron-LM's current
`num_floating_point_operations` (`megatron/training/training.py`, `transformer_flops`).
Only GEMMs are counted, a multiply-add is 2 FLOPs, and every GEMM runs three times per
iteration (forward, input gradient, weight gradient), so the backward pass is twice the
forward. Causal attention counts half of the s² work. MoE layers count exactly top-k routed
experts per token plus the shared expert(s) (latent MoE: the experts on ℓ-wide rows plus
the h -> ℓ -> h projections); the router GEMM, norms, element-wise ops and token dropping
are not counted. Multi-latent attention uses Megatron's MLA terms, whose
``+1`` per latent rank stands for the latent norm.

Differences from Megatron's code: the logits use the model's unpadded vocabulary (Megatron
uses the vocabulary padded to a multiple of 128·tp, so its count is higher by
6·h·(V_padded - V) per token). Multi-token prediction follows Megatron's MTP terms
(`mtp_forward_flops_per_token`).

The per-token helpers return FORWARD FLOPs; multiply by `FORWARD_BACKWARD_FACTOR` for
forward + backward. Core attention per token depends on the sequence length s (each
token attends to s/2 keys on average under the causal mask). With packed sequences the
per-token helpers take the document length L (`specs.job.TrainingJob.attention_span_tokens`)
as their ``seq_length``: a token attends to L/2 keys of its own document, and a sliding
window applies within the document (`attended_keys_per_token` at L: a window of w >= L
keys changes nothing).

Hybrid models (``ModelSpec.hybrid_layer_pattern``) count each layer by its kind
(`specs.layer_kinds.LayerKind`), as Megatron-LM's ``hybrid_flops`` does
(`megatron/training/training.py`, d98e8a64): a ``*`` layer its attention projections and
core, a ``-`` layer its MLP, an ``E`` layer its top-k routed experts and shared expert, an
``M`` layer Megatron's ``mamba_layer_flops`` (`mamba_mixer_forward_flops_per_token`), plus
the logits. That formula takes the mixer's inner width as d = 2h whatever
``--mamba-num-heads`` says (only the dt width H follows it), so for a model whose
H·P ≠ 2h (Nemotron 3 Nano: 64·64 = 4096 against 2·2688 = 5376) the count is Megatron's,
not the shape of the mixer's GEMMs; paraplan keeps Megatron's so that MFU compares with
the throughput Megatron-LM logs.

A ``G`` layer (gated DeltaNet) counts Megatron's ``gdn_layer_flops``
(`gdn_mixer_forward_flops_per_token`), the same terms as the GPT path's linear-attention
term of ``transformer_flops``. Gated attention (``attention_output_gate``) adds the gate's
h x q GEMM to the attention projections as ``transformer_flops`` does
(``gate_projection_size``; Megatron's ``hybrid_flops`` leaves it out, but Qwen3-Next, the
model that uses it, trains through the GPT path of Megatron-Bridge's bridge, whose count
paraplan keeps so that MFU compares with the throughput that path logs).

The counts of a whole iteration, a LoRA job's among them, are `costmodel.iteration_flops`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specs.attention_params import mla_head_dims
from specs.errors import SpecError
from specs.finetune import LoraSpec
from specs.model import ModelSpec
from specs.params import lora_layer_params

FMA_FLOPS = 2
"""FLOPs per multiply-add."""
BACKWARD_FORWARD_RATIO = 2.0
"""Backward pass = input-gradient GEMM + weight-gradient GEMM = 2 x forward."""
FORWARD_BACKWARD_FACTOR = 1.0 + BACKWARD_FORWARD_RATIO
"""Forward + backward = 3 x forward (Megatron's "expansion factor" 3)."""


def _mlp_matrices(model: ModelSpec) -> int:
    """GEMMs of width F per MLP: 3 for SwiGLU (h->2F counts as two, F->h), 2 for GELU."""
    return 3 if model.activation == "swiglu" else 2


def attention_projection_forward_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of one attention layer's projections for one token (a hybrid model's
    layers without attention have none: `layer_forward_flops_per_token`).

    Standard/GQA: 2·(h·(q + 2·kv) + q·h), 2·(h·(2·q + 2·kv) + q·h) with
    ``attention_output_gate`` (module docstring). MLA (Megatron's terms): 2·(q-term + kv-term +
    h·d_rope + a·d_v·h) with q-term = q_lora·(h + a·(d_qk + d_rope) + 1) or
    h·a·(d_qk + d_rope) without query compression, kv-term = kv_lora·(h + a·(d_qk + d_v) + 1).
    """
    h, a = model.hidden_size, model.num_attention_heads
    if not model.uses_mla:
        q, kv = a * model.head_dim, model.query_groups * model.head_dim
        gate = q if model.attention_output_gate else 0
        return FMA_FLOPS * (h * (q + gate + 2 * kv) + q * h)
    d_qk, d_rope, d_v = mla_head_dims(model)
    q_heads = a * (d_qk + d_rope)
    q_lora = model.q_lora_rank
    q_term = h * q_heads if q_lora is None else q_lora * (h + q_heads + 1)
    kv_term = (model.kv_lora_rank or 0) * (h + a * (d_qk + d_v) + 1) + h * d_rope
    return FMA_FLOPS * (q_term + kv_term + a * d_v * h)


def core_attention_forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """Forward FLOPs of one layer's attention core (QKᵀ and attention x V) per token.

    Two GEMMs over s keys, halved by the causal mask: 2·(2·s·q)/2 = 2·s·q, q = a·d
    (Megatron: 6·q per token per unit of s for forward + backward). MLA:
    s·a·(d_qk + d_rope + d_v).
    """
    require_seq_length(seq_length)
    a = model.num_attention_heads
    if model.uses_mla:
        d_qk, d_rope, d_v = mla_head_dims(model)
        return FMA_FLOPS * seq_length * a * (d_qk + d_rope + d_v) / 2
    return FMA_FLOPS * seq_length * a * model.head_dim


def attended_keys_per_token(seq_length: int, window: int | None) -> float:
    """Mean keys a query attends to under the causal mask, optionally windowed.

    Full causal attention: s/2 (Megatron's count, Narayanan et al. 2021, eq. 3). A causal
    window of w keys (the query's own included, FlashAttention's local attention) gives
    query i min(i + 1, w) keys: Σ_i min(i + 1, w) / s = (w(w+1)/2 + (s - w)·w) / s for
    s > w; the full count applies when w >= s.
    """
    require_seq_length(seq_length)
    if window is None or window >= seq_length:
        return seq_length / 2
    return (window * (window + 1) / 2 + (seq_length - window) * window) / seq_length


def layer_core_attention_forward_flops_per_token(
    model: ModelSpec, layer_index: int, seq_length: int
) -> float:
    """`core_attention_forward_flops_per_token` of layer ``layer_index``: scaled by the
    windowed key count (`attended_keys_per_token`) on a sliding-window layer; 0 on a hybrid
    model's layer without attention."""
    if model.is_hybrid and model.layer_kinds()[layer_index].mixer != "attention":
        return 0.0
    full = core_attention_forward_flops_per_token(model, seq_length)
    if not model.window_layer_mask()[layer_index]:
        return full
    return full * attended_keys_per_token(seq_length, model.sliding_window) / (seq_length / 2)


def mlp_forward_flops_per_token(model: ModelSpec, layer_index: int) -> float:
    """Forward FLOPs of layer ``layer_index``'s MLP per token.

    Dense: 2·f·h·F. MoE: 2·f·h·(F_expert·top_k + F_shared), f = 3 (SwiGLU) or 2 (GELU);
    a latent MoE layer (``moe_latent_size`` ℓ): 2·f·ℓ·F_expert·top_k + 2·f·h·F_shared +
    4·h·ℓ, Megatron-LM's ``moe_layer_flops`` (`megatron/training/training.py`, d98e8a64) in
    both its GPT and hybrid paths.
    0 on a hybrid model's layer without a feed-forward part (``M``, ``*``).
    """
    _require_layer(model, layer_index)
    return _mlp_forward(model, model.layer_kinds()[layer_index].mlp)


def _mlp_forward(model: ModelSpec, mlp: str) -> float:
    """Forward FLOPs per token of a feed-forward part of kind ``mlp`` (`LayerKind.mlp`)."""
    if mlp == "none":
        return 0.0
    h, f = model.hidden_size, _mlp_matrices(model)
    if mlp != "moe":
        return FMA_FLOPS * f * h * model.ffn_hidden_size
    routed = model.expert_ffn_hidden_size * model.moe_top_k
    shared = FMA_FLOPS * f * h * model.moe_shared_expert_size
    return FMA_FLOPS * f * model.expert_hidden_size * routed + shared + _latent_forward(model)


def _latent_forward(model: ModelSpec) -> float:
    """Forward FLOPs per token of a latent MoE layer's two projections, h -> ℓ and ℓ -> h:
    2·2·h·ℓ (Megatron-LM ``moe_layer_flops``, ``4 * total_tokens * hidden_size *
    moe_latent_size``, `megatron/training/training.py`); 0 without ``moe_latent_size``."""
    return 2 * FMA_FLOPS * model.hidden_size * (model.moe_latent_size or 0)


def mamba_mixer_forward_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of one Mamba-2 mixer per token, Megatron-LM's ``mamba_layer_flops``
    (`megatron/training/training.py`, d98e8a64) divided by the tokens:

        2·h·(2·d + 2·G·N + H)  in_proj
        + 7·d·N                the SSD scan
        + 2·d·h                out_proj

    with Megatron's d = 2h (``d_in = 2 * hidden_size`` whatever ``mamba_num_heads``; module
    docstring), H = ``mamba_num_heads`` or d / P, G groups, state N. The depthwise
    convolution and the gated norm are not counted."""
    h = model.hidden_size
    d_in = 2 * h
    heads = model.mamba_num_heads or d_in // model.mamba_head_dim
    groups_state = model.mamba_num_groups * model.mamba_state_dim
    in_proj = FMA_FLOPS * h * (2 * d_in + 2 * groups_state + heads)
    return in_proj + ssd_scan_forward_flops_per_token(model) + FMA_FLOPS * d_in * h


def ssd_scan_forward_flops_per_token(model: ModelSpec) -> float:
    """The SSD scan term of one Mamba-2 mixer per token in Megatron-LM's
    ``mamba_layer_flops``: 7·d·N with d = 2h (`mamba_mixer_forward_flops_per_token`)."""
    return 7 * 2 * model.hidden_size * model.mamba_state_dim


def gdn_mixer_forward_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of one gated DeltaNet per token, Megatron-LM's ``gdn_layer_flops``
    (`megatron/training/training.py`, d98e8a64) divided by the tokens:

        2·h·(2·K + 2·V + 2·Hv)   in_proj (q, k, v, z, beta, alpha)
        + 2·k·(2·K + V)          the depthwise conv1d
        + 2·4·Hv·dv²             the gated delta rule (KKᵀ, VKᵀ, S(a(I - bKKᵀ)), SQ)
        + 2·V·h                  out_proj

    with K = key heads x key head dim, V = Hv value heads x dv, k the conv kernel. The
    delta-rule term is Megatron's, per value head dv² whatever the key head dim; the
    gated norm and the gates are not counted."""
    h, k_width, v_width = model.hidden_size, model.gdn_key_size, model.gdn_value_size
    heads = model.linear_num_value_heads
    in_proj = h * (2 * k_width + 2 * v_width + 2 * heads)
    conv = model.linear_conv_kernel_dim * (2 * k_width + v_width)
    return FMA_FLOPS * (in_proj + conv + v_width * h) + gdn_rule_flops_per_token(model)


def gdn_rule_flops_per_token(model: ModelSpec) -> float:
    """The gated delta rule term of one gated DeltaNet per token in Megatron-LM's
    ``gdn_layer_flops``: 2·4·Hv·dv² (`gdn_mixer_forward_flops_per_token`)."""
    return FMA_FLOPS * 4 * model.linear_num_value_heads * model.linear_value_head_dim**2


def logits_forward_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the output layer per token: 2·h·V (unpadded vocabulary)."""
    return FMA_FLOPS * model.hidden_size * model.vocab_size


def mtp_forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """Forward FLOPs per token of the multi-token-prediction depths, as Megatron-LM's
    ``num_floating_point_operations`` counts them (``megatron/training/training.py``,
    d98e8a64); 0 without MTP.

    Each depth counts its layers by kind as the main layers (`mtp_depth_layers_forward`)
    and one more output layer (logits ``(1 + mtp_num_layers)`` in both paths), once per
    depth whatever ``mtp_use_repeated_layer`` says (the compute runs at every depth).
    A transformer (``transformer_flops``: the MTP layers added to the dense or MoE count by
    the last layer's kind, ``num_layers + mtp_num_layers`` attention layers) also counts
    the "MTP norms and proj" term per depth, ``3h + 2h^2`` multiply-adds
    (`mtp_projection_forward_flops_per_token`). A hybrid model (``hybrid_flops``;
    ``get_hybrid_layer_counts`` in ``hybrid_layer_allocation.py`` counts the unified
    pattern's MTP part once per depth) counts no ``eh_proj`` and no norm, so neither does
    this. (``training_log`` counts a repeated depth's ``E`` layers once, but only for its MoE
    router-loss metrics, not for FLOPs.)"""
    if not model.mtp_num_layers:
        return 0.0
    per_depth = mtp_depth_layers_forward(model, seq_length) + logits_forward_flops_per_token(model)
    if not model.is_hybrid:
        per_depth += mtp_projection_forward_flops_per_token(model)
    return model.mtp_num_layers * per_depth


def mtp_projection_forward_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token of one MTP depth's "norms and proj" in Megatron-LM's
    ``transformer_flops`` (``megatron/training/training.py``, d98e8a64):
    2·(3h + 2h²), the ``eh_proj`` GEMM 2h -> h (2·2h·h) and a 3h term Megatron counts for
    the ``enorm``, ``hnorm`` and final norms."""
    h = model.hidden_size
    return FMA_FLOPS * (3 * h + 2 * h * h)


def mtp_depth_layers_forward(model: ModelSpec, seq_length: int) -> float:
    """Forward FLOPs per token of one MTP depth's layers (`ModelSpec.mtp_depth_kinds`), each
    by its kind: attention projections and full causal core, Mamba-2 mixer, MLP or MoE."""
    per_depth = 0.0
    for kind in model.mtp_depth_kinds():
        if kind.mixer == "attention":
            per_depth += attention_projection_forward_flops_per_token(model)
            per_depth += core_attention_forward_flops_per_token(model, seq_length)
        elif kind.mixer == "mamba":
            per_depth += mamba_mixer_forward_flops_per_token(model)
        elif kind.mixer == "gdn":
            per_depth += gdn_mixer_forward_flops_per_token(model)
        per_depth += _mlp_forward(model, kind.mlp)
    return per_depth


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerForwardFlops:
    """Forward FLOPs of one decoder layer per token, by part (a hybrid layer's absent parts
    are 0)."""

    attention_projection_flops: float
    """QKV (or MLA) and output projections."""
    core_attention_flops: float
    """QKᵀ and attention x V under the causal mask."""
    mlp_flops: float
    """Dense MLP, or top-k routed experts plus shared expert(s)."""
    mamba_flops: float = 0.0
    """A hybrid model's Mamba-2 mixer (`mamba_mixer_forward_flops_per_token`)."""
    gdn_flops: float = 0.0
    """A hybrid model's gated DeltaNet (`gdn_mixer_forward_flops_per_token`)."""

    @property
    def total_flops(self) -> float:
        """All forward FLOPs of the layer per token."""
        return (
            self.attention_projection_flops
            + self.core_attention_flops
            + self.mlp_flops
            + self.mamba_flops
            + self.gdn_flops
        )


def layer_forward_flops_per_token(
    model: ModelSpec, layer_index: int, seq_length: int
) -> LayerForwardFlops:
    """Forward FLOPs of layer ``layer_index`` per token of a length-``seq_length`` sequence,
    by the parts its kind holds (`specs.layer_kinds.LayerKind`)."""
    _require_layer(model, layer_index)
    mixer = model.layer_kinds()[layer_index].mixer
    attention = mixer == "attention"
    return LayerForwardFlops(
        attention_projection_flops=(
            attention_projection_forward_flops_per_token(model) if attention else 0.0
        ),
        core_attention_flops=layer_core_attention_forward_flops_per_token(
            model, layer_index, seq_length
        ),
        mlp_flops=mlp_forward_flops_per_token(model, layer_index),
        mamba_flops=mamba_mixer_forward_flops_per_token(model) if mixer == "mamba" else 0.0,
        gdn_flops=gdn_mixer_forward_flops_per_token(model) if mixer == "gdn" else 0.0,
    )


def forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """Forward FLOPs of the whole model (all layers and the logits, and a hybrid model's
    MTP depths, `mtp_forward_flops_per_token`) per token."""
    layers = layers_forward_flops_per_token(model, range(model.num_layers), seq_length)
    mtp = mtp_forward_flops_per_token(model, seq_length)
    return layers + logits_forward_flops_per_token(model) + mtp


def layers_forward_flops_per_token(
    model: ModelSpec, layers: Iterable[int], seq_length: int
) -> float:
    """Forward FLOPs per token of the given layers (the layer kinds are read once)."""
    kinds = model.layer_kinds()
    chosen = list(layers)
    attention = sum(kinds[i].mixer == "attention" for i in chosen)
    mamba = sum(kinds[i].mixer == "mamba" for i in chosen)
    projection = attention_projection_forward_flops_per_token(model)
    core = sum(layer_core_attention_forward_flops_per_token(model, i, seq_length) for i in chosen)
    mixers = attention * projection + core
    if mamba:
        mixers += mamba * mamba_mixer_forward_flops_per_token(model)
    gdn = sum(kinds[i].mixer == "gdn" for i in chosen)
    if gdn:
        mixers += gdn * gdn_mixer_forward_flops_per_token(model)
    return mixers + sum(_mlp_forward(model, kinds[i].mlp) for i in chosen)


def attention_layer_count(model: ModelSpec) -> int:
    """Layers with self-attention: every layer of a transformer, the ``*`` layers of a
    hybrid model."""
    return sum(kind.mixer == "attention" for kind in model.layer_kinds())


def backward_flops(forward_flops: float) -> float:
    """Backward FLOPs of work whose forward is ``forward_flops`` (2 x forward)."""
    return BACKWARD_FORWARD_RATIO * forward_flops


def lora_forward_flops_per_token(model: ModelSpec, lora: LoraSpec, layers: Iterable[int]) -> float:
    """Forward FLOPs per token of the LoRA adapters of the decoder layers ``layers``: 2 per
    adapter parameter (`specs.params.lora_layer_params` of each layer's kind), the A and B
    GEMMs of each target the layer holds."""
    kinds = model.layer_kinds()
    return FMA_FLOPS * sum(lora_layer_params(model, lora, kinds[i]) for i in layers)


def _require_layer(model: ModelSpec, layer_index: int) -> None:
    if not 0 <= layer_index < model.num_layers:
        raise SpecError(
            f"layer_index {layer_index} is outside 0..{model.num_layers - 1} for model "
            f"{model.name!r}; pass a layer of the model"
        )


def require_seq_length(seq_length: int) -> None:
    """`SpecError` for a sequence length below 1."""
    if seq_length < 1:
        raise SpecError(f"seq_length must be >= 1, got {seq_length}; pass the training length")
