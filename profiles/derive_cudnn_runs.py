"""NVIDIA's measured cuDNN SDPA training runs, as transcribed for `profiles.derive_cudnn`.

Every series is one (GPU, data type, head dims) of NVIDIA/cudnn-frontend
``benchmark/sdpa_benchmark_training``: causal mask (``attn_mask`` ``top_left``),
non-deterministic backward, TFLOP/s in the benchmark's own FLOP convention
(``benchmark_single_sdpa.py`` ``flops``: the same count for every data type;
`profiles.derive_cudnn.converted_tflops` converts it). Sources ([Sx] keys of
`profiles.derive_rules.SOURCES`):

- [S57] ``artifacts/sdpa_bf16_benchmark_results_NVIDIA_{GB200,GB300}.csv`` @b372d39, rows
  ``cudnn_fe`` (cuDNN 9.17.0): `LLAMA_D128`.
- [S58] ``results/{llama3.1,dsv3,qwen35}/{gb200,gb300}/*_20260424_*.csv`` @3929da2 (cuDNN
  9.22.0, frontend 1.21.1, batch 2): `RESULTS_9_22` (``bfloat16``) and `FP8_RESULTS_9_22`
  (``fp8``: per-tensor scaled E4M3, the kernel of Transformer Engine's delayed and current
  scaling; ``mxfp8``: E4M3 with one E8M0 scale per 32 elements, the kernel of its
  ``MXFP8BlockScaling``).
- [S61] ``results/h200_919_only_cudnn/llama3.1_20260227_034703.csv`` @3929da2 (H200,
  cuDNN 9.19.1, frontend 1.19.0, batch 1, one ``both`` row per seq with ``fwd_tflops``
  and ``bwd_tflops``): `H200_LLAMA_9_19`. The run's DeepSeek-V3 fp8 rows all failed
  (``success`` False), so Hopper has head dim 128 only.
"""

from __future__ import annotations

from dataclasses import dataclass


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


ARTIFACT_SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
"""Sequence lengths of the [S57] artifacts, the points of every Blackwell curve."""
RESULT_SEQS = (2048, 4096, 8192, 16384, 32768)
"""Sequence lengths of the [S58] and [S61] results."""


def _d128(forward: tuple[float, ...], backward: tuple[float, ...] = ()) -> SdpaSeries:
    return SdpaSeries(
        head_dim_qk=128, head_dim_vo=128, seq_lens=RESULT_SEQS, forward=forward, backward=backward
    )


def _mla(forward: tuple[float, ...], backward: tuple[float, ...]) -> SdpaSeries:
    return SdpaSeries(
        head_dim_qk=192, head_dim_vo=128, seq_lens=RESULT_SEQS, forward=forward, backward=backward
    )


LLAMA_D128: dict[str, SdpaSeries] = {  # [S57] cudnn_fe bf16 rows
    "GB200": SdpaSeries(
        head_dim_qk=128,
        head_dim_vo=128,
        seq_lens=ARTIFACT_SEQS,
        forward=(408.0, 733.0, 1069.0, 1386.0, 1584.0, 1668.0, 1681.0, 1573.0, 1467.0),
        backward=(329.0, 527.0, 655.0, 1054.0, 1211.0, 1304.0, 1348.0, 1229.0, 1188.0),
    ),
    "GB300": SdpaSeries(
        head_dim_qk=128,
        head_dim_vo=128,
        seq_lens=ARTIFACT_SEQS,
        forward=(461.0, 839.0, 1312.0, 1682.0, 1899.0, 1978.0, 2007.0, 1951.0, 1821.0),
        backward=(330.0, 522.0, 633.0, 1110.0, 1292.0, 1399.0, 1438.0, 1399.0, 1360.0),
    ),
}
"""Head dim 128 on GB200 and GB300, cuDNN 9.17.0, batch 1, 128/8 heads [S57]."""

RESULTS_9_22: dict[str, dict[int, SdpaSeries]] = {  # [S58] bfloat16, keyed by GPU, then d_qk
    "GB200": {
        128: _d128(
            (1097.0, 1408.0, 1574.0, 1708.0, 1622.0), (885.0, 1148.0, 1332.0, 1328.0, 1226.0)
        ),
        192: _mla(
            (1072.0, 1406.0, 1585.0, 1678.0, 1743.0), (846.0, 1057.0, 1193.0, 1134.0, 1076.0)
        ),
        256: SdpaSeries(
            head_dim_qk=256,
            head_dim_vo=256,
            seq_lens=RESULT_SEQS,
            forward=(1126.0, 1441.0, 1708.0, 1804.0, 1734.0),
        ),
    },
    "GB300": {
        128: _d128(
            (1373.0, 1703.0, 1856.0, 1915.0, 1953.0), (967.0, 1248.0, 1435.0, 1507.0, 1490.0)
        ),
        192: _mla(
            (1285.0, 1590.0, 1825.0, 1967.0, 1991.0), (914.0, 1143.0, 1291.0, 1302.0, 1289.0)
        ),
        256: SdpaSeries(
            head_dim_qk=256,
            head_dim_vo=256,
            seq_lens=RESULT_SEQS,
            forward=(1307.0, 1743.0, 1965.0, 2063.0, 2096.0),
        ),
    },
}
"""bf16: Llama 3.1 (64/8 heads, d 128), DeepSeek-V3 (128 heads, d_qk 192, d_vo 128) and
Qwen3.5 (32/2 heads, d 256, forward only) on GB200 and GB300, cuDNN 9.22.0 [S58]."""

FP8_RESULTS_9_22: dict[str, dict[str, dict[int, SdpaSeries]]] = {  # [S58], GPU, dtype, d_qk
    "GB200": {
        "fp8": {
            128: _d128(
                (1420.0, 1805.0, 2047.0, 2154.0, 2197.0), (831.0, 1178.0, 1454.0, 1632.0, 1687.0)
            ),
            192: _mla(
                (1659.0, 2095.0, 2397.0, 2486.0, 2447.0),
                (1312.0, 1692.0, 1959.0, 1968.0, 1857.0),
            ),
        },
        "mxfp8": {
            128: _d128(
                (1330.0, 1685.0, 1902.0, 1999.0, 2046.0), (745.0, 1054.0, 1287.0, 1436.0, 1425.0)
            ),
            192: _mla(
                (1535.0, 1925.0, 2219.0, 2355.0, 2329.0),
                (1047.0, 1364.0, 1494.0, 1552.0, 1532.0),
            ),
        },
    },
    "GB300": {
        "fp8": {
            128: _d128(
                (1954.0, 2532.0, 2897.0, 3054.0, 3108.0), (944.0, 1396.0, 1781.0, 2035.0, 2128.0)
            ),
            192: _mla(
                (2290.0, 2788.0, 3128.0, 3305.0, 3364.0),
                (1511.0, 1982.0, 2310.0, 2459.0, 2406.0),
            ),
        },
        "mxfp8": {
            128: _d128(
                (1751.0, 2272.0, 2570.0, 2727.0, 2785.0), (811.0, 1143.0, 1404.0, 1563.0, 1590.0)
            ),
            192: _mla(
                (2069.0, 2517.0, 2829.0, 2998.0, 2959.0),
                (1158.0, 1522.0, 1780.0, 1844.0, 1863.0),
            ),
        },
    },
}
"""``fp8`` and ``mxfp8`` rows of the same Llama 3.1 (d 128) and DeepSeek-V3 (d_qk 192,
d_vo 128) runs as `RESULTS_9_22` [S58]; the Qwen3.5 run measured bf16 only."""

H200_LLAMA_9_19: dict[str, SdpaSeries] = {
    "bf16": _d128((484.0, 591.0, 644.0, 673.0, 688.0), (370.0, 474.0, 541.0, 579.0, 581.0)),
    "fp8": _d128((698.0, 854.0, 964.0, 1010.0, 1042.0), (393.0, 471.0, 430.0, 374.0, 370.0)),
}
"""Llama 3.1 attention (batch 1, 64/8 heads, d 128, causal) on H200, ``bfloat16`` and
``fp8`` (per-tensor scaled), cuDNN 9.19.1 [S61]. The causal fp8 backward falls below the
bf16 one from 8192 on (0.64x at 32768), while the same run's unmasked fp8 backward is 1.18x
the bf16 one (674 against 572 at 32768): as measured, the causal fp8 backward of this
cuDNN runs at about the unmasked kernel's time."""
