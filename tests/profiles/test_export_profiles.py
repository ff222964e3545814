"""The export variants (`profiles.derive_export`) follow their sources: the H800 SXM is the
H100 SXM5 with NVLink at 400 of 900 GB/s bidirectional [S65], the A800 SXM4 80GB the A100
SXM4 80GB with NVLink at 400 of 600 GB/s [S67]; everything else is the base part's."""

from __future__ import annotations

import pytest

from profiles.derive_export import DEEPSEEK_H800_IB_GBPS, DEEPSEEK_H800_NVLINK_GBPS
from profiles.lookup import collective_time_s
from profiles.store import load_profile

H100 = load_profile("h100-sxm-80gb")
H800 = load_profile("h800-sxm-80gb")
A100 = load_profile("a100-sxm-80gb")
A800 = load_profile("a800-sxm-80gb")

PAIRS = [(H100, H800, 400 / 900), (A100, A800, 400 / 600)]  # bidirectional NVLink [S65][S67]


def _fits(profile, placement):
    return {(f.op, f.group_size): f for f in profile.communication.fits if f.placement == placement}


@pytest.mark.parametrize(("base", "cut", "ratio"), PAIRS)
def test_intra_busbw_is_the_base_figure_times_the_nvlink_ratio(base, cut, ratio) -> None:
    base_fits, cut_fits = _fits(base, "intra"), _fits(cut, "intra")
    assert base_fits.keys() == cut_fits.keys()
    for key, fit in base_fits.items():
        assert cut_fits[key].busbw_GBps == pytest.approx(fit.busbw_GBps * ratio, abs=0.006)
        assert cut_fits[key].latency_s == fit.latency_s  # α: not link-width bound
        assert cut_fits[key].algorithm == fit.algorithm
        assert cut_fits[key].points == ()
    assert cut.topology.scale_up_GBps_per_gpu == pytest.approx(
        base.topology.scale_up_GBps_per_gpu * ratio
    )


@pytest.mark.parametrize(("base", "cut", "ratio"), PAIRS)
def test_compute_memory_and_nics_are_the_base_parts(base, cut, ratio) -> None:
    assert cut.device.peak_tflops == base.device.peak_tflops
    assert cut.device.memory_gib == base.device.memory_gib
    assert cut.device.hbm_GBps == base.device.hbm_GBps
    assert cut.device.generation == base.device.generation
    assert cut.compute == base.compute
    assert _fits(cut, "inter") == _fits(base, "inter")
    assert cut.topology.nic_GBps_per_gpu == base.topology.nic_GBps_per_gpu


def test_h800_is_hopper_with_vidur_peaks() -> None:
    assert H800.device.generation == "hopper"  # the fitted hopper factors apply
    # vidur-alibabacloud's H800 SKU: fp16 989, fp8 1979 TFLOP/s, 80 GB [S50]
    assert H800.device.peak_tflops["fp16"] == pytest.approx(989, rel=1e-3)
    assert H800.device.peak_tflops["fp8"] == pytest.approx(1979, rel=1e-3)


def test_h800_scaled_nvlink_busbw_meets_deepseeks_achieved_figure() -> None:
    # DeepSeek-V3 §3.2.2 [S66]: NVLink 160 GB/s, IB 50 GB/s per H800. The ring all_reduce
    # and send/recv figures scaled from H100 land within 5% of the NVLink figure.
    intra = _fits(H800, "intra")
    for key in (("all_reduce", 4), ("send_recv", 2)):
        assert intra[key].busbw_GBps == pytest.approx(DEEPSEEK_H800_NVLINK_GBPS, rel=0.05)
    assert H800.topology.nic_GBps_per_gpu == DEEPSEEK_H800_IB_GBPS


def test_an_nvlink_bound_all_to_all_takes_longer_by_the_link_ratio() -> None:
    size = 2.0**30
    h100_fit, h800_fit = (
        _fits(H100, "intra")[("all_to_all", 8)],
        _fits(H800, "intra")[("all_to_all", 8)],
    )
    latency = h100_fit.latency_s
    h100, h800 = collective_time_s(h100_fit, size), collective_time_s(h800_fit, size)
    assert (h800 - latency) / (h100 - latency) == pytest.approx(900 / 400, rel=1e-3)
