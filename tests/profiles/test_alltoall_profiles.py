"""all_to_all fits of the stored profiles against the published ``alltoall_perf`` runs of
[S62] (oracle-quickstart/oci-gpu-quickstarts @6a0abdc), the 8-GPU (intra) and 32-GPU
(inter) bars of NVIDIA's GTC 2025 S72583 alltoall chart [S63] and the 8x B200 size sweep
of [S64] (mihai-amp/cluster-quality @1f1da58, Vultr B200 nccl_tests_dgxc.log)."""

from __future__ import annotations

import pytest

from profiles.derive_alltoall import (
    A100_ALLTOALL_CHART,
    A100_ALLTOALL_NET_BAR,
    B200_ALLTOALL_SWEEP,
    B300_ALLTOALL_RUNS,
    GB200_ALLTOALL_RUNS,
    GB300_ALLTOALL_RUNS,
    H100_ALLTOALL_CHART,
    H100_ALLTOALL_NET_BAR,
    AlltoallChartFigure,
    AlltoallRun,
    alltoall_busbw,
    with_alltoall,
)
from profiles.lookup import collective_fit, collective_time_s
from profiles.store import load_profile

GIB = 2**30


@pytest.mark.parametrize(
    ("run", "published_busbw"),
    [
        # nvidia/B300/README-B300.md, 8 GiB: algbw 772.06, busbw 675.55 (NCCL 2.28.9).
        (B300_ALLTOALL_RUNS[0], 675.55),
        # nvidia/GB200/README-GB200.md, 8 GiB: 4 / 8 / 64 GPUs.
        (GB200_ALLTOALL_RUNS[0], 615.30),
        (GB200_ALLTOALL_RUNS[1], 657.81),
        (GB200_ALLTOALL_RUNS[2], 622.92),
        # nvidia/GB300/README-GB300.md, 8 GiB: 4 / 8 / 64 GPUs (NCCL 2.28.7).
        (GB300_ALLTOALL_RUNS[0], 624.98),
        (GB300_ALLTOALL_RUNS[1], 679.65),
        (GB300_ALLTOALL_RUNS[2], 649.03),
    ],
    ids=lambda v: f"{v.ranks}gpu" if isinstance(v, AlltoallRun) else str(v),
)
def test_busbw_from_algbw_reproduces_the_published_column(run, published_busbw) -> None:
    # nccl-tests AlltoAllGetBw: busbw = algbw * (n-1)/n; the tables print both columns.
    assert run.size_bytes == 8 * GIB
    assert run.busbw_GBps == pytest.approx(published_busbw, abs=0.01)


@pytest.mark.parametrize(
    ("name", "group", "busbw"),
    [
        ("b300", 8, 675.55),  # 8x B300 run [S62]
        ("b300", 2, 675.55),  # held below the only run
        ("gb200-nvl72", 4, 615.30),  # one tray [S62]
        ("gb200-nvl72", 8, 657.81),  # two trays [S62]
        ("gb200-nvl72", 64, 622.92),  # 16 trays [S62]
        ("gb200-nvl72", 72, 622.92),  # held beyond 64
        ("gb300-nvl72", 4, 624.98),
        ("gb300-nvl72", 8, 679.65),
        ("gb300-nvl72", 64, 649.03),
    ],
)
def test_stored_profiles_carry_the_measured_alltoall_busbw(name, group, busbw) -> None:
    fit = collective_fit(load_profile(name), "all_to_all", group, "intra")
    assert fit.busbw_GBps == pytest.approx(busbw)
    assert fit.points == ()


def test_group_sizes_between_runs_interpolate_in_log2() -> None:
    # 16 GPUs sits a third of the way (in log2 n) from the 8-GPU to the 64-GPU run:
    # 657.81 + (622.92 - 657.81) / 3 = 646.18 on GB200 [S62].
    assert alltoall_busbw(GB200_ALLTOALL_RUNS, (16,))[16] == pytest.approx(646.18)


def test_with_alltoall_keeps_the_other_ops() -> None:
    table = {
        "all_gather": {2: (100.0, "ring"), 8: (100.0, "ring")},
        "all_to_all": {2: (100.0, "direct"), 8: (100.0, "direct")},
    }
    runs = (AlltoallRun(ranks=8, size_bytes=GIB, algbw_GBps=80.0),)
    out = with_alltoall(table, runs)
    assert out["all_gather"] == table["all_gather"]
    assert out["all_to_all"] == {2: (70.0, "direct"), 8: (70.0, "direct")}


@pytest.mark.parametrize(
    ("figure", "busbw", "algbw"),
    [
        # "NCCL Tests Alltoall Bus Bandwidth in GB/s, 8 GPUs" [S63]; algbw = busbw * 8/7.
        (A100_ALLTOALL_CHART[0], 210.0, 240.0),  # NVLink3 (A100)
        (H100_ALLTOALL_CHART[0], 320.0, 365.71),  # NVLink4 (H100)
    ],
)
def test_chart_bars_are_busbw_of_eight_gpus(figure, busbw, algbw) -> None:
    assert figure.ranks == 8
    assert figure.busbw_GBps == busbw
    assert figure.algbw_GBps == pytest.approx(algbw, abs=0.01)


@pytest.mark.parametrize(
    ("name", "group", "busbw"),
    [
        ("a100-sxm-80gb", 8, 210.0),  # NVLink3 (A100) bar [S63]
        ("a100-sxm-80gb", 2, 210.0),  # held below the 8-GPU bar
        ("a100-sxm-40gb", 8, 210.0),  # the 80 GB part's fabric
        ("h100-sxm-80gb", 8, 320.0),  # NVLink4 (H100) bar [S63]
        ("h100-sxm-80gb", 4, 320.0),
        ("h200-sxm-141gb", 8, 320.0),  # H100's bar: same NVLink4 and NVSwitch
    ],
)
def test_stored_profiles_carry_the_chart_alltoall_busbw(name, group, busbw) -> None:
    profile = load_profile(name)
    fit = collective_fit(profile, "all_to_all", group, "intra")
    assert fit.busbw_GBps == pytest.approx(busbw)
    assert fit.points == ()
    assert any(source.startswith("[S63]") for source in profile.provenance.sources)


def test_chart_figures_mix_with_table_runs() -> None:
    # A chart bar at 8 GPUs and a table run at 64: 16 GPUs a third of the way in log2 n.
    figures = (
        AlltoallChartFigure(ranks=8, busbw_GBps=600.0),
        AlltoallRun(ranks=64, size_bytes=8 * GIB, algbw_GBps=640.0),  # busbw 630
    )
    assert alltoall_busbw(figures, (16,))[16] == pytest.approx(610.0)


@pytest.mark.parametrize(
    ("bar", "busbw", "nic_GBps", "efficiency"),
    [
        # "NCCL Tests Alltoall Bus Bandwidth in GB/s, 32 GPUs" [S63]: 4 servers x 8 GPUs.
        # NIC rate = busbw * (32-8)/(32-1): 24 * 24/31 = 18.58 of 25 GB/s (200 Gb/s).
        (A100_ALLTOALL_NET_BAR, 24.0, 18.58, 0.743),  # "8x 200Gb RDMA (DGX A100)"
        # 48 * 24/31 = 37.16 of 50 GB/s (400 Gb/s).
        (H100_ALLTOALL_NET_BAR, 48.0, 37.16, 0.743),  # "8x 400Gb RDMA (DGX H100)"
    ],
)
def test_32_gpu_bars_give_the_nic_rate_of_the_exchange(bar, busbw, nic_GBps, efficiency):
    assert (bar.ranks, bar.ranks_per_node) == (32, 8)
    assert bar.busbw_GBps == busbw
    assert bar.nic_GBps == pytest.approx(nic_GBps, abs=0.005)
    assert bar.nic_efficiency == pytest.approx(efficiency, abs=0.001)


@pytest.mark.parametrize(
    ("name", "all_to_all", "ring"),
    [
        ("a100-sxm-80gb", 18.58, 24.0),  # DGX A100 bar [S63]; ring 192/8 [S21]
        ("a100-sxm-40gb", 18.58, 24.0),
        ("h100-sxm-80gb", 37.16, 48.0),  # DGX H100 bar [S63]; CX-7 ring [S33][S43]
        ("h200-sxm-141gb", 37.16, 48.0),  # DGX H200: the same 8x CX-7 [S16]
        ("b200", 48.0, 48.0),  # no cross-node B200 all_to_all figure: the NIC's ring rate
    ],
)
def test_inter_all_to_all_fits_take_the_32_gpu_bars(name, all_to_all, ring) -> None:
    profile = load_profile(name)
    for group in (2, 4, 32, 1024):
        assert collective_fit(profile, "all_to_all", group, "inter").busbw_GBps == all_to_all
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            assert collective_fit(profile, op, group, "inter").busbw_GBps == ring
    assert collective_fit(profile, "send_recv", 2, "inter").busbw_GBps == ring


@pytest.mark.parametrize("row", B200_ALLTOALL_SWEEP, ids=lambda r: f"{r.size_bytes}B")
def test_b200_sweep_rows_follow_the_nccl_tests_convention(row) -> None:
    # nccl-tests AlltoAllGetBw: algbw = S / t, busbw = algbw * (n-1)/n, both printed to
    # 0.01 GB/s from the unrounded time (t printed to 0.01 us or 4 significant digits).
    assert row.algbw_GBps == pytest.approx(row.size_bytes / row.time_us / 1e3, abs=0.01, rel=2e-4)
    assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 7 / 8, abs=0.01)


def test_b200_sweep_spans_128_bytes_to_16_gib_at_8_gib_busbw_668() -> None:
    # [S64]: out-of-place row at 8589934592 B: 11246.2 us, algbw 763.81, busbw 668.33.
    sizes = [row.size_bytes for row in B200_ALLTOALL_SWEEP]
    assert sizes == [2**k for k in range(7, 35)]
    line = B200_ALLTOALL_SWEEP[sizes.index(8 * GIB)]
    assert (line.time_us, line.algbw_GBps, line.busbw_GBps) == (11246.2, 763.81, 668.33)


def test_b200_profile_reproduces_its_sweep_on_eight_gpus() -> None:
    profile = load_profile("b200")
    fit = collective_fit(profile, "all_to_all", 8, "intra")
    assert fit.busbw_GBps == pytest.approx(668.33)  # 8 GiB row [S64]
    assert len(fit.points) == len(B200_ALLTOALL_SWEEP)
    for row in B200_ALLTOALL_SWEEP:
        seconds = collective_time_s(fit, float(row.size_bytes))
        assert seconds == pytest.approx(row.time_us * 1e-6, rel=1e-9)
    # 2-7 GPUs hold the 8-GPU busbw; the sweep ran on 8 only, so they carry no points.
    four = collective_fit(profile, "all_to_all", 4, "intra")
    assert four.busbw_GBps == pytest.approx(668.33)
    assert four.points == ()
    assert any(source.startswith("[S64]") for source in profile.provenance.sources)
