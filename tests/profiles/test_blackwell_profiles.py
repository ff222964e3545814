"""Key figures of the Blackwell profiles against reference/hardware.yaml and [S1]/[S6]."""

from __future__ import annotations

import pytest

from profiles.lookup import collective_fit
from profiles.store import load_profile

GB200 = load_profile("gb200-nvl72")
GB300 = load_profile("gb300-nvl72")
B300 = load_profile("b300")


def test_gb200_matches_hardware_yaml() -> None:
    # hardware.yaml gb200_nvl72: bf16 2500, fp8 5000, hbm 186 GB, 8.0 TB/s, NVLink 900
    # GB/s per direction, 72-GPU domain, 400 Gb/s NIC per GPU.
    assert GB200.device.peak_tflops["bf16"] == 2500
    assert GB200.device.peak_tflops["fp8"] == 5000
    assert GB200.device.memory_gib == 186
    assert GB200.device.hbm_GBps == pytest.approx(8000)
    topo = GB200.topology
    assert (topo.scale_up_domain, topo.gpus_per_node, topo.nics_per_node) == (72, 4, 4)
    assert topo.scale_up_GBps_per_gpu == 900
    assert topo.nic_GBps_per_gpu == pytest.approx(400 / 8)


def test_b300_matches_s1_tables() -> None:
    # [S1] @744d01e1: B300 SXM bf16 2250, fp8 4500; 288 GB HBM3e at 8.00 TB/s; MAMF 1769.
    assert B300.device.peak_tflops["bf16"] == 2250
    assert B300.device.memory_gib == 288
    assert (B300.topology.gpus_per_node, B300.topology.scale_up_domain) == (8, 8)
    top = max(p.efficiency for p in B300.compute.gemm_efficiency["bf16"])
    assert top == pytest.approx(1769.0 / 2250.0, abs=1e-4)


def test_gb300_has_gb200_compute_and_more_memory() -> None:
    # [S1]: GB300 dense bf16/fp8 equal GB200's; [S9]: 279 GB per GPU, and dense FP4
    # 15,000 TFLOP/s per GPU against GB200's 10,000 [S8] (Blackwell Ultra's FP4 cores).
    gb200_peaks = dict(GB200.device.peak_tflops)
    gb300_peaks = dict(GB300.device.peak_tflops)
    assert (gb200_peaks.pop("fp4"), gb300_peaks.pop("fp4")) == (10000, 15000)
    assert gb300_peaks == gb200_peaks
    assert GB300.device.memory_gib == 279
    assert GB300.topology.scale_up_domain == 72


@pytest.mark.parametrize("profile", [GB200, GB300], ids=lambda p: p.name)
def test_nvl72_stores_the_72_gpu_all_reduce(profile) -> None:
    # NVL72 all_reduce busbw with NVLink SHARP: 850 GB/s (GTC25 slide via [S6]).
    fit = collective_fit(profile, "all_reduce", 72, "intra")
    assert fit.busbw_GBps == pytest.approx(850.0)
    assert fit.algorithm == "nvls"
    # 680 GB/s without SHARP sets the ring collectives at 72 GPUs [S6].
    assert collective_fit(profile, "all_gather", 72, "intra").busbw_GBps == pytest.approx(680.0)


def test_nvl72_intra_groups_of_16_price_at_nvlink_not_the_nic() -> None:
    intra = collective_fit(GB200, "all_gather", 16, "intra")
    inter = collective_fit(GB200, "all_gather", 16, "inter")
    assert intra.busbw_GBps > 10 * inter.busbw_GBps


@pytest.mark.parametrize(
    ("name", "fp4_tflops"),
    [("b200", 9000), ("gb200-nvl72", 10000), ("b300", 13500), ("gb300-nvl72", 15000)],
)
def test_blackwell_fp4_curve_is_the_fp8_curve_at_the_fp4_peak(name: str, fp4_tflops: float) -> None:
    # Dense FP4 peaks [S8][S9]; no FP4 GEMM benchmark: the fp8 curve's efficiencies on a
    # GFLOP axis scaled by the fp4 / fp8 peak ratio (the same time per tile).
    profile = load_profile(name)
    peaks = profile.device.peak_tflops
    assert peaks["fp4"] == fp4_tflops
    ratio = peaks["fp4"] / peaks["fp8"]
    fp8, fp4 = (profile.compute.gemm_efficiency[d] for d in ("fp8", "fp4"))
    assert [p.efficiency for p in fp4] == [p.efficiency for p in fp8]
    for a, b in zip(fp8, fp4, strict=True):
        assert b.gflop == pytest.approx(a.gflop * ratio, rel=1e-5)


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "mi300x"])
def test_devices_without_fp4_tensor_cores_list_no_fp4(name: str) -> None:
    profile = load_profile(name)
    assert "fp4" not in profile.device.peak_tflops
    assert "fp4" not in profile.compute.gemm_efficiency
