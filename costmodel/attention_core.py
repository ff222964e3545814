"""Time of the attention core on one device, from a `HardwareProfile`.

Two kernels (`costmodel.compute.AttentionKernelName`):

- ``flash`` (fused, FlashAttention/cuDNN, Megatron's default through Transformer Engine)
  divides the causal-counted FLOPs by the profile's measured attention throughput, and
  takes at least the exponential time of the special function units (`flash_exp_time_s`);
- ``materialized`` (Megatron's pre-2022 path: QKᵀ GEMM, fused scale-mask-softmax,
  dropout, attention x V GEMM) runs both batched GEMMs over the full s x s square (the
  causal mask is applied after the GEMM, so no work is saved,
  `costmodel.compute.batched_gemm_time_s`) and moves the score matrix through memory for
  softmax and dropout (`softmax_dropout_time_s`).

Every kernel adds `ComputeProfile.op_overhead_s` (`costmodel.compute.op_overhead_s`).

The flash kernel reads the curve of the job's attention dtype: bf16 (fp32 in fp32 jobs), or
the FP8 recipe's ``fp8`` or ``mxfp8`` curve under FP8 attention
(`costmodel.fp8_attention.attention_dtype`), for which a profile without the curve is an
error rather than the GEMM-rate estimate.
"""

from __future__ import annotations

from costmodel.compute import (
    MASK_BYTES,
    AttentionKernelName,
    Direction,
    batched_gemm_time_s,
    element_bytes,
    gemm_dtype,
    memory_bound_time_s,
    op_overhead_s,
)
from costmodel.fp8_attention import (
    FP8_ATTENTION_KERNEL_RULE,
    attention_dtype,
    check_fp8_attention,
)
from profiles.lookup import attention_tflops, gemm_efficiency, peak_flops
from profiles.schema import HardwareProfile
from specs.errors import SpecError

PACKED_KERNEL_RULE = "packed_sequences_need_fused_attention"
"""Rule id of the refusal of packed sequences on the materialized attention kernel
(`check_packed_attention`)."""

ATTENTION_BACKWARD_FLOPS_RATIO = 2.5
"""Fused attention backward FLOPs over forward FLOPs: dQ, dK, dV plus the recomputed
scores (FlashAttention-2 paper, arXiv 2307.08691, benchmark convention)."""


def softmax_dropout_time_s(
    profile: HardwareProfile, scores: float, elem: int, direction: Direction
) -> float:
    """Materialized attention scores (``scores`` elements): fused scale-mask-softmax, then
    dropout with a 1-byte mask (Megatron `FusedScaleMaskSoftmax` and attention dropout).

    Forward: softmax reads and writes the scores (2·e), dropout reads them and writes the
    output and the mask (2·e + 1). Backward: dropout reads the gradient and the mask, writes
    the gradient (2·e + 1); softmax reads probabilities and gradient, writes the score
    gradient (3·e).
    """
    per_element = 4 * elem + MASK_BYTES if direction == "forward" else 5 * elem + MASK_BYTES
    return memory_bound_time_s(profile, per_element * scores, num_ops=2)


def attention_core_time_s(
    profile: HardwareProfile,
    *,
    causal_forward_flops: float,
    batch_heads: float,
    seq_q: float,
    seq_kv: int,
    head_dim: int,
    precision: str,
    kernel: AttentionKernelName,
    direction: Direction,
    fp8_attention_recipe: str | None = None,
) -> float:
    """One pass of the attention core on one rank.

    ``causal_forward_flops`` are the forward FLOPs with the causal mask counted as half
    (`costmodel.flops.core_attention_forward_flops_per_token` x tokens on the rank).

    flash: time = FLOPs of the pass (backward 2.5 x forward) / the profile's throughput at
    ``seq_kv`` (per-chunk length under context parallelism) and ``head_dim``. When the
    profile has no attention curve for the dtype (a CPU profile, say), the causal FLOPs run
    at the GEMM efficiency of the QKᵀ shape instead. The pass takes at least the
    exponential time of `flash_exp_time_s` on profiles with an SFU rate.
    ``fp8_attention_recipe`` (the FP8 recipe under FP8 attention, else None) selects the
    recipe's FP8 curve; `SpecError` from `costmodel.fp8_attention.check_fp8_attention` for
    a job, recipe or profile without it, or with the materialized kernel.

    materialized: forward runs two batched GEMMs over the full ``seq_q x seq_kv`` square
    (the causal mask is applied to the scores, so no work is saved) and the
    softmax/dropout over ``batch_heads·seq_q·seq_kv`` scores; backward runs four batched
    GEMMs (dP, dV, dQ, dK) and the backward softmax/dropout.
    """
    if kernel not in ("flash", "materialized"):
        raise SpecError(f"attention kernel must be 'flash' or 'materialized', got {kernel!r}")
    if causal_forward_flops <= 0:
        return 0.0
    att_dtype = attention_dtype(precision, fp8_attention_recipe)
    if fp8_attention_recipe is not None:
        if kernel != "flash":
            raise SpecError(
                f"[{FP8_ATTENTION_KERNEL_RULE}] FP8 attention runs the fused (flash) kernel, "
                f"got kernel {kernel!r}: use 'flash', or price without FP8 attention"
            )
        check_fp8_attention(precision, fp8_attention_recipe, profile)
    ratio = 1.0 if direction == "forward" else ATTENTION_BACKWARD_FLOPS_RATIO
    if kernel == "flash":
        tensor_s = _flash_time_s(
            profile, causal_forward_flops * ratio, seq_kv, head_dim, att_dtype, direction
        )
        return max(tensor_s, flash_exp_time_s(profile, causal_forward_flops, head_dim))
    dtype = gemm_dtype(att_dtype)
    batch = max(round(batch_heads), 1)
    q, kv, d = max(round(seq_q), 1), max(int(seq_kv), 1), head_dim
    if direction == "forward":  # QKᵀ, then probabilities x V
        shapes = ((q, kv, d), (q, d, kv))
    else:  # dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q
        shapes = ((q, kv, d), (kv, d, q), (q, d, kv), (kv, d, q))
    gemm_s = sum(batched_gemm_time_s(profile, batch, *shape, dtype) for shape in shapes)
    scores = batch_heads * seq_q * seq_kv
    return gemm_s + softmax_dropout_time_s(profile, scores, element_bytes(precision), direction)


FLASH_FORWARD_FLOPS_PER_SCORE_HEAD_DIM = 4.0
"""Forward tensor FLOPs of a fused-attention kernel per score element and per unit of head
dimension: QKᵀ and P·V, 2·d each (the FlashAttention FLOP convention,
`profiles.lookup.attention_tflops`)."""


def flash_exp_time_s(profile: HardwareProfile, causal_forward_flops: float, head_dim: int) -> float:
    """Seconds the special function units need for one pass of a fused-attention kernel:
    one exponential per (causally counted) score element, forward P = exp(S - m) and
    backward the recomputed P = exp(S - lse), at `ComputeProfile.exp_per_s`; 0 without
    that figure.

    Score elements = ``causal_forward_flops`` / (4·d). FlashAttention-4 (together.ai/blog/
    flashattention-4) overlaps the exponentials with the MMAs in a ping-pong pipeline, so
    `attention_core_time_s` takes the larger of this and the tensor time, not their sum;
    the MUFU unit does 16 exponentials per clock per SM on Hopper and Blackwell alike
    (same source), which caps a d = 64 forward on B200 near 5e12·256 = 1.28 PFLOP/s.
    """
    if profile.compute.exp_per_s <= 0.0 or head_dim < 1:
        return 0.0
    scores = causal_forward_flops / (FLASH_FORWARD_FLOPS_PER_SCORE_HEAD_DIM * head_dim)
    return scores / profile.compute.exp_per_s


def _flash_time_s(
    profile: HardwareProfile,
    flops: float,
    seq_kv: int,
    head_dim: int,
    dtype: str,
    direction: Direction,
) -> float:
    has_curve = any(
        c.direction == direction and c.dtype == dtype for c in profile.compute.attention
    )
    if has_curve:
        tflops = attention_tflops(profile, direction, max(int(seq_kv), 1), head_dim, dtype)
        return flops / (tflops * 1e12) + op_overhead_s(profile)
    m = max(int(seq_kv), 1)
    rate = peak_flops(profile, dtype) * gemm_efficiency(profile, m, m, head_dim, dtype)
    return flops / rate + op_overhead_s(profile)


def check_packed_attention(packed_document_tokens: int | None, kernel: AttentionKernelName) -> None:
    """`SpecError` for packed sequences on the materialized kernel: Megatron-core's local
    ``DotProductAttention.forward`` asserts ``packed_seq_params is None``
    (``megatron/core/transformer/dot_product_attention.py``); only Transformer Engine's
    fused kernels take the THD layout (``TEDotProductAttention``, ``qkv_format="thd"``)."""
    if packed_document_tokens is None or kernel == "flash":
        return
    raise SpecError(
        f"[{PACKED_KERNEL_RULE}] packed sequences (packed_document_tokens "
        f"{packed_document_tokens}) run Transformer Engine's fused attention in the THD layout, "
        f"got attention kernel {kernel!r}: use the 'flash' kernel, or drop --packed-doc-len"
    )
