"""Collective and point-to-point times on placed groups (costmodel.collectives)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.collectives import (
    collective_time_s,
    p2p_time_s,
    ring_exchange_time_s,
)
from costmodel.topology import GroupPlacement, strided_group_placement
from profiles.lookup import collective_fit
from profiles.store import load_profile
from specs.errors import SpecError

A100 = load_profile("a100-sxm-80gb")
H100 = load_profile("h100-sxm-80gb")
GiB = 2**30


def placed(size: int, stride: int, per_node: int = 8, nics: int = 8) -> GroupPlacement:
    return strided_group_placement(
        size, stride, gpus_per_node=per_node, scale_up_domain=per_node, nics_per_node=nics
    )


def busbw_GBps(op: str, size: float, n: int, seconds: float) -> float:
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
    return size * factor / seconds / 1e9


@pytest.mark.parametrize(
    ("op", "factor"),
    [
        ("all_reduce", 2 * 7 / 8),
        ("all_gather", 7 / 8),
        ("reduce_scatter", 7 / 8),
        ("all_to_all", 7 / 8),
    ],
)
def test_intra_node_uses_nccl_tests_factors(op, factor):
    # nccl-tests PERFORMANCE.md [S29]: time = alpha + S * factor / busbw. On H100, whose
    # fits carry no measured points (A100's all_reduce scales the line to its traces).
    fit = collective_fit(H100, op, 8, "intra")
    assert not fit.points
    size = 1 * GiB
    expected = fit.latency_s + size * factor / (fit.busbw_GBps * 1e9)
    assert collective_time_s(H100, op, size, placed(8, 1)) == pytest.approx(expected)


def test_dgx_a100_all_reduce_across_nodes_reaches_eight_nics():
    # NVIDIA/nccl#812 [S21]: 8 x 200 Gb/s HDR per DGX A100 gives ~192 GB/s all-reduce
    # busbw across nodes = 8 x the 24 GB/s per-NIC rate the profile stores.
    group = placed(64, 1)  # 8 nodes x 8 GPUs
    assert group.num_nodes == 8 and group.ranks_per_node == 8
    size = 16 * GiB
    seconds = collective_time_s(A100, "all_reduce", size, group)
    assert busbw_GBps("all_reduce", size, 64, seconds) == pytest.approx(192.0, rel=0.01)


def test_one_rank_per_node_uses_the_inter_fit():
    group = placed(16, 8)  # e.g. a DP group with tp = 8: one rank on each of 16 nodes
    assert group.ranks_per_node == 1 and group.num_nodes == 16
    fit = collective_fit(A100, "reduce_scatter", 16, "inter")
    size = 4 * GiB
    expected = fit.latency_s + size * 15 / 16 / (fit.busbw_GBps * 1e9)
    assert collective_time_s(A100, "reduce_scatter", size, group) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "bar_GBps"),
    [
        ("a100-sxm-80gb", 24.0),  # "8x 200Gb RDMA (DGX A100)"
        ("h100-sxm-80gb", 48.0),  # "8x 400Gb RDMA (DGX H100)"
        ("h200-sxm-141gb", 48.0),  # DGX H200: the same 8x 400 Gb/s ConnectX-7
    ],
)
def test_all_to_all_over_four_dgx_nodes_reproduces_the_32_gpu_bars(name, bar_GBps):
    # NVIDIA GTC 2025 S72583 slide 13 [S63], "NCCL Tests Alltoall Bus Bandwidth in GB/s,
    # 32 GPUs": 4 servers x 8 GPUs, one NIC per GPU.
    profile = load_profile(name)
    group = placed(32, 1)
    assert group.num_nodes == 4 and group.ranks_per_node == 8
    size = 8 * GiB
    seconds = collective_time_s(profile, "all_to_all", size, group)
    assert busbw_GBps("all_to_all", size, 32, seconds) == pytest.approx(bar_GBps, rel=0.005)


def test_more_ranks_per_node_share_more_nics():
    size = 4 * GiB
    times = [collective_time_s(H100, "all_reduce", size, placed(32, s)) for s in (8, 4, 2, 1)]
    assert times == sorted(times, reverse=True)  # 1, 2, 4, 8 ranks (NICs) per node


def test_all_to_all_across_nodes_is_limited_by_one_nic_per_rank():
    # nccl-tests#267 [S33]: all-to-all cannot spread one rank's traffic over several NICs.
    # 16 ranks on 2 nodes: half of each rank's data leaves through its own NIC.
    group = placed(16, 1)
    size = 8 * GiB
    nic = collective_fit(H100, "all_to_all", 16, "inter")
    seconds = collective_time_s(H100, "all_to_all", size, group)
    assert seconds == pytest.approx(nic.latency_s + size * 8 / 16 / (nic.busbw_GBps * 1e9))
    # N nodes: busbw ~ N/(N-1) x the NIC rate (nccl-tests#130 [S32]).
    assert busbw_GBps("all_to_all", size, 16, seconds) == pytest.approx(
        2 * nic.busbw_GBps * 15 / 16, rel=0.01
    )


def test_shared_nics_halve_the_inter_bandwidth():
    own = GroupPlacement(
        axes="dp",
        size=8,
        num_nodes=2,
        num_domains=2,
        ranks_per_node=4,
        ranks_per_domain=4,
        nics_per_node=4,
    )
    shared = GroupPlacement(
        axes="dp",
        size=8,
        num_nodes=2,
        num_domains=2,
        ranks_per_node=4,
        ranks_per_domain=4,
        nics_per_node=2,
    )
    size = 8 * GiB
    fast = collective_time_s(H100, "all_gather", size, own)
    slow = collective_time_s(H100, "all_gather", size, shared)
    assert slow == pytest.approx(2 * fast, rel=0.01)


def test_p2p_inside_and_across_nodes():
    size = 256 * 2**20
    intra = collective_fit(A100, "send_recv", 2, "intra")
    inter = collective_fit(A100, "send_recv", 2, "inter")
    assert p2p_time_s(A100, size, intra=True) == pytest.approx(
        intra.latency_s + size / (intra.busbw_GBps * 1e9)
    )
    assert p2p_time_s(A100, size, intra=False) == pytest.approx(
        inter.latency_s + size / (inter.busbw_GBps * 1e9)
    )
    assert ring_exchange_time_s(A100, size, 3, placed(4, 1)) == pytest.approx(
        3 * p2p_time_s(A100, size, intra=True)
    )


def test_nothing_to_move_costs_nothing_and_bad_input_raises():
    assert collective_time_s(A100, "all_reduce", 0, placed(8, 1)) == 0.0
    assert collective_time_s(A100, "all_reduce", GiB, placed(1, 1)) == 0.0
    with pytest.raises(SpecError, match="unknown collective"):
        collective_time_s(A100, "broadcast", GiB, placed(8, 1))
    with pytest.raises(SpecError):
        collective_time_s(A100, "all_reduce", -1, placed(8, 1))


@settings(max_examples=100, deadline=None)
@given(
    op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]),
    size=st.floats(1e3, 1e11),
    log_n=st.integers(1, 9),
    log_stride=st.integers(0, 4),
)
def test_time_grows_with_bytes(op, size, log_n, log_stride):
    group = placed(2**log_n, 2**log_stride)
    assert collective_time_s(H100, op, 2 * size, group) >= collective_time_s(H100, op, size, group)
