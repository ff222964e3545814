"""The cluster graph and the placement of a plan's groups (costmodel.topology)."""

from __future__ import annotations

import pytest

from costmodel.cluster_graph import cluster_graph, place_group
from costmodel.scale_up import RankPacking
from costmodel.topology import (
    plan_placements,
    product_placement,
    strided_group_placement,
    world_placement,
)
from profiles.store import load_profile
from specs.errors import SpecError
from specs.layout import RankLayout
from specs.plan import ParallelPlan

H100 = load_profile("h100-sxm-80gb")


def test_graph_has_gpus_scale_up_nics_and_fabric():
    graph = cluster_graph(H100, 16)
    kinds = [graph.nodes[v]["kind"] for v in graph.nodes]
    assert kinds.count("gpu") == 16
    assert kinds.count("scale_up") == 2  # one NVSwitch domain per 8-GPU node
    assert kinds.count("nic") == 16  # DGX H100: one 400 Gb/s NIC per GPU
    assert kinds.count("fabric") == 1
    # rail wiring: local GPU i uses NIC i of its node
    assert ("nic", 1, 3) in graph[("gpu", 11)]
    assert graph.edges[("nic", 1, 3), ("fabric",)]["GBps"] == H100.topology.nic_GBps_per_gpu


def test_single_node_graph_has_no_fabric():
    graph = cluster_graph(H100, 8)
    assert ("fabric",) not in graph
    assert all(graph.nodes[v]["kind"] != "nic" for v in graph.nodes)


def test_tp_group_inside_a_node_is_intra():
    placements = plan_placements(H100, ParallelPlan(tp=8, dp=4))
    tp = placements["tp"]
    assert tp.placement == "intra" and tp.num_nodes == 1 and tp.ranks_per_node == 8


def test_dp_group_across_nodes_spans_k_nodes():
    placements = plan_placements(H100, ParallelPlan(tp=8, dp=4))
    dp = placements["dp-cp"]
    assert dp.placement == "inter" and dp.num_nodes == 4 and dp.ranks_per_node == 1
    assert dp.nics_per_node == 1


def test_dp_group_with_small_tp_packs_several_ranks_per_node():
    placements = plan_placements(H100, ParallelPlan(tp=2, dp=8))  # 16 GPUs
    dp = placements["dp-cp"]
    assert (dp.size, dp.num_nodes, dp.ranks_per_node, dp.nics_per_node) == (8, 2, 4, 4)


def test_pipeline_hops_inside_and_across_nodes():
    inside = plan_placements(H100, ParallelPlan(tp=2, pp=4))  # 8 GPUs, one node
    assert inside.pp_hop_intra == (True, True, True, True)
    across = plan_placements(H100, ParallelPlan(tp=8, pp=3))  # one stage per node
    assert across.pp_hop_intra == (False, False, False)
    mixed = plan_placements(H100, ParallelPlan(tp=4, pp=4))  # two stages per node
    assert mixed.pp_hop_intra == (True, False, True, False)


def test_expert_groups_use_the_expert_grid():
    plan = ParallelPlan(tp=2, dp=8, ep=8, etp=1)  # 16 GPUs, ep folds over tp and dp
    placements = plan_placements(H100, plan)
    assert placements["ep"].size == 8 and placements["ep"].num_nodes == 1
    assert placements["edp"].size == 2 and placements["edp"].num_nodes == 2


def test_gpus_per_node_override():
    placements = plan_placements(H100, ParallelPlan(tp=8, dp=2), RankPacking(gpus_per_node=4))
    assert placements["tp"].num_nodes == 2 and placements["tp"].placement == "inter"


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("cp", [1, 2])
@pytest.mark.parametrize("dp", [1, 3, 4, 16])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_strided_placement_agrees_with_the_graph(tp, cp, dp, pp):
    layout = RankLayout(tp=tp, cp=cp, dp=dp, pp=pp)
    graph = cluster_graph(H100, layout.world_size)
    strides = {"tp": (tp, 1), "cp": (cp, tp), "dp-cp": (cp * dp, tp), "pp": (pp, tp * cp * dp)}
    for axes, (size, stride) in strides.items():
        by_graph = place_group(graph, layout.group_of(0, axes), axes)
        by_formula = strided_group_placement(
            size, stride, gpus_per_node=8, scale_up_domain=8, nics_per_node=8, axes=axes
        )
        assert by_graph == by_formula


def test_placing_a_rank_outside_the_graph_raises():
    graph = cluster_graph(H100, 16, ranks=[0, 1])
    with pytest.raises(SpecError, match="not in the graph"):
        place_group(graph, [0, 9])
    with pytest.raises(SpecError, match="outside"):
        cluster_graph(H100, 16, ranks=[16])


@pytest.mark.parametrize(
    ("profile", "num_gpus", "plan"),
    [
        ("h100-sxm-80gb", 16, ParallelPlan(pp=2, dp=8)),
        ("h100-sxm-80gb", 16, ParallelPlan(pp=4, dp=4)),
        ("h100-sxm-80gb", 16, ParallelPlan(tp=2, pp=2, dp=4)),
        ("h100-sxm-80gb", 32, ParallelPlan(tp=2, cp=2, pp=2, dp=4)),
        ("h100-sxm-80gb", 32, ParallelPlan(tp=16, dp=2)),
        ("h100-sxm-80gb", 4, ParallelPlan(pp=2, dp=2)),
        ("gb200-nvl72", 144, ParallelPlan(tp=4, pp=4, dp=9)),
        ("gb200-nvl72", 32, ParallelPlan(pp=2, dp=16)),
        ("h100-sxm-80gb", 32, ParallelPlan(tp=2, pp=2, dp=8, ep=4)),
    ],
)
def test_world_placement_is_the_placement_of_every_rank(profile, num_gpus, plan):
    """The world composed from one rank's groups equals `place_group` over all ranks."""
    hw = load_profile(profile)
    placements = plan_placements(hw, plan)
    graph = cluster_graph(hw, num_gpus)
    expected = place_group(graph, range(num_gpus), "world")
    assert world_placement(hw, placements) == expected


@pytest.mark.parametrize(
    ("num_gpus", "plan"),
    [
        (16, ParallelPlan(tp=8, cp=2)),
        (32, ParallelPlan(tp=8, cp=2, dp=2)),
        (32, ParallelPlan(tp=4, cp=4, dp=2)),
        (16, ParallelPlan(tp=2, cp=2, dp=4)),
    ],
)
def test_tp_cp_block_is_the_placement_of_its_ranks(num_gpus, plan):
    """tp x cp ranks of rank 0 are 0 .. tp·cp - 1 (`specs.layout` order)."""
    placements = plan_placements(H100, plan)
    block = product_placement(H100, (placements["tp"], placements["cp"]), "tp-cp")
    graph = cluster_graph(H100, num_gpus)
    assert block == place_group(graph, range(plan.tp * plan.cp), "tp-cp")
