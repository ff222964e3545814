"""What a DeepSeek-sparse-attention layer keeps for its backward, besides MLA's latents
and the block's norm input (`dsa_tensors`, read by `costmodel.layer_activations`).

Megatron-LM `AbsorbedMLASelfAttention` and `DSAttention`
(`megatron/core/transformer/experimental_attention_variant/absorbed_mla.py`, ``dsa.py``)
with the cuDNN / FlashMLA backend, per microbatch on one rank of T = b·s/cp tokens, a/t
heads, e the activation element size:

- ``qkv_heads`` (what MLA's ``mla_up_proj`` recompute frees, the absorbed path's analogue of
  MLA's up-projected Q, K, V): the non-rotary query before absorption, the einsum's saved
  input (T·a/t·d_qk·e); the absorbed query with its rotary part, the core's query
  (T·a/t·(d_c + d_r)); and the core's single latent key head of d_c + d_r channels
  (the keys are values too, MQA), for the whole sequence under context parallelism
  (the all-gathered K, T·cp rows), not split over tp.
- ``attn_output``: the core's latent output (T·a/t·d_c, saved by the kernel and by the
  ``up_v`` einsum) and the value up-projection's output, the output projection's input
  (T·a/t·d_v at the saved-GEMM-input size, a tensor of its own).
- ``core_attention``: the kernel's fp32 log-sum-exp per head and token (as flash).
- ``dsa_topk``: the top-k indices, k int32 per token (``INDEX_BYTES``), kept by the sparse
  core for its backward on the layers that compute them (layers that reuse another's top-k
  read the same tensor).
- ``dsa_indexer`` (with the indexer loss): the indexer's query heads (T·H_i·d_i·e), key
  (T·d_i·e) and fp32 head weights (T·H_i·4), saved by the fused loss
  (`FusedDSAIndexerLoss.forward`: ``ctx.save_for_backward(q, weights, k, ...)``); its
  inputs are detached views of the latent and the norm output kept already.

The two indexer terms are weighted by the share of layers that hold an indexer
(`costmodel.dsa_shapes.indexer_layer_share`), as the layer costs are.
"""

from __future__ import annotations

from costmodel.activation_shard import ActivationShard
from costmodel.compute import FP32_BYTES
from costmodel.dsa_shapes import INDEX_BYTES, indexer_layer_share
from specs.attention_params import mla_head_dims
from specs.model import ModelSpec


def dsa_tensors(model: ModelSpec, x: ActivationShard) -> dict[str, float]:
    """The DSA layer's tensors by name (module docstring)."""
    e, n, t = x.element_bytes, x.tokens, x.tp
    heads = model.num_attention_heads / t
    d_qk, d_rope, d_v = mla_head_dims(model)
    latent = model.kv_lora_rank or 0
    width = latent + d_rope
    index_heads, index_dim = model.dsa_indexer_n_heads or 0, model.dsa_indexer_head_dim or 0
    share = indexer_layer_share(model)
    out = {
        "qkv_heads": e * n * heads * d_qk
        + x.core_qkv_bytes * (n * heads * width + n * x.cp * width),
        "attn_output": x.core_output_bytes * n * heads * latent
        + x.gemm_input_bytes * n * heads * d_v,
        "dsa_topk": share * INDEX_BYTES * n * (model.dsa_indexer_topk or 0),
    }
    if model.dsa_indexer_loss_coeff > 0:
        per_token = e * (index_heads * index_dim + index_dim) + FP32_BYTES * index_heads
        out["dsa_indexer"] = share * n * per_token
    return out
