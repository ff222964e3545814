"""An NVLink domain larger than a server (NVL72: 72 GPUs, trays of 4) in the placement and
the collective prices (costmodel.topology, costmodel.collectives)."""

from __future__ import annotations

import pytest

from costmodel.cluster_graph import cluster_graph, place_group
from costmodel.collectives import collective_time_s
from costmodel.scale_up import scale_up_domain_size
from costmodel.topology import (
    plan_placements,
    strided_group_placement,
)
from profiles.store import load_profile
from specs.plan import ParallelPlan

GB200 = load_profile("gb200-nvl72")
B200 = load_profile("b200")


def test_graph_puts_trays_of_four_in_one_72_gpu_domain() -> None:
    graph = cluster_graph(GB200, 144)
    assert graph.nodes[("gpu", 5)]["node"] == 1
    assert graph.nodes[("gpu", 5)]["domain"] == 0
    assert graph.nodes[("gpu", 71)]["domain"] == 0
    assert graph.nodes[("gpu", 72)]["domain"] == 1
    kinds = [graph.nodes[v]["kind"] for v in graph.nodes]
    assert kinds.count("scale_up") == 2


def test_tp8_across_two_trays_is_intra() -> None:
    tp = plan_placements(GB200, ParallelPlan(tp=8, dp=18))["tp"]
    assert tp.num_nodes == 2  # crosses trays
    assert tp.placement == "intra"  # but stays in the NVLink domain


def test_ep64_inside_the_rack_is_intra_and_across_racks_is_inter() -> None:
    graph = cluster_graph(GB200, 144)
    inside = place_group(graph, range(64), "ep")
    across = place_group(graph, range(0, 144, 2), "ep")
    assert (inside.placement, inside.num_nodes) == ("intra", 16)
    assert across.placement == "inter"


def test_strided_placement_agrees_with_the_graph_on_nvl72() -> None:
    graph = cluster_graph(GB200, 144)
    for size, stride in ((8, 1), (16, 4), (32, 2), (4, 36)):
        strided = strided_group_placement(
            size, stride, gpus_per_node=4, scale_up_domain=72, nics_per_node=4
        )
        graph_placed = place_group(graph, [i * stride for i in range(size)])
        assert strided == graph_placed


def test_nvlink_price_for_a_cross_tray_group() -> None:
    # 1 GiB all_gather over 16 GPUs: NVL72 keeps NVLink rates; on 8-GPU B200 servers the
    # ring crosses the NICs, 8 ranks x 48 GB/s per server.
    size = 2**30
    nvl = strided_group_placement(16, 1, gpus_per_node=4, scale_up_domain=72, nics_per_node=4)
    hgx = strided_group_placement(16, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    nvl_s = collective_time_s(GB200, "all_gather", size, nvl)
    hgx_s = collective_time_s(B200, "all_gather", size, hgx)
    busbw = [f.busbw_GBps for f in GB200.communication.fits if f.op == "all_gather"]
    assert nvl.placement == "intra" and hgx.placement == "inter"
    expected = size * 15 / 16 / (max(busbw) * 1e9)
    assert nvl_s == pytest.approx(expected, rel=0.1)
    assert hgx_s == pytest.approx(size * 15 / 16 / (8 * 48e9), rel=0.1)


def test_domain_size_under_a_gpus_per_node_override() -> None:
    assert scale_up_domain_size(GB200) == 72
    assert scale_up_domain_size(GB200, 4) == 72
    assert scale_up_domain_size(GB200, 8) == 72  # 72 trays-of-8 still share the switches
    assert scale_up_domain_size(GB200, 5) == 5  # not a divisor: capped at a server
    assert scale_up_domain_size(B200, 4) == 4
    assert scale_up_domain_size(B200) == 8
