"""Blackwell attention curves against NVIDIA's measured cuDNN SDPA figures.

Golden values are read off the source CSVs by hand (NVIDIA/cudnn-frontend
``benchmark/sdpa_benchmark_training``): [S57] ``artifacts/sdpa_bf16_benchmark_results_NVIDIA_
GB200.csv`` / ``..._GB300.csv`` @b372d39, rows ``cudnn_fe`` (forward_time, backward_time in
ms; batch 1, 128 query heads, head dim 128, causal); [S58] ``results/dsv3/gb200/
dsv3_20260424_101009.csv`` and ``results/llama3.1/gb200/llama3.1_20260424_100750.csv`` @3929da2.
"""

from __future__ import annotations

import pytest

from costmodel.attention_core import attention_core_time_s
from profiles.derive_blackwell import B200_BF16_MAMF, B300_BF16_MAMF, GB200_BF16_MAMF
from profiles.derive_cudnn import sibling_scale
from profiles.lookup import attention_tflops
from profiles.store import load_profile

GB200 = load_profile("gb200-nvl72")
GB300 = load_profile("gb300-nvl72")
B200 = load_profile("b200")
B300 = load_profile("b300")


def _causal_forward_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    """The cost model's causal forward FLOPs: 4·b·h·(s²/2)·d."""
    return 4.0 * batch * heads * seq * seq / 2 * head_dim


@pytest.mark.parametrize(
    ("direction", "measured_ms"),
    [("forward", 0.397), ("backward", 1.304)],  # [S57] GB200 cudnn_fe, seq 4096
)
def test_gb200_d128_4k_prices_the_measured_kernel_time(direction: str, measured_ms: float) -> None:
    flops = _causal_forward_flops(1, 128, 4096, 128)
    seconds = attention_core_time_s(
        GB200,
        causal_forward_flops=flops,
        batch_heads=128,
        seq_q=4096,
        seq_kv=4096,
        head_dim=128,
        precision="bf16",
        kernel="flash",
        direction=direction,  # type: ignore[arg-type]
    )
    # The CSV's times are rounded to 1 us: 0.397 ms is good to 0.13%, 1.304 ms to 0.04%.
    assert seconds * 1e3 == pytest.approx(measured_ms, rel=2e-3)


@pytest.mark.parametrize(
    ("profile", "direction", "seq", "measured"),
    [
        # [S57] fwd_tflops_per_sec / bwd_tflops_per_sec, times s/(s+1)
        (GB200, "forward", 4096, 1386.0),
        (GB200, "backward", 4096, 1054.0),
        (GB200, "backward", 2048, 655.0),
        (GB200, "forward", 512, 408.0),
        (GB300, "forward", 32768, 2007.0),
        (GB300, "backward", 131072, 1360.0),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_d128_curves_are_the_converted_cudnn_fe_rows(profile, direction, seq, measured) -> None:
    got = attention_tflops(profile, direction, seq, 128, "bf16")
    assert got == pytest.approx(measured * seq / (seq + 1), abs=0.05)


def test_mla_head_dim_carries_the_dsv3_ratio_and_backward_convention() -> None:
    # [S58] GB200 at 4096: DeepSeek-V3 (d_qk 192, d_vo 128) bwd 1057, Llama bwd 1148; the
    # benchmark counts 3·192 + 2·128 = 832 backward FLOP units where the cost model counts
    # 2.5·(192 + 128) = 800. On the [S57] d128 curve (1054): 1054·(1057·800/832)/1148.
    expected = 1054.0 * 4096 / 4097 * (1057.0 * 800 / 832) / 1148.0
    assert attention_tflops(GB200, "backward", 4096, 192, "bf16") == pytest.approx(
        expected, abs=0.05
    )
    forward = 1386.0 * 4096 / 4097 * 1406.0 / 1408.0  # dsv3 / Llama forward, same run
    assert attention_tflops(GB200, "forward", 4096, 192, "bf16") == pytest.approx(forward, abs=0.05)


def test_siblings_scale_the_nvl72_curves_by_mamf() -> None:
    b200_scale = sibling_scale(B200_BF16_MAMF, GB200_BF16_MAMF)
    for sibling, source, scale in (
        (B200, GB200, b200_scale),
        (B300, GB300, sibling_scale(B300_BF16_MAMF, GB200_BF16_MAMF)),
    ):
        for direction in ("forward", "backward"):
            ours = attention_tflops(sibling, direction, 8192, 128, "bf16")
            theirs = attention_tflops(source, direction, 8192, 128, "bf16")
            assert ours == pytest.approx(theirs * scale, abs=0.1)
    assert abs(b200_scale - 1745.0 / 1822.0) < 1e-4  # MAMF [S1]


def test_profiles_cite_the_cudnn_sources() -> None:
    for profile in (GB200, GB300, B200, B300):
        assert "cuDNN" in profile.compute.attention_kernel
        assert any("NVIDIA/cudnn-frontend @b372d39" in s for s in profile.provenance.sources)
