"""Accessors: peaks, GEMM efficiency, attention, memory bandwidth, host probes (collective
fits: `test_profiles_collectives.py`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.lookup import (
    GEMM_DEPTH,
    attention_tflops,
    gemm_depth_factor,
    gemm_efficiency,
    gpus_per_node,
    host_probe_s,
    memory_bandwidth_Bps,
    peak_flops,
)
from profiles.schema import HardwareProfile
from profiles.schema_device import BandwidthPoint
from profiles.schema_host import HostTiming
from profiles.schema_provenance import MeasurementSpread
from profiles.store import load_profile, stored_profile_names
from specs.errors import SpecError
from tests.costmodel.cpu_fixture import cpu_profile

STORED = stored_profile_names()
PROFILES = {name: load_profile(name) for name in STORED}
H100 = PROFILES["h100-sxm-80gb"]
A100 = PROFILES["a100-sxm-80gb"]

# Top of each bf16 GEMM curve / dense peak: MAMF, hardware.md §2a [S1], except where a
# sustained random-data rate is sourced (A100: 257 TFLOP/s at 8192^3, H. He 2024 [S55],
# 5.2% under the burst MAMF of 271.2).
MAMF_FRACTION = {
    "a100-sxm-40gb": 257.0 / 312,  # the 80 GB part's sustained rate: same compute
    "a100-sxm-80gb": 257.0 / 312,
    "a800-sxm-80gb": 257.0 / 312,  # the A100 80GB's: same compute, fewer NVLink links [S67]
    "h100-sxm-80gb": 794.5 / 989.4,
    "h800-sxm-80gb": 794.5 / 989.4,  # the H100 SXM's: same die [S65]
    "h200-sxm-141gb": 794.5 / 989,
    "b200": 1745.0 / 2250,
    "mi300x": 668.4 / 1307.4,
    "gb200-nvl72": 1822.0 / 2500,
    "gb300-nvl72": 1822.0 / 2500,  # GB200's MAMF: no GB300 figure (profile notes)
    "b300": 1769.0 / 2250,
}


def test_peak_flops_is_tflops_times_1e12() -> None:
    assert peak_flops(H100, "bf16") == pytest.approx(989.4e12)  # [S4][S5]
    assert peak_flops(A100, "fp32") == pytest.approx(19.5e12)  # [S1][S2]


def test_fp8_on_a100_names_the_dtypes_it_has() -> None:
    with pytest.raises(SpecError) as info:
        peak_flops(A100, "fp8")
    assert "bf16, fp16, fp32" in str(info.value)


@pytest.mark.parametrize("name", STORED)
def test_large_square_gemm_reaches_the_mamf_fraction(name: str) -> None:
    efficiency = gemm_efficiency(PROFILES[name], 16384, 16384, 16384, "bf16")
    assert efficiency == pytest.approx(MAMF_FRACTION[name], abs=1e-4)


@pytest.mark.parametrize("name", STORED)
def test_small_gemms_are_much_less_efficient(name: str) -> None:
    profile = PROFILES[name]
    assert gemm_efficiency(profile, 64, 64, 64, "bf16") < 0.01
    assert gemm_efficiency(profile, 1024, 1024, 1024, "bf16") < 0.8 * MAMF_FRACTION[name]


dims = st.integers(min_value=1, max_value=2**14).map(lambda x: 32 * x)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(STORED),
    dtype=st.sampled_from(["bf16", "fp16", "fp32"]),
    m=dims,
    n=dims,
    k=dims,
    grow=st.integers(min_value=1, max_value=64),
)
def test_efficiency_monotone_in_size_and_bounded(name, dtype, m, n, k, grow) -> None:
    profile = PROFILES[name]
    small = gemm_efficiency(profile, m, n, k, dtype)
    large = gemm_efficiency(profile, m * grow, n, k, dtype)
    assert 0.0 < small <= large + 1e-12
    assert large <= MAMF_FRACTION[name] + 1e-4


def test_misaligned_gemm_is_slower_by_the_sourced_ratio() -> None:
    # H100 SwiGLU h=4096: d_ff 10922 ran at 272.7 TFLOP/s, 10944 at 398.4, 10848 at 395.6 [S24]
    aligned = gemm_efficiency(H100, 8192, 10944, 4096, "bf16")
    misaligned = gemm_efficiency(H100, 8192, 10922, 4096, "bf16")
    assert misaligned < aligned
    assert misaligned / aligned == pytest.approx(272.7 / 398.4, abs=1e-3)
    assert gemm_efficiency(H100, 8192, 10848, 4096, "bf16") == pytest.approx(aligned, rel=1e-3)


@pytest.mark.parametrize(
    ("m", "n", "k", "measured_tflops", "tolerance"),
    [
        # B200 cuBLAS bf16 via PyTorch 2.8 [S23]; the curve is optimistic for short GEMMs.
        (2048, 2048, 2048, 1006, 0.30),
        (4096, 4096, 4096, 1532, 0.10),
        (4096, 8192, 8192, 1652, 0.06),
        (8192, 8192, 8192, 1610, 0.10),
    ],
)
def test_b200_curve_against_published_cublas_timings(m, n, k, measured_tflops, tolerance) -> None:
    predicted = gemm_efficiency(PROFILES["b200"], m, n, k, "bf16") * 2250
    assert predicted == pytest.approx(measured_tflops, rel=tolerance)


def test_gemm_rejects_bad_dims_and_dtypes() -> None:
    with pytest.raises(SpecError, match="m must be a positive integer"):
        gemm_efficiency(H100, 0, 8, 8, "bf16")
    with pytest.raises(SpecError, match="no fp8 GEMM efficiency curve"):
        gemm_efficiency(A100, 8, 8, 8, "fp8")


def test_h100_attention_endpoints_equal_the_fa3_charts() -> None:
    # FA3 paper charts, H100 SXM5, d=128: causal forward 292 -> 616, backward 316 -> 561 [S27]
    assert attention_tflops(H100, "forward", 512, 128, "bf16") == pytest.approx(292.0)
    assert attention_tflops(H100, "forward", 16384, 128, "bf16") == pytest.approx(616.0)
    assert attention_tflops(H100, "backward", 512, 128, "bf16") == pytest.approx(316.0)
    assert attention_tflops(H100, "backward", 16384, 128, "bf16") == pytest.approx(561.0)
    assert attention_tflops(H100, "forward", 16384, 64, "fp16") == pytest.approx(473.0)


def test_a100_attention_spans_the_fa2_range() -> None:
    # FA2 reaches 50-73% of the 312 TFLOP/s peak over seq 512-16k [S25]
    assert attention_tflops(A100, "forward", 512, 128, "bf16") == pytest.approx(
        0.50 * 312, abs=0.05
    )
    assert attention_tflops(A100, "backward", 16384, 64, "bf16") == pytest.approx(
        0.73 * 312, abs=0.05
    )


@pytest.mark.parametrize("name", STORED)
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_attention_rises_with_seq_len_and_holds_outside(name: str, direction: str) -> None:
    profile = PROFILES[name]
    values = [attention_tflops(profile, direction, s, 128, "bf16") for s in (256, 512, 3000, 8192)]
    assert values == sorted(values)
    assert values[0] == values[1]  # held below the first benchmarked length
    held = attention_tflops(profile, direction, 10**7, 128, "bf16")
    last = max(p.seq_len for c in profile.compute.attention for p in c.points)
    assert held == attention_tflops(profile, direction, last, 128, "bf16")
    assert held < profile.device.peak_tflops["bf16"] * MAMF_FRACTION[name]


def test_attention_uses_the_nearest_head_dim() -> None:
    # 96 is nearer 128 than 64 in log2; 200 is nearer 256.
    assert attention_tflops(H100, "forward", 4096, 96, "bf16") == attention_tflops(
        H100, "forward", 4096, 128, "bf16"
    )
    assert attention_tflops(H100, "forward", 4096, 200, "bf16") == attention_tflops(
        H100, "forward", 4096, 256, "bf16"
    )


def test_attention_errors_name_what_exists() -> None:
    with pytest.raises(SpecError, match="forward/bf16"):
        attention_tflops(H100, "forward", 4096, 128, "mxfp8")  # MXFP8 needs Blackwell
    with pytest.raises(SpecError, match="'forward' or 'backward'"):
        attention_tflops(H100, "sideways", 4096, 128, "bf16")


def test_memory_bandwidth_curve_interpolates_in_log_bytes() -> None:
    curve = (
        BandwidthPoint(bytes_moved=1e5, efficiency=0.8),
        BandwidthPoint(bytes_moved=1e7, efficiency=0.2),
    )
    profile = dataclasses.replace(
        A100, compute=dataclasses.replace(A100.compute, memory_bandwidth_curve=curve)
    )
    peak_Bps = A100.device.hbm_GBps * 1e9
    assert memory_bandwidth_Bps(profile, 1e3) == pytest.approx(0.8 * peak_Bps)  # held
    assert memory_bandwidth_Bps(profile, 1e6) == pytest.approx(0.5 * peak_Bps)  # log middle
    assert memory_bandwidth_Bps(profile, 1e9) == pytest.approx(0.2 * peak_Bps)  # held
    # No size asked, or no curve: the flat efficiency.
    assert memory_bandwidth_Bps(profile) == memory_bandwidth_Bps(A100)
    assert memory_bandwidth_Bps(A100, 1e6) == memory_bandwidth_Bps(A100)


def test_memory_bandwidth_curve_must_increase_in_size() -> None:
    points = (
        BandwidthPoint(bytes_moved=1e6, efficiency=0.5),
        BandwidthPoint(bytes_moved=1e5, efficiency=0.8),
    )
    with pytest.raises(SpecError, match="strictly increase"):
        dataclasses.replace(A100.compute, memory_bandwidth_curve=points)


@pytest.mark.parametrize("name", STORED)
def test_memory_bandwidth_is_90_percent_of_hbm(name: str) -> None:
    # Calculon's HBM efficiency at >= 100 MB [S48]
    profile = PROFILES[name]
    assert memory_bandwidth_Bps(profile) == pytest.approx(0.9 * profile.device.hbm_GBps * 1e9)
    assert gpus_per_node(profile) == (4 if name.endswith("nvl72") else 8)  # NVL72 tray [S18]


def test_host_probe_is_read_from_the_host_section_of_a_cpu_profile():
    assert host_probe_s(H100) is None  # a datasheet profile never timed the host
    cpu = cpu_profile()

    def with_probe(profile: HardwareProfile, mean: float) -> HardwareProfile:
        probe = HostTiming(name="host_probe", num_samples=30, mean_s=mean, min_s=mean, max_s=mean)
        assert profile.host is not None
        return dataclasses.replace(
            profile, host=dataclasses.replace(profile.host, timings=(*profile.host.timings, probe))
        )

    assert host_probe_s(cpu) is None
    assert host_probe_s(with_probe(cpu, 6.3e-4)) == pytest.approx(6.3e-4)
    assert host_probe_s(with_probe(cpu, 0.0)) is None
    # The provenance spreads are a record only: a probe there is not read.
    entry = MeasurementSpread(
        quantity="op_overhead.host_probe", unit="s", num_samples=30, mean=5e-4,
        stdev=0.0, min=5e-4, max=5e-4,
    )  # fmt: skip
    provenance = dataclasses.replace(cpu.provenance, spread=(*cpu.provenance.spread, entry))
    assert host_probe_s(dataclasses.replace(cpu, provenance=provenance)) is None


@pytest.mark.parametrize("name", ["h100-sxm-80gb", "b200", "b300", "gb200-nvl72"])
def test_depth_factor_penalises_only_gemms_shallower_than_the_reference(name: str) -> None:
    profile = PROFILES[name]
    depth = GEMM_DEPTH[profile.device.generation]
    assert gemm_depth_factor(profile, depth.reference_k) == pytest.approx(1.0)
    assert gemm_depth_factor(profile, 4 * depth.reference_k) == 1.0
    factors = [gemm_depth_factor(profile, k) for k in (256, 512, 768, 1024, 2048)]
    assert all(0.0 < f < 1.0 for f in factors)
    assert factors == sorted(factors)
    # K0 of the generation: at k = K0 half the loop is the fixed part (module docstring).
    k0 = round(depth.fill_k)
    expected = 0.5 * (1 + depth.fill_k / depth.reference_k)
    assert gemm_depth_factor(profile, k0) == pytest.approx(expected, rel=1e-2)


def test_depth_factor_is_one_without_a_sourced_generation() -> None:
    # Ampere has no table in GEMM_DEPTH, a CPU profile keeps the FLOP-only curve.
    assert A100.device.generation not in GEMM_DEPTH
    assert gemm_depth_factor(A100, 128) == 1.0
    assert gemm_depth_factor(cpu_profile(), 64) == 1.0


def test_depth_factor_rejects_a_bad_depth() -> None:
    for k in (0, -4, 1.5, True):
        with pytest.raises(SpecError, match="gemm_depth_factor"):
            gemm_depth_factor(H100, k)
