"""MFU over the job's GEMM peak and over the dense bf16 peak (`costmodel.estimate`):
one function gives both, the estimate carries both and its JSON names the peak."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan, estimate_to_json, mfu_over_peaks
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
B200 = load_profile("b200")
# dense datasheet peaks of the stored profiles (profiles/derive.py, derive_blackwell.py):
# H100 SXM bf16 989.4, fp8 1978.9 TFLOP/s; B200 bf16 2250, fp4 9000 TFLOP/s
H100_BF16_S, H100_FP8_S = 989.4e12, 1978.9e12
B200_BF16_S, B200_FP4_S = 2250e12, 9000e12


@pytest.mark.parametrize(
    ("profile", "dtype", "peak_s", "bf16_s"),
    [
        (H100, "fp8", H100_FP8_S, H100_BF16_S),
        (B200, "fp4", B200_FP4_S, B200_BF16_S),
        (H100, "fp32", 66.9e12, H100_BF16_S),
    ],
)
def test_mfu_over_the_dtype_peak_and_the_bf16_peak(profile, dtype, peak_s, bf16_s) -> None:
    rate = 300e12
    mfu, mfu_bf16 = mfu_over_peaks(rate, profile, dtype)
    assert mfu == pytest.approx(rate / peak_s)
    assert mfu_bf16 == pytest.approx(rate / bf16_s)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_bf16_job_has_one_figure(dtype: str) -> None:
    mfu, mfu_bf16 = mfu_over_peaks(400e12, H100, dtype)
    assert mfu == mfu_bf16 == pytest.approx(400e12 / H100_BF16_S)


def test_a_profile_without_a_bf16_peak_gives_none() -> None:
    # an fp8-only device: no bf16 peak, nor the curves that would need one
    peaks = {k: v for k, v in H100.device.peak_tflops.items() if k not in ("bf16", "fp16")}
    compute = dataclasses.replace(
        H100.compute,
        gemm_efficiency={k: v for k, v in H100.compute.gemm_efficiency.items() if k in peaks},
        attention=tuple(c for c in H100.compute.attention if c.dtype in peaks),
    )
    device = dataclasses.replace(H100.device, peak_tflops=peaks)
    profile = dataclasses.replace(H100, device=device, compute=compute)
    mfu, mfu_bf16 = mfu_over_peaks(300e12, profile, "fp8")
    assert mfu == pytest.approx(300e12 / H100_FP8_S) and mfu_bf16 is None


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", "bf16"), ("fp8", "fp8")])
def test_the_estimate_carries_both_figures(precision: str, dtype: str) -> None:
    est = estimate_plan(
        get_preset("llama3-8b"),
        ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8),
        TrainingJob(seq_length=4096, global_batch_size=32, precision=precision),
        ParallelPlan(tp=2, dp=4, sequence_parallel=True),
        H100,
    )
    rate_s = est.model_tflops_per_gpu * 1e12
    assert est.mfu_peak_dtype == dtype
    assert est.mfu_bf16 == pytest.approx(rate_s / H100_BF16_S)
    assert est.mfu == pytest.approx(rate_s / (H100_FP8_S if dtype == "fp8" else H100_BF16_S))
    data = estimate_to_json(est)
    assert (data["mfu"], data["mfu_peak_dtype"], data["mfu_bf16"]) == (
        est.mfu,
        dtype,
        est.mfu_bf16,
    )
