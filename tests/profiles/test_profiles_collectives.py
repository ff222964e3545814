"""Collective lookups (`profiles.lookup.collective_fit`, `collective_time_s`, `bus_factor`):
the stored fits and their sourced bandwidths, measured points on a fit, group sizes between
and beyond the stored ones, a single-node profile, and the refusals."""

from __future__ import annotations

import dataclasses
import math

import pytest

from profiles.lookup import bus_factor, collective_fit, collective_time_s, gemm_efficiency
from profiles.schema import HardwareProfile
from profiles.schema_device import ComputeProfile, DeviceSpec, EfficiencyPoint
from profiles.schema_network import CollectiveFit, CommunicationProfile, TimePoint, Topology
from profiles.schema_provenance import Provenance
from specs.errors import SpecError
from tests.profiles.test_profiles_lookup import A100, H100, PROFILES, STORED

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def test_collective_points_scale_the_line_by_their_measured_ratio() -> None:
    line = CollectiveFit(
        op="all_reduce", group_size=2, placement="intra", latency_s=1e-4, busbw_GBps=1.0
    )
    sizes = (1e3, 1e5, 1e7)
    ratios = (1.0, 2.0, 1.5)
    fit = dataclasses.replace(
        line,
        points=tuple(
            TimePoint(size_bytes=s, seconds=r * collective_time_s(line, s))
            for s, r in zip(sizes, ratios, strict=True)
        ),
    )
    for s, r in zip(sizes, ratios, strict=True):  # measured points are reproduced
        assert collective_time_s(fit, s) == pytest.approx(r * collective_time_s(line, s))
    # Between points the ratio is linear in log size; beyond the ends it is held.
    assert collective_time_s(fit, 1e4) == pytest.approx(1.5 * collective_time_s(line, 1e4))
    assert collective_time_s(fit, 10.0) == pytest.approx(collective_time_s(line, 10.0))
    assert collective_time_s(fit, 1e9) == pytest.approx(1.5 * collective_time_s(line, 1e9))


def test_collective_points_must_increase_in_size() -> None:
    points = (TimePoint(size_bytes=2e3, seconds=1e-4), TimePoint(size_bytes=1e3, seconds=1e-4))
    with pytest.raises(SpecError, match="strictly increase"):
        CollectiveFit(
            op="all_reduce",
            group_size=2,
            placement="intra",
            latency_s=1e-4,
            busbw_GBps=1.0,
            points=points,
        )


@pytest.mark.parametrize("name", STORED)
@pytest.mark.parametrize("placement", ["intra", "inter"])
def test_collective_fits_stored_for_2_to_8(name: str, placement: str) -> None:
    fits = PROFILES[name].communication.fits
    for op in COLLECTIVES:
        sizes = {f.group_size for f in fits if f.op == op and f.placement == placement}
        assert set(range(2, 9)) <= sizes, (op, placement)
    assert any(f.op == "send_recv" and f.placement == placement for f in fits)


@pytest.mark.parametrize("name", STORED)
def test_inter_node_is_slower_than_intra_node(name: str) -> None:
    profile = PROFILES[name]
    for op in COLLECTIVES:
        intra = collective_fit(profile, op, 8, "intra")
        inter = collective_fit(profile, op, 8, "inter")
        assert inter.busbw_GBps < intra.busbw_GBps
        assert inter.latency_s > intra.latency_s


def test_sourced_bandwidths() -> None:
    assert collective_fit(H100, "all_reduce", 8, "intra").busbw_GBps == 480.0  # NVLS [S37]
    assert collective_fit(H100, "all_reduce", 8, "intra").algorithm == "nvls"
    assert collective_fit(H100, "all_reduce", 2, "intra").busbw_GBps == 370.0  # ring [S30]
    assert collective_fit(H100, "reduce_scatter", 8, "intra").busbw_GBps == 360.0  # [S38]
    assert collective_fit(H100, "all_gather", 64, "inter").busbw_GBps == 48.0  # CX-7 [S33]
    assert collective_fit(A100, "all_reduce", 8, "intra").busbw_GBps == 234.89  # [S6]
    assert collective_fit(A100, "all_reduce", 16, "inter").busbw_GBps == 24.0  # 192/8 [S21]
    mi300x = PROFILES["mi300x"]
    assert collective_fit(mi300x, "all_reduce", 2, "intra").busbw_GBps == 47.7  # [S6]
    assert collective_fit(mi300x, "all_reduce", 8, "intra").busbw_GBps == 312.9  # [S6]
    # 8xA100 nccl-tests all_reduce at 32 KiB took 43.83 us [S6]
    assert collective_fit(A100, "all_reduce", 8, "intra").latency_s == pytest.approx(43.83e-6)


def test_group_size_between_stored_sizes_interpolates_in_log2() -> None:
    lo = collective_fit(H100, "all_reduce", 8, "inter")
    hi = collective_fit(H100, "all_reduce", 16, "inter")
    mid = collective_fit(H100, "all_reduce", 11, "inter")
    t = math.log2(11 / 8)
    assert mid.group_size == 11
    assert mid.latency_s == pytest.approx(lo.latency_s + t * (hi.latency_s - lo.latency_s))
    assert lo.latency_s < mid.latency_s < hi.latency_s


def test_group_size_beyond_stored_range_uses_the_largest() -> None:
    largest = collective_fit(H100, "all_reduce", 1024, "inter")
    beyond = collective_fit(H100, "all_reduce", 4096, "inter")
    assert (beyond.latency_s, beyond.busbw_GBps, beyond.group_size) == (
        largest.latency_s,
        largest.busbw_GBps,
        4096,
    )


def test_collective_lookup_errors() -> None:
    with pytest.raises(SpecError, match="does not fit in one scale-up domain of 8"):
        collective_fit(H100, "all_reduce", 16, "intra")
    with pytest.raises(SpecError, match="unknown collective 'broadcast'"):
        collective_fit(H100, "broadcast", 4, "intra")
    with pytest.raises(SpecError, match="between 2 ranks"):
        collective_fit(H100, "send_recv", 4, "inter")
    with pytest.raises(SpecError, match="placement must be"):
        collective_fit(H100, "all_reduce", 4, "rack")


def test_single_node_profile_has_no_inter_fits() -> None:
    fit = CollectiveFit(
        op="all_reduce", group_size=2, placement="intra", latency_s=1e-4, busbw_GBps=2.0
    )
    cpu = HardwareProfile(
        name="cpu",
        device=DeviceSpec(
            name="cpu", vendor="x", kind="cpu", peak_tflops={"fp32": 0.1}, memory_gib=8, hbm_GBps=10
        ),
        compute=ComputeProfile(
            gemm_efficiency={"fp32": (EfficiencyPoint(gflop=1.0, efficiency=1.0),)},
            gemm_alignment_elements=1,
            gemm_misaligned_factor=1.0,
            memory_bandwidth_efficiency=1.0,
        ),
        communication=CommunicationProfile(backend="gloo", fits=(fit,)),
        topology=Topology(
            gpus_per_node=2, scale_up_domain=2, scale_up_fabric="host_memory", nics_per_node=0
        ),
        provenance=Provenance(method="measured", date="2026-11-29", command="paraplan profile"),
    )
    assert collective_fit(cpu, "all_reduce", 2, "intra") == fit
    with pytest.raises(SpecError, match="single-node profile has no inter fits") as caught:
        collective_fit(cpu, "all_reduce", 2, "inter")
    # the fix for a plan wider than the ranks profiled together on this machine
    assert str(caught.value).endswith(
        ": the plan spans more than the 2 ranks this profile measured together; profile as "
        "many ranks as the plan has on this machine (paraplan profile --nproc N), or plan for "
        "at most that many"
    )
    # On a peak taken from the best measured GEMM, large GEMMs run at 100%.
    assert gemm_efficiency(cpu, 2048, 2048, 2048, "fp32") == 1.0
    assert gemm_efficiency(cpu, 100, 100, 50, "fp32") == pytest.approx(1e-3)


def test_bus_factors_follow_nccl_tests() -> None:
    # nccl-tests PERFORMANCE.md [S29]
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("all_to_all", 4) == pytest.approx(0.75)
    assert bus_factor("send_recv", 2) == 1.0
    with pytest.raises(SpecError, match="group_size must be >= 2"):
        bus_factor("all_reduce", 1)


def test_collective_time_is_alpha_plus_bytes_over_busbw() -> None:
    fit = CollectiveFit(
        op="all_reduce", group_size=8, placement="intra", latency_s=10e-6, busbw_GBps=100.0
    )
    assert collective_time_s(fit, 0) == pytest.approx(10e-6)
    assert collective_time_s(fit, 1e9) == pytest.approx(10e-6 + 1e9 * 1.75 / 100e9)
    with pytest.raises(SpecError, match="size_bytes must be >= 0"):
        collective_time_s(fit, -1)
