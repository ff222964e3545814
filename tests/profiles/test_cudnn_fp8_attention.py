"""FP8 attention curves (``fp8``, ``mxfp8``) against NVIDIA's measured cuDNN SDPA rows.

Golden values are read off the source CSVs by hand (NVIDIA/cudnn-frontend
``benchmark/sdpa_benchmark_training``): [S57] ``artifacts/sdpa_bf16_benchmark_results_NVIDIA_
{GB200,GB300}.csv`` @b372d39 (``fwd_tflops_per_sec``, ``bwd_tflops_per_sec`` of the
``cudnn_fe`` rows, head dim 128); [S58] ``results/llama3.1/gb200/llama3.1_20260424_100750.csv``,
``results/llama3.1/gb300/llama3.1_20260424_100757.csv`` and ``results/dsv3/gb300/
dsv3_20260424_101002.csv`` @3929da2 (``tflops`` of the ``top_left``, non-deterministic rows);
[S61] ``results/h200_919_only_cudnn/llama3.1_20260227_034703.csv`` (``fwd_tflops``,
``bwd_tflops`` of the ``top_left`` rows).
"""

from __future__ import annotations

import pytest

from profiles.derive_blackwell import B200_BF16_MAMF, GB200_BF16_MAMF
from profiles.derive_cudnn import sibling_scale
from profiles.lookup import attention_tflops
from profiles.store import load_profile

GB200 = load_profile("gb200-nvl72")
GB300 = load_profile("gb300-nvl72")
B200 = load_profile("b200")
H100 = load_profile("h100-sxm-80gb")
H200 = load_profile("h200-sxm-141gb")


@pytest.mark.parametrize(
    ("profile", "dtype", "direction", "seq", "head_dim", "expected"),
    [
        # GB200 mxfp8 forward at 4096: [S57] cudnn_fe fwd 1386 x s/(s+1), times [S58] Llama
        # mxfp8 fwd 1685 over bfloat16 fwd 1408 (both 4096, top_left).
        (GB200, "mxfp8", "forward", 4096, 128, 1386.0 * 4096 / 4097 * 1685.0 / 1408.0),
        # its backward: [S57] bwd 1054, [S58] mxfp8 bwd 1054 over bfloat16 bwd 1148 (0.92x).
        (GB200, "mxfp8", "backward", 4096, 128, 1054.0 * 4096 / 4097 * 1054.0 / 1148.0),
        # GB200 fp8 forward at 16384: [S57] 1668, [S58] fp8 2154 over bfloat16 1708.
        (GB200, "fp8", "forward", 16384, 128, 1668.0 * 16384 / 16385 * 2154.0 / 1708.0),
        # GB300 fp8 MLA backward at 8192: [S57] bwd 1292; [S58] dsv3 fp8 bwd 2310 in the
        # benchmark's 3·192 + 2·128 = 832 units, the cost model's 2.5·320 = 800, over the
        # Llama bfloat16 bwd 1435.
        (
            GB300,
            "fp8",
            "backward",
            8192,
            192,
            1292.0 * 8192 / 8193 * (2310.0 * 800 / 832) / 1435.0,
        ),
        # below the [S58] lengths the 2048 ratio holds: [S57] GB300 fwd 461 at 512 times
        # mxfp8 1751 over bfloat16 1373 at 2048.
        (GB300, "mxfp8", "forward", 512, 128, 461.0 * 512 / 513 * 1751.0 / 1373.0),
        # above them the 32768 ratio: [S57] GB200 bwd 1188 at 131072, fp8 1687 / bf16 1226.
        (GB200, "fp8", "backward", 131072, 128, 1188.0 * 131072 / 131073 * 1687.0 / 1226.0),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_blackwell_fp8_curves_are_the_converted_rows(
    profile, dtype, direction, seq, head_dim, expected
) -> None:
    got = attention_tflops(profile, direction, seq, head_dim, dtype)
    assert got == pytest.approx(expected, abs=0.05)


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_d64_takes_the_same_fa3_ratio_as_bf16(dtype: str, direction: str) -> None:
    # d64 = d128 x H100 FA3's d64/d128 ratio, for bf16 and FP8 alike (rounded to 0.1).
    for seq in (1024, 4096, 32768):
        bf16 = attention_tflops(GB200, direction, seq, 64, "bf16") / attention_tflops(
            GB200, direction, seq, 128, "bf16"
        )
        fp8 = attention_tflops(GB200, direction, seq, 64, dtype) / attention_tflops(
            GB200, direction, seq, 128, dtype
        )
        assert fp8 == pytest.approx(bf16, rel=2e-3)


def test_no_fp8_head_dim_256_so_the_nearest_192_serves() -> None:
    stored = {c.head_dim for c in GB200.compute.attention if c.dtype in ("fp8", "mxfp8")}
    assert stored == {64, 128, 192}
    for dtype in ("fp8", "mxfp8"):
        assert attention_tflops(GB200, "forward", 8192, 256, dtype) == attention_tflops(
            GB200, "forward", 8192, 192, dtype
        )


def test_b200_takes_gb200s_fp8_curves_at_the_mamf_ratio() -> None:
    scale = sibling_scale(B200_BF16_MAMF, GB200_BF16_MAMF)
    for dtype in ("fp8", "mxfp8"):
        for direction in ("forward", "backward"):
            ours = attention_tflops(B200, direction, 8192, 128, dtype)
            theirs = attention_tflops(GB200, direction, 8192, 128, dtype)
            assert ours == pytest.approx(theirs * scale, abs=0.1)


@pytest.mark.parametrize("profile", [H100, H200], ids=lambda p: p.name)
def test_hopper_fp8_is_fa3_bf16_times_the_h200_cudnn_ratio(profile) -> None:
    # [S61] top_left rows: fwd 854 (fp8) / 591 (bf16) at 4096; bwd 374 / 579 at 16384; the
    # FA3 d128 points they scale: 563.4 forward at 4096 and the charted 561 backward at 16k.
    assert attention_tflops(profile, "forward", 4096, 128, "fp8") == pytest.approx(
        round(563.4 * 854.0 / 591.0, 1)
    )
    assert attention_tflops(profile, "backward", 16384, 128, "fp8") == pytest.approx(
        round(561.0 * 374.0 / 579.0, 1)
    )
    # d64 backward (FA3 charted to 2048): 272 at 512 times the 2048 ratio, bwd 393 / 370.
    assert attention_tflops(profile, "backward", 512, 64, "fp8") == pytest.approx(
        round(272.0 * 393.0 / 370.0, 1)
    )
    dtypes = {c.dtype for c in profile.compute.attention}
    assert "mxfp8" not in dtypes and "fp8" in dtypes
    assert any("[S61]" in note for note in profile.provenance.notes)


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "a100-sxm-40gb", "mi300x"])
def test_other_profiles_have_no_fp8_attention_curve(name: str) -> None:
    dtypes = {c.dtype for c in load_profile(name).compute.attention}
    assert not dtypes & {"fp8", "mxfp8"}


def test_blackwell_profiles_note_the_fp8_derivation() -> None:
    for profile in (GB200, GB300, B200):
        assert any("mxfp8" in note and "[S58]" in note for note in profile.provenance.notes)
