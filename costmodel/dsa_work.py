"""Work of a DeepSeek-sparse-attention layer (``ModelSpec.dsa_indexer_*``, `specs.dsa_checks`)
beyond the multi-latent attention it runs over: FLOPs and bytes per token, counted from
Megatron-LM's implementation (`megatron/core/transformer/experimental_attention_variant/`:
``dsa.py`` `DSAIndexer` and `DSAttention`, ``absorbed_mla.py`` `AbsorbedMLASelfAttention`,
``dsa_cudnn_kernels.py`` the cuDNN / FlashMLA kernels of ``dsa_kernel_backend="cudnn"``).

Notation: s the sequence length, h the hidden size, a the attention heads, d_c the KV latent
(``kv_lora_rank``), d_r the rotary width (``qk_pos_emb_head_dim``), H_i and d_i the
indexer's heads and head dim, k the top-k, q_in the query latent (``q_lora_rank``, else h).

- **Megatron's model FLOPs are MLA's.** ``num_floating_point_operations``
  (`megatron/training/training.py`) has no DSA term: a DSA layer counts MLA's projections
  and the dense causal core over s/2 keys, no indexer and no top-k. `costmodel.flops`
  keeps that count so that MFU compares with the throughput Megatron logs; this module
  holds what the layer runs, which the Megatron runtime prices.
- **Absorption moves no FLOPs.** `AbsorbedMLASelfAttention` multiplies the query's
  non-rotary part by the key up-projection (``einsum("sbhd,hdk->sbhk", q_no_pe, up_k)``)
  and the core output by the value up-projection (``up_v_weight``) instead of expanding
  the latent with ``linear_kv_up_proj``: per token a·d_qk·d_c + a·d_c·d_v multiply-adds,
  the same as d_c·a·(d_qk + d_v) of the expansion, so MLA's projection count stands.
- **Indexer projections** (`indexer_projection_forward_flops_per_token`): ``linear_wq_b``
  q_in -> H_i·d_i, ``linear_wk`` h -> d_i, ``linear_weights_proj`` h -> H_i, on every token
  of the sequence the rank sees (duplicated over tp, after the SP gather).
- **Indexer scores** (`indexer_score_forward_flops_per_token`): per query and earlier key
  one dot product per head plus the ReLU-weighted sum over heads, 2·H_i·(d_i + 1) FLOPs,
  over s/2 keys on average (the causal count); cuDNN's ``indexer_forward_wrapper`` writes
  one fp32 logit per (query, key) of the [s_q, s_k] block and ``indexer_top_k_wrapper``
  reads it back and writes k int32 indices per query (`indexer_score_bytes_per_query`).
- **Sparse core** (`sparse_core_forward_flops_per_token`): MQA over the one latent key per
  position, QKᵀ on d_c + d_r channels and P·V on d_c, over the selected keys:
  query i attends to min(i + 1, k) keys (`selected_keys_per_token`, the causal-window count
  of `costmodel.flops.attended_keys_per_token` at w = k), so 2·a·(2·d_c + d_r) FLOPs per
  selected key. At s <= k the top-k covers every earlier key and the core does the dense
  causal work (s/2 keys per query), while the indexer still runs: the layer costs more than
  MLA there. Backward (FlashMLA forward, cuDNN ``sparse_attention_backward_wrapper``):
  recomputed scores, dP, dQ and dK on d_c + d_r, dV on d_c, 3·(d_c + d_r) + 2·d_c against
  the forward's 2·d_c + d_r: 2.53 x at GLM-5's sizes, the 2.5 x of
  `costmodel.attention_core.ATTENTION_BACKWARD_FLOPS_RATIO`.
- **Indexer loss** (``dsa_indexer_loss_coeff`` > 0, on layers that compute their top-k):
  the forward recomputes the head-summed attention distribution as the target
  (``sparse_attn_score_recompute_wrapper`` over the k selected keys with
  ``dsa_indexer_use_sparse_loss``, ``dense_attn_score_recompute_wrapper`` over s/2
  otherwise): 2·a·(d_c + d_r) per key (`indexer_loss_forward_flops_per_token`). Its
  backward (``indexer_backward_wrapper``) recomputes the indexer scores and forms dq and dk
  over the same keys, 3 x 2·H_i·d_i per key, and the three projections' weight gradients
  (`indexer_backward_flops_per_token`); no input gradient, since `DSAttention.forward`
  detaches the indexer's inputs (``x.detach()``, ``qr.detach()``). Without the loss the
  indexer has no backward at all.
"""

from __future__ import annotations

from costmodel.dsa_shapes import INDEX_BYTES, SCORE_BYTES
from costmodel.flops import FMA_FLOPS, attended_keys_per_token
from specs.attention_params import mla_head_dims
from specs.model import ModelSpec


def _indexer_dims(model: ModelSpec) -> tuple[int, int, int]:
    """(H_i, d_i, k) of a DSA model."""
    return (
        model.dsa_indexer_n_heads or 0,
        model.dsa_indexer_head_dim or 0,
        model.dsa_indexer_topk or 0,
    )


def selected_keys_per_token(model: ModelSpec, seq_length: int) -> float:
    """Mean keys the sparse core attends to per query: min(i + 1, k) averaged over the
    sequence; s/2, the dense causal count, when k >= s."""
    return attended_keys_per_token(seq_length, model.dsa_indexer_topk)


def indexer_projection_forward_flops_per_token(model: ModelSpec) -> float:
    """2·(q_in·H_i·d_i + h·d_i + h·H_i): the indexer's three linears on one token."""
    heads, dim, _ = _indexer_dims(model)
    h = model.hidden_size
    return FMA_FLOPS * ((model.q_lora_rank or h) * heads * dim + h * dim + h * heads)


def indexer_score_forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """2·H_i·(d_i + 1) per earlier key, over s/2 keys."""
    heads, dim, _ = _indexer_dims(model)
    return FMA_FLOPS * heads * (dim + 1) * seq_length / 2


def indexer_score_bytes_per_query(model: ModelSpec, keys: float) -> float:
    """Bytes one query moves through the indexer's logits and top-k: the fp32 logits of its
    ``keys`` keys written and read back, and k int32 indices written."""
    _, _, topk = _indexer_dims(model)
    return 2 * SCORE_BYTES * keys + INDEX_BYTES * topk


def sparse_core_forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """2·a·(2·d_c + d_r) per selected key (`selected_keys_per_token`)."""
    _, d_rope, _ = mla_head_dims(model)
    latent = model.kv_lora_rank or 0
    keys = selected_keys_per_token(model, seq_length)
    return FMA_FLOPS * model.num_attention_heads * (2 * latent + d_rope) * keys


def sparse_core_gathered_bytes_per_token(
    model: ModelSpec, seq_length: int, elem: int, heads: float
) -> float:
    """Bytes the sparse core moves per query on a rank of ``heads`` heads: one latent key row
    (d_c + d_r elements) per selected key, shared by the query's heads (MQA), and the
    query (d_c + d_r) and output (d_c) rows of each head."""
    _, d_rope, _ = mla_head_dims(model)
    latent = model.kv_lora_rank or 0
    keys = selected_keys_per_token(model, seq_length)
    return elem * ((latent + d_rope) * keys + heads * (2 * latent + d_rope))


def loss_keys_per_token(model: ModelSpec, seq_length: int) -> float:
    """Keys per query the indexer loss covers: the selected ones with the sparse loss, s/2
    with the dense one, none without the loss."""
    if model.dsa_indexer_loss_coeff == 0:
        return 0.0
    if model.dsa_indexer_use_sparse_loss:
        return selected_keys_per_token(model, seq_length)
    return seq_length / 2


def indexer_loss_forward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """2·a·(d_c + d_r) per loss key: the recomputed attention distribution."""
    _, d_rope, _ = mla_head_dims(model)
    width = (model.kv_lora_rank or 0) + d_rope
    keys = loss_keys_per_token(model, seq_length)
    return FMA_FLOPS * model.num_attention_heads * width * keys


def indexer_backward_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """3 x 2·H_i·d_i per loss key (recomputed scores, dq, dk) plus the projections' weight
    gradients (one forward's FLOPs); 0 without the loss."""
    keys = loss_keys_per_token(model, seq_length)
    if keys == 0:
        return 0.0
    heads, dim, _ = _indexer_dims(model)
    scores = 3 * FMA_FLOPS * heads * dim * keys
    return scores + indexer_projection_forward_flops_per_token(model)
