"""Parameter counts of one layer's attention projections: standard or grouped-query
attention (with biases, attention sinks and the output gate) and DeepSeek-V3's multi-latent
attention; `specs.params` composes them into layers and models.

Multi-latent attention follows DeepSeek-V3 (arXiv 2412.19437, its `modeling_deepseek`):
``q_a`` (h x q_lora) + q norm + ``q_b`` (q_lora x a·(d_qk + d_rope)) when q_lora_rank is
set, otherwise one ``q`` (h x a·(d_qk + d_rope)); ``kv_a`` (h x (kv_lora + d_rope)) +
kv norm + ``kv_b`` (kv_lora x a·(d_qk + d_v)); output projection (a·d_v x h). The down
projections ``q_a`` and ``kv_a`` are replicated over tp
(`specs.params.LayerParams.latent_down_projections`, `mla_down_projection_params`):
Megatron-core's Transformer Engine layer spec builds
``linear_q_down_proj`` and ``linear_kv_down_proj`` as ``TELinear`` (``backend.linear()``,
``megatron/core/models/gpt/gpt_layer_specs.py``), which ``MLASelfAttention.__init__``
(``megatron/core/transformer/multi_latent_attention.py``, d98e8a64) builds with
``parallel_mode="duplicated"``: the whole matrix on every tp rank, marked
``sequence_parallel`` so that its gradient is all-reduced over tp with the norms'
(``TELinear.__init__``, ``finalize_model_grads._allreduce_non_tensor_model_parallel_grads``).
The up projections and the output projection are split over tp.
"""

from __future__ import annotations

from specs.mixer_params import linear_params
from specs.model import ModelSpec


def attention_params(model: ModelSpec) -> int:
    """Attention projections of one layer (standard/GQA or MLA), weights and biases; with
    ``attention_output_gate`` the QKV projection's output also holds a gate of the query's
    width (Megatron `SelfAttention` ``linear_qkv``, ``query_projection_size * 2`` in
    `get_query_key_value_tensors`)."""
    if model.uses_mla:
        return _mla_params(model)
    h, d = model.hidden_size, model.head_dim
    q, kv = d * model.num_attention_heads, d * model.query_groups
    qkv_bias = model.add_bias_linear or model.add_qkv_bias
    sinks = model.num_attention_heads if model.attention_sinks else 0
    gate = q if model.attention_output_gate else 0
    projections = linear_params(h, q + gate + 2 * kv, bias=qkv_bias) + linear_params(
        q, h, bias=model.add_bias_linear
    )
    return projections + sinks


def _mla_params(model: ModelSpec) -> int:
    """DeepSeek-V3 multi-latent attention projections (norms are counted separately)."""
    h, a = model.hidden_size, model.num_attention_heads
    d_qk, d_rope, d_v = mla_head_dims(model)
    kv_lora = model.kv_lora_rank or 0
    bias = model.add_bias_linear
    qkv_bias = bias or model.add_qkv_bias
    q_heads = a * (d_qk + d_rope)
    if model.q_lora_rank is None:
        query = linear_params(h, q_heads, bias=qkv_bias)
    else:
        query = linear_params(h, model.q_lora_rank, bias=bias) + linear_params(
            model.q_lora_rank, q_heads, bias=qkv_bias
        )
    key_value = linear_params(h, kv_lora + d_rope, bias=qkv_bias) + linear_params(
        kv_lora, a * (d_qk + d_v), bias=qkv_bias
    )
    return query + key_value + linear_params(a * d_v, h, bias=bias)


def mla_down_projection_params(model: ModelSpec) -> int:
    """MLA's down projections ``q_a`` (h -> q_lora, when ``q_lora_rank`` is set) and
    ``kv_a`` (h -> kv_lora + d_rope), with their biases (``add_bias_linear`` for ``q_a``,
    ``add_bias_linear`` or ``add_qkv_bias`` for ``kv_a``, as `attention_params` counts
    them): the part of `attention_params` that every tp rank holds whole (module
    docstring); 0 without MLA."""
    if not model.uses_mla:
        return 0
    h = model.hidden_size
    _, d_rope, _ = mla_head_dims(model)
    qkv_bias = model.add_bias_linear or model.add_qkv_bias
    key_value = linear_params(h, (model.kv_lora_rank or 0) + d_rope, bias=qkv_bias)
    if model.q_lora_rank is None:
        return key_value
    return key_value + linear_params(h, model.q_lora_rank, bias=model.add_bias_linear)


def mla_head_dims(model: ModelSpec) -> tuple[int, int, int]:
    """MLA's (qk_head_dim, qk_pos_emb_head_dim, v_head_dim); zeros for a model without MLA
    (ModelSpec sets all three or none)."""
    return model.qk_head_dim or 0, model.qk_pos_emb_head_dim or 0, model.v_head_dim or 0
