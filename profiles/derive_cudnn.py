"""Fused-attention curves from NVIDIA's measured cuDNN SDPA training benchmarks
(NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training``; the series are transcribed in
`profiles.derive_cudnn_runs`): every curve of the Blackwell profiles, and the fp8 curves of
the Hopper profiles.

Megatron-core with Transformer Engine runs cuDNN's fused attention on Blackwell, so these
figures replace the H100 FlashAttention-3 curves scaled by the GEMM rate that the Blackwell
profiles carried before. Sources ([Sx] keys of `profiles.derive_rules.SOURCES`):

- [S57] cudnn_fe bf16 rows (cuDNN 9.17.0), Llama-3.1-405B attention (batch 1, 128 query
  heads, 8 KV heads, head dim 128, causal ``top_left``), seq 512-131072: the head-dim-128
  bf16 curves.
- [S58] one cuDNN 9.22.0 run (batch 2, seq 2048-32768, causal, non-deterministic
  backward) of Llama 3.1 (64/8 heads, d 128), DeepSeek-V3 MLA (128 heads, d_qk 192, d_vo
  128) and Qwen3.5 (32/2 heads, d 256, forward only), in bf16 and, for Llama and
  DeepSeek-V3, ``fp8`` and ``mxfp8``. The ratio of each (dtype, head dim) series to the
  same run's bf16 Llama figure carries it onto the [S57] curve, so every curve of a profile
  describes one cuDNN version.
- [S61] an H200 run of the same benchmark (cuDNN 9.19.1, Llama 3.1 attention, d 128) in
  bf16 and ``fp8``: its fp8/bf16 ratio carries the Hopper profiles' bf16 curves to fp8
  (`hopper_fp8_curves`).

Transformer Engine runs attention in FP8 with the FP8 recipe's own scaling
(``fp8_dpa``): per-tensor scaling (delayed, current) on cuDNN's ``fp8`` kernels, MXFP8 on
its ``mxfp8`` kernels; the curves keep those two dtype names.

FLOP convention. The benchmark (``benchmark_single_sdpa.py``, ``flops``) counts the
s(s+1)/2 unmasked score elements of a causal mask (diagonal included), forward
2·(d_qk + d_vo) and backward 2·(3·d_qk + 2·d_vo) FLOP per element, per batch and query
head, over the kernels' device time (torch profiler). The cost model
(`profiles.lookup.attention_tflops`) counts s²/2 elements, forward 2·(d_qk + d_vo) and
backward 2.5 times the forward (`costmodel.attention_core.ATTENTION_BACKWARD_FLOPS_RATIO`). So a
measured rate converts as ``ours = theirs · s/(s+1)``, backward also
``· 2.5·(d_qk + d_vo) / (3·d_qk + 2·d_vo)`` (1 when d_qk = d_vo; 800/832 for MLA).
"""

from __future__ import annotations

from profiles.derive_cudnn_runs import (
    FP8_RESULTS_9_22,
    H200_LLAMA_9_19,
    LLAMA_D128,
    RESULTS_9_22,
    SdpaSeries,
)
from profiles.derive_rules import h100_fa3_curves
from profiles.schema_device import AttentionCurve, AttentionPoint

BACKWARD_FLOPS_RATIO = 2.5
"""The cost model's backward/forward FLOP ratio (`costmodel.attention_core`, which profiles may
not import): the conversion's target convention."""

FP8_ATTENTION_DTYPES = ("fp8", "mxfp8")
"""Curve dtypes of FP8 attention: cuDNN's per-tensor scaled ``fp8`` and block-scaled
``mxfp8`` kernels (module docstring)."""


def converted_tflops(series: SdpaSeries, direction: str, index: int) -> float:
    """Point ``index`` of ``series`` in the cost model's convention (module docstring)."""
    s = series.seq_lens[index]
    qk, vo = series.head_dim_qk, series.head_dim_vo
    if direction == "forward":
        return series.forward[index] * s / (s + 1)
    return (
        series.backward[index] * s / (s + 1) * BACKWARD_FLOPS_RATIO * (qk + vo) / (3 * qk + 2 * vo)
    )


def _ratio_at(num: SdpaSeries, den: SdpaSeries, direction: str, seq: int) -> float:
    """Converted ``num`` over ``den`` at ``seq``, held at the nearer end outside their seqs;
    inside, ``seq`` must be one of them (the series share
    `profiles.derive_cudnn_runs.RESULT_SEQS`, a subset of the lengths the curves are built
    on)."""
    seqs = num.seq_lens
    i = seqs.index(min(max(seq, seqs[0]), seqs[-1]))
    return converted_tflops(num, direction, i) / converted_tflops(den, direction, i)


def _fa3_d64_ratio(direction: str, seq: int) -> float:
    """H100 FA3 d 64 over d 128 at ``seq`` [S27][S28], held beyond the charted lengths."""
    curves = {
        (c.direction, c.head_dim): c.points for c in h100_fa3_curves(1.0) if c.dtype == "bf16"
    }
    d64, d128 = curves[(direction, 64)], curves[(direction, 128)]

    def at(points: tuple[AttentionPoint, ...]) -> float:
        return [p.tflops for p in points if p.seq_len <= max(seq, points[0].seq_len)][-1]

    return at(d64) / at(d128)


def _head_dim_curves(
    gpu: str, runs: dict[int, SdpaSeries], dtypes: tuple[str, ...], scale: float
) -> list[AttentionCurve]:
    """Curves of one kernel (the [S58] series ``runs``, keyed by head dim) stored under
    ``dtypes``: at every [S57] seq, the converted [S57] d128 bf16 rate times the converted
    ratio of the head dim's series to the bf16 Llama series of [S58] at that seq (held at
    2048 below and 32768 above), times ``scale``; head dim 64 takes the d128 ratio times H100
    FA3's d 64 / d 128 ratio [S27][S28]. A head dim without a backward series gets no
    backward curve."""
    base, llama = LLAMA_D128[gpu], RESULTS_9_22[gpu][128]
    curves = []
    for direction in ("forward", "backward"):
        d128 = [converted_tflops(base, direction, i) for i in range(len(base.seq_lens))]
        factors = {
            head_dim: [_ratio_at(series, llama, direction, s) for s in base.seq_lens]
            for head_dim, series in runs.items()
            if direction == "forward" or series.backward
        }
        factors[64] = [
            r * _fa3_d64_ratio(direction, s)
            for r, s in zip(factors[128], base.seq_lens, strict=True)
        ]
        for head_dim, ratios in sorted(factors.items()):
            points = tuple(
                AttentionPoint(seq_len=s, tflops=round(v * r * scale, 1))
                for s, v, r in zip(base.seq_lens, d128, ratios, strict=True)
            )
            curves.extend(
                AttentionCurve(direction=direction, dtype=dtype, head_dim=head_dim, points=points)
                for dtype in dtypes
            )
    return curves


def cudnn_curves(gpu: str, scale: float = 1.0) -> tuple[AttentionCurve, ...]:
    """Attention curves of ``gpu`` ("GB200" or "GB300") times ``scale`` (`_head_dim_curves`).

    bf16 and fp16 (same tensor-core rate): head dim 128 is the [S57] series, converted;
    192 (forward and backward) and 256 (forward) carry the DeepSeek-V3 and Qwen3.5 runs of
    [S58]; 64 has no measurement without a sliding window (the GPT-OSS runs of [S58] use a
    128-token window and count only the window's FLOPs), hence the FA3 ratio. ``fp8`` and
    ``mxfp8``: head dims 128 and 192 from the [S58] Llama and DeepSeek-V3 rows of that
    kernel, 64 by the FA3 ratio as bf16; no 256 (Qwen3.5 ran bf16 only). Where a head dim
    has no curve (256 backward, 256 in FP8) the lookup's nearest stored one (192) serves.
    ``scale`` carries a GPU's curves to a sibling without its own run.
    """
    curves = _head_dim_curves(gpu, RESULTS_9_22[gpu], ("bf16", "fp16"), scale)
    for dtype in FP8_ATTENTION_DTYPES:
        curves += _head_dim_curves(gpu, FP8_RESULTS_9_22[gpu][dtype], (dtype,), scale)
    return tuple(curves)


HOPPER_FP8_HEAD_DIMS = (64, 128)
"""Head dims of the Hopper profiles' ``fp8`` curves: the measured 128 and 64, whose bf16
curve is a measured FA3 chart too; 256 takes the nearest stored (128)."""


def hopper_fp8_curves() -> tuple[AttentionCurve, ...]:
    """``fp8`` attention curves of H100 and H200: every point of their bf16 FA3 curves
    (`profiles.derive_rules.h100_fa3_curves`, head dims `HOPPER_FP8_HEAD_DIMS`) times the
    cuDNN fp8 over bf16 ratio of the [S61] H200 run at the same seq (held at 2048 below),
    to 0.1 TFLOP/s. One ratio, measured at d 128, for both head dims, as the Blackwell d64
    curves take their d128 ratio; the same FLOP convention on both sides, so the ratio
    needs no conversion beyond `converted_tflops`'s, which cancels."""
    fp8, bf16 = H200_LLAMA_9_19["fp8"], H200_LLAMA_9_19["bf16"]
    return tuple(
        AttentionCurve(
            direction=c.direction,
            dtype="fp8",
            head_dim=c.head_dim,
            points=tuple(
                AttentionPoint(
                    seq_len=p.seq_len,
                    tflops=round(p.tflops * _ratio_at(fp8, bf16, c.direction, p.seq_len), 1),
                )
                for p in c.points
            ),
        )
        for c in h100_fa3_curves(1.0)
        if c.dtype == "bf16" and c.head_dim in HOPPER_FP8_HEAD_DIMS
    )


HOPPER_FP8_NOTE = (
    "FP8 attention (Transformer Engine's fp8_dpa with per-tensor scaling runs cuDNN's fp8 "
    "kernels): the bf16 FA3 curves of head dims 64 and 128 times the fp8/bf16 ratio of "
    "NVIDIA's H200 cuDNN 9.19.1 Llama 3.1 run (batch 1, 64/8 heads, d 128, causal, seq "
    "2048-32768) at the same seq, held at 2048 below [S61]. That run's causal fp8 backward "
    "is slower than its bf16 one from 8192 on (0.64x at 32768; its unmasked fp8 backward is "
    "1.18x), and the curve keeps it. No MXFP8 on Hopper; d256 takes the d128 curve."
)
"""Provenance note of the Hopper profiles' fp8 attention curves."""


CUDNN_KERNEL = "cuDNN fused attention (cudnn_fe), cuDNN 9.17.0"
"""`ComputeProfile.attention_kernel` of the curves measured on the device itself."""

CUDNN_NOTES = (
    "Attention: cuDNN fused attention measured by NVIDIA (cudnn-frontend "
    "sdpa_benchmark_training): head dim 128 from the cudnn_fe bf16 Llama-3.1-405B runs "
    "(cuDNN 9.17.0, batch 1, 128/8 heads, causal, seq 512-131072) [S57]; 192 (MLA, "
    "d_qk 192 / d_vo 128) and 256 (forward) as the d128 curve times the ratio of the "
    "DeepSeek-V3 and Qwen3.5 runs to the Llama run of the same cuDNN 9.22.0 set [S58]; 64 "
    "as d128 times H100 FA3's d64/d128 ratio [S27][S28] (the only d64 runs use a 128-token "
    "sliding window); no d256 backward (the nearest stored head dim serves). Converted to "
    "the cost model's convention: x s/(s+1) (the benchmark counts the causal diagonal), "
    "backward also x 2.5(d_qk+d_vo)/(3 d_qk + 2 d_vo).",
    "FP8 attention (Transformer Engine's fp8_dpa): fp8 (per-tensor scaling: delayed and "
    "current) and mxfp8 curves at head dims 128 and 192 as the bf16 d128 [S57] curve times "
    "the ratio of the fp8 or mxfp8 Llama 3.1 and DeepSeek-V3 rows to the bf16 Llama row of "
    "the cuDNN 9.22.0 set at the same seq [S58]; 64 as their d128 curve times FA3's "
    "d64/d128 ratio, like bf16; no 256 (the set measured Qwen3.5 in bf16 only; the nearest "
    "stored head dim serves). At seq 4096 on GB200 mxfp8 runs 1.20x bf16 forward and 0.92x "
    "backward at d128, 1.37x and 1.29x at d192; fp8 1.28x and 1.03x, 1.49x and 1.60x.",
)
"""Provenance notes shared by the Blackwell profiles."""


def sibling_scale(mamf_bf16: float, sibling_mamf_bf16: float) -> float:
    """Factor on the curves of a device priced with its NVL72 sibling's: the ratio of their
    bf16 MAMF figures [S1] (the same share of the achievable GEMM rate), to 4 places."""
    return round(mamf_bf16 / sibling_mamf_bf16, 4)


def sibling_note(device: str, sibling: str, mamf: float, sibling_mamf: float) -> str:
    """Provenance note of a device priced with its NVL72 sibling's cuDNN curves
    (`sibling_scale`)."""
    scale = sibling_scale(mamf, sibling_mamf)
    return (
        f"Attention on {device}: no cudnn_fe run on {device}; {sibling}'s curves of the same "
        f"chip times the bf16 MAMF ratio {mamf:g}/{sibling_mamf:g} = {scale} [S1]. The only "
        "B200 runs [S59] use PyTorch's cuDNN backend (cuDNN 9.13.0, host-side time floor at "
        "short seq); at seq 32768 B200/GB300 there times GB300/GB200 cudnn_fe [S57] gives "
        "0.94 forward, 0.90 backward against the 0.958 B200 scale."
    )
