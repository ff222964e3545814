"""Fused-attention curves of the Blackwell profiles from NVIDIA's measured cuDNN SDPA
training benchmarks (NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training``).

Megatron-core with Transformer Engine runs cuDNN's fused attention on Blackwell, so these
figures replace the H100 FlashAttention-3 curves scaled by the GEMM rate that the Blackwell
profiles carried before. Sources ([Sx] keys of `profiles.derive_rules.SOURCES`):

- [S57] ``artifacts/sdpa_bf16_benchmark_results_NVIDIA_{GB200,GB300}.csv`` @b372d39:
  backend ``cudnn_fe`` (cuDNN 9.17.0, frontend 1.16.0, torch nv25.11), Llama-3.1-405B
  attention (batch 1, 128 query heads, 8 KV heads, head dim 128, causal ``top_left``),
  seq 512-131072. The head-dim-128 curves.
- [S58] ``results/{llama3.1,dsv3,qwen35}/{gb200,gb300}/*.csv`` @3929da2 (2026-04-24, cuDNN
  9.22.0, frontend 1.21.1, batch 2, seq 2048-32768, bf16 ``top_left``, non-deterministic
  backward): Llama 3.1 (64/8 heads, d 128), DeepSeek-V3 MLA (128 heads, d_qk 192, d_vo 128)
  and Qwen3.5 (32/2 heads, d 256, forward only). Their ratio to the same run's Llama
  figure carries head dims 192 and 256 onto the [S57] curve, so every head dim of a
  profile describes one cuDNN version.

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

from dataclasses import dataclass

from profiles.derive_rules import h100_fa3_curves
from profiles.schema_device import AttentionCurve, AttentionPoint

BACKWARD_FLOPS_RATIO = 2.5
"""The cost model's backward/forward FLOP ratio (`costmodel.attention_core`, which profiles may
not import): the conversion's target convention."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SdpaSeries:
    """One measured cuDNN SDPA series: TFLOP/s in the benchmark's own FLOP convention."""

    head_dim_qk: int
    """Query/key head dim."""
    head_dim_vo: int
    """Value/output head dim."""
    seq_lens: tuple[int, ...]
    """Query = key sequence lengths, increasing."""
    forward: tuple[float, ...]
    """Forward TFLOP/s per sequence length."""
    backward: tuple[float, ...] = ()
    """Backward TFLOP/s per sequence length; empty where the run measured none."""


def converted_tflops(series: SdpaSeries, direction: str, index: int) -> float:
    """Point ``index`` of ``series`` in the cost model's convention (module docstring)."""
    s = series.seq_lens[index]
    qk, vo = series.head_dim_qk, series.head_dim_vo
    if direction == "forward":
        return series.forward[index] * s / (s + 1)
    return (
        series.backward[index] * s / (s + 1) * BACKWARD_FLOPS_RATIO * (qk + vo) / (3 * qk + 2 * vo)
    )


_ARTIFACT_SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_RESULT_SEQS = (2048, 4096, 8192, 16384, 32768)

LLAMA_D128: dict[str, SdpaSeries] = {  # [S57] cudnn_fe bf16 rows
    "GB200": SdpaSeries(
        head_dim_qk=128,
        head_dim_vo=128,
        seq_lens=_ARTIFACT_SEQS,
        forward=(408.0, 733.0, 1069.0, 1386.0, 1584.0, 1668.0, 1681.0, 1573.0, 1467.0),
        backward=(329.0, 527.0, 655.0, 1054.0, 1211.0, 1304.0, 1348.0, 1229.0, 1188.0),
    ),
    "GB300": SdpaSeries(
        head_dim_qk=128,
        head_dim_vo=128,
        seq_lens=_ARTIFACT_SEQS,
        forward=(461.0, 839.0, 1312.0, 1682.0, 1899.0, 1978.0, 2007.0, 1951.0, 1821.0),
        backward=(330.0, 522.0, 633.0, 1110.0, 1292.0, 1399.0, 1438.0, 1399.0, 1360.0),
    ),
}
"""Head dim 128 on GB200 and GB300, cuDNN 9.17.0 [S57]."""

RESULTS_9_22: dict[str, dict[int, SdpaSeries]] = {  # [S58], keyed by GPU, then d_qk
    "GB200": {
        128: SdpaSeries(
            head_dim_qk=128,
            head_dim_vo=128,
            seq_lens=_RESULT_SEQS,
            forward=(1097.0, 1408.0, 1574.0, 1708.0, 1622.0),
            backward=(885.0, 1148.0, 1332.0, 1328.0, 1226.0),
        ),
        192: SdpaSeries(
            head_dim_qk=192,
            head_dim_vo=128,
            seq_lens=_RESULT_SEQS,
            forward=(1072.0, 1406.0, 1585.0, 1678.0, 1743.0),
            backward=(846.0, 1057.0, 1193.0, 1134.0, 1076.0),
        ),
        256: SdpaSeries(
            head_dim_qk=256,
            head_dim_vo=256,
            seq_lens=_RESULT_SEQS,
            forward=(1126.0, 1441.0, 1708.0, 1804.0, 1734.0),
        ),
    },
    "GB300": {
        128: SdpaSeries(
            head_dim_qk=128,
            head_dim_vo=128,
            seq_lens=_RESULT_SEQS,
            forward=(1373.0, 1703.0, 1856.0, 1915.0, 1953.0),
            backward=(967.0, 1248.0, 1435.0, 1507.0, 1490.0),
        ),
        192: SdpaSeries(
            head_dim_qk=192,
            head_dim_vo=128,
            seq_lens=_RESULT_SEQS,
            forward=(1285.0, 1590.0, 1825.0, 1967.0, 1991.0),
            backward=(914.0, 1143.0, 1291.0, 1302.0, 1289.0),
        ),
        256: SdpaSeries(
            head_dim_qk=256,
            head_dim_vo=256,
            seq_lens=_RESULT_SEQS,
            forward=(1307.0, 1743.0, 1965.0, 2063.0, 2096.0),
        ),
    },
}
"""Llama 3.1 (d 128), DeepSeek-V3 (d_qk 192, d_vo 128) and Qwen3.5 (d 256, forward only) on
GB200 and GB300, cuDNN 9.22.0 [S58]."""


def _ratio_at(num: SdpaSeries, den: SdpaSeries, direction: str, seq: int) -> float:
    """Converted ``num`` over ``den`` at ``seq``, held at the nearer end outside their seqs;
    inside, ``seq`` must be one of them (both series share `_RESULT_SEQS`, a subset of the
    [S57] lengths the curves are built on)."""
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


def cudnn_curves(gpu: str, scale: float = 1.0) -> tuple[AttentionCurve, ...]:
    """bf16 and fp16 attention curves of ``gpu`` ("GB200" or "GB300") times ``scale``.

    Head dim 128: the [S57] series, converted. 192 (forward and backward) and 256 (forward):
    the 128 curve times the converted [S58] ratio of that head dim to Llama's at the same
    seq (held at 2048 below and 32768 above). 64: no measurement without a sliding window
    (the GPT-OSS runs of [S58] use a 128-token window and count only the window's FLOPs),
    so the 128 curve times H100 FA3's d 64 / d 128 ratio [S27][S28]. No 256 backward was
    measured: the lookup's nearest head dim (192) serves. fp16 reuses bf16 (same tensor-core
    rate). ``scale`` carries a GPU's curves to a sibling without its own run.
    """
    base, runs = LLAMA_D128[gpu], RESULTS_9_22[gpu]
    curves = []
    for direction in ("forward", "backward"):
        d128 = [converted_tflops(base, direction, i) for i in range(len(base.seq_lens))]
        factors: dict[int, list[float]] = {
            64: [_fa3_d64_ratio(direction, s) for s in base.seq_lens],
            128: [1.0] * len(base.seq_lens),
        }
        for head_dim, series in runs.items():
            if head_dim != 128 and (direction == "forward" or series.backward):
                factors[head_dim] = [
                    _ratio_at(series, runs[128], direction, s) for s in base.seq_lens
                ]
        for head_dim, ratios in sorted(factors.items()):
            points = tuple(
                AttentionPoint(seq_len=s, tflops=round(v * r * scale, 1))
                for s, v, r in zip(base.seq_lens, d128, ratios, strict=True)
            )
            curves.extend(
                AttentionCurve(direction=direction, dtype=dtype, head_dim=head_dim, points=points)
                for dtype in ("bf16", "fp16")
            )
    return tuple(curves)


CUDNN_KERNEL = "cuDNN fused attention (cudnn_fe), cuDNN 9.17.0"
"""`ComputeProfile.attention_kernel` of the curves measured on the device itself."""

CUDNN_NOTE = (
    "Attention: cuDNN fused attention measured by NVIDIA (cudnn-frontend "
    "sdpa_benchmark_training): head dim 128 from the cudnn_fe bf16 Llama-3.1-405B runs "
    "(cuDNN 9.17.0, batch 1, 128/8 heads, causal, seq 512-131072) [S57]; 192 (MLA, "
    "d_qk 192 / d_vo 128) and 256 (forward) as the d128 curve times the ratio of the "
    "DeepSeek-V3 and Qwen3.5 runs to the Llama run of the same cuDNN 9.22.0 set [S58]; 64 "
    "as d128 times H100 FA3's d64/d128 ratio [S27][S28] (the only d64 runs use a 128-token "
    "sliding window); no d256 backward (the nearest stored head dim serves). Converted to "
    "the cost model's convention: x s/(s+1) (the benchmark counts the causal diagonal), "
    "backward also x 2.5(d_qk+d_vo)/(3 d_qk + 2 d_vo)."
)
"""Provenance note shared by the Blackwell profiles."""


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
