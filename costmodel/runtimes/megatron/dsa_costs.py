"""Per-microbatch costs of the DeepSeek-sparse-attention part of an attention block on one
rank (Megatron-LM `DSAttention` with ``dsa_kernel_backend="cudnn"``, the backend of
Megatron-Bridge's GLM-5 perf recipes): the sparse core that replaces MLA's dense core
(`dsa_core_s`) and the lightning indexer with its top-k and loss (`indexer_pair`). The
work is counted in `costmodel.dsa_work`; this module prices it with the profile's rates.

- **Sparse core** (FlashMLA sparse prefill forward, cuDNN ``sparse_attention_backward``):
  its FLOPs at the profile's fused-attention rate (`costmodel.attention_core`, the curve of
  the nearest head dim, read at k keys: each query's inner loop runs over its k selected
  keys), and at least the bytes of the gathered latent rows at the memory-bound bandwidth.
  An MQA core over a 576-wide latent shared by every head has an arithmetic intensity near
  2·a_rank FLOP/byte, so at a_rank = 64 it is near the ridge of an H100, and memory-bound
  below it. The backward moves twice the forward's bytes (reads again, accumulates dKV).
- **Indexer**: its three projections as GEMMs over the T tokens of the rank (duplicated
  over tp), the scores as a GEMM-rate kernel (FLOPs at the peak times the GEMM efficiency
  of a (T·H_i) x s x d_i product) or at least the bytes of the fp32 logits it writes, the
  top-k read of those logits and write of the indices (`costmodel.dsa_work`); the loss's
  recomputed attention distribution at the fused-attention rate, its backward
  (`costmodel.dsa_work.indexer_backward_flops_per_token`) at the GEMM rate.
- **Index sharing**: layer costs are priced per layer kind, so the indexer's cost is
  weighted by the share of layers that hold one (`costmodel.dsa_shapes.indexer_layer_share`):
  the iteration's total is exact, a stage's share is the mean.
- **Context parallelism** (``cp_comm_type="allgather"``, rule
  ``dsa_context_parallel_all_gather``): each rank gathers the latent key rows and the
  indexer keys of the whole sequence (`dsa_gathered_width`) and scores its T queries
  against them; causal work per query averages s/2 keys over the zigzag halves.
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.attention_core import attention_core_time_s
from costmodel.compute import Direction
from costmodel.dsa_shapes import SCORE_BYTES, indexer_layer_share
from costmodel.dsa_work import (
    indexer_backward_flops_per_token,
    indexer_loss_forward_flops_per_token,
    indexer_projection_forward_flops_per_token,
    indexer_score_bytes_per_query,
    indexer_score_forward_flops_per_token,
    loss_keys_per_token,
    sparse_core_forward_flops_per_token,
    sparse_core_gathered_bytes_per_token,
)
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3
from profiles.lookup import gemm_efficiency, peak_flops
from profiles.schema import HardwareProfile
from specs.attention_params import mla_head_dims
from specs.model import ModelSpec


def dsa_gathered_width(model: ModelSpec) -> float:
    """Half the channels per token that context parallelism gathers for a DSA layer, the
    latent key row (d_c + d_r) and the indexer key (d_i), in the key-or-value width
    convention of `costmodel.runtimes.megatron.attention_costs` (which moves 2 x it)."""
    _, d_rope, _ = mla_head_dims(model)
    return ((model.kv_lora_rank or 0) + d_rope + (model.dsa_indexer_head_dim or 0)) / 2


def _latent_width(model: ModelSpec) -> int:
    """d_c + d_r: the query/key head dim of the absorbed core."""
    return (model.kv_lora_rank or 0) + mla_head_dims(model)[1]


def _fused_s(
    model: ModelSpec,
    profile: HardwareProfile,
    x: LayerShape,
    flops: float,
    keys: float,
    direction: Direction,
) -> float:
    """Seconds of a fused-attention-rate kernel of ``flops`` forward FLOPs (causally
    counted) over ``keys`` keys per query, on the rank's heads."""
    return attention_core_time_s(
        profile,
        causal_forward_flops=flops,
        batch_heads=x.micro_batch * model.num_attention_heads / x.tp,
        seq_q=x.seq / x.cp,
        seq_kv=max(int(keys), 1),
        head_dim=_latent_width(model),
        precision=x.precision,
        kernel="flash",
        direction=direction,
    )


def dsa_core_s(model: ModelSpec, profile: HardwareProfile, x: LayerShape) -> dict[str, float]:
    """Seconds of the sparse core by direction (``forward``, ``backward``), module docstring."""
    flops = sparse_core_forward_flops_per_token(model, x.span) * x.tokens / x.tp
    keys = min(model.dsa_indexer_topk or 1, x.span)
    heads = model.num_attention_heads / x.tp
    moved = sparse_core_gathered_bytes_per_token(model, x.span, x.elem, heads) * x.tokens
    out = {}
    for direction, scale in (("forward", 1), ("backward", 2)):
        compute_s = _fused_s(model, profile, x, flops, keys, direction)
        out[direction] = max(compute_s, ops.memory_bound_time_s(profile, scale * moved))
    return out


def _gemm_rate_s(
    profile: HardwareProfile, x: LayerShape, flops: float, m: float, n: float, k: float
) -> float:
    """``flops`` at the peak times the GEMM efficiency of an (m x k) @ (k x n) shape."""
    shape = (max(int(m), 1), max(int(n), 1), max(int(k), 1))
    rate = peak_flops(profile, x.dtype) * gemm_efficiency(profile, *shape, x.dtype)
    return flops / rate + ops.op_overhead_s(profile)


def indexer_pair(model: ModelSpec, profile: HardwareProfile, x: LayerShape) -> tuple[float, float]:
    """(forward, backward) seconds of the indexer, its top-k and its loss on one rank,
    weighted by the share of layers that hold an indexer (module docstring)."""
    heads, dim = model.dsa_indexer_n_heads or 0, model.dsa_indexer_head_dim or 0
    tokens, h = x.tokens, model.hidden_size
    proj = indexer_projection_forward_flops_per_token(model)
    proj_fwd = sum(
        gemm3(profile, x, tokens, n, k)[0]
        for n, k in ((heads * dim, model.q_lora_rank or h), (dim, h), (heads, h))
    )
    keys = x.span / 2  # causal mean over the rank's queries
    score_flops = indexer_score_forward_flops_per_token(model, x.span) * tokens
    score_s = _gemm_rate_s(profile, x, score_flops, tokens * heads, keys, dim)
    moved = indexer_score_bytes_per_query(model, x.span) * tokens
    written = SCORE_BYTES * x.span * tokens  # the logits; top-k reads them, writes indices
    forward = max(score_s, ops.memory_bound_time_s(profile, written)) + proj_fwd
    forward += ops.memory_bound_time_s(profile, moved - written)
    backward = 0.0
    loss_keys = loss_keys_per_token(model, x.span)
    if loss_keys:
        loss_flops = indexer_loss_forward_flops_per_token(model, x.span) * tokens
        forward += _fused_s(model, profile, x, loss_flops, loss_keys, "forward")
        back_flops = indexer_backward_flops_per_token(model, x.span) * tokens
        score_back = back_flops - proj * tokens
        backward = _gemm_rate_s(profile, x, score_back, tokens * heads, loss_keys, dim)
        backward += sum(
            gemm3(profile, x, tokens, n, k)[2]
            for n, k in ((heads * dim, model.q_lora_rank or h), (dim, h), (heads, h))
        )
    share = indexer_layer_share(model)
    return share * forward, share * backward
