"""The NVLink segment a job runs in on NVL72 (costmodel.scale_up), groups priced at their
slowest instance (costmodel.topology), and the screen's placements against the graph's."""

from __future__ import annotations

import pytest

from costmodel.cluster_graph import cluster_graph, place_group
from costmodel.estimate import estimate_plan
from costmodel.placement_domain import placement_domain
from costmodel.plan_frame import plans_frame
from costmodel.scale_up import (
    RankPacking,
    launcher_segment_nodes,
    placement_domain_size,
    segment_nodes,
)
from costmodel.screen import screen_plans
from costmodel.topology import (
    PLAN_AXES,
    cluster_shape,
    plan_placements,
    slowness,
)
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layout import RankLayout
from specs.plan import ParallelPlan
from specs.presets import get_preset

GB200 = load_profile("gb200-nvl72")
GB300 = load_profile("gb300-nvl72")
B200 = load_profile("b200")
H100 = load_profile("h100-sxm-80gb")


# Megatron-Bridge scripts/performance/utils/executors.py (v0.3.0 .. v0.6.0, slurm_executor):
# 4-GPU nodes get segment = nodes when nodes <= 18, else the largest divisor <= 18.
@pytest.mark.parametrize(
    ("nodes", "segment"), [(8, 8), (16, 16), (18, 18), (32, 16), (36, 18), (64, 16), (128, 16)]
)
def test_launcher_rule_table(nodes: int, segment: int) -> None:
    assert launcher_segment_nodes(nodes, 18) == segment
    assert segment_nodes(GB200, nodes * 4) == segment


def test_placement_domain_is_the_segment_on_nvl72_only() -> None:
    assert placement_domain_size(GB200, 256) == 64  # 64 trays: 4 segments of 16
    assert placement_domain_size(GB300, 144) == 72
    assert placement_domain_size(GB200, 128, override=18) == 72  # no segment
    assert placement_domain_size(GB200, 76) == 4  # 19 trays: prime, segments of 1
    for gpus in (8, 64, 256, 1024):
        assert placement_domain_size(B200, gpus) == 8
        assert placement_domain_size(H100, gpus, 4) == 4
        assert segment_nodes(B200, gpus) is None


@pytest.mark.parametrize(
    ("profile", "gpus", "override", "rule"),
    [
        (GB200, 128, 19, "nvlink_segment_within_domain"),
        (GB200, 128, 12, "nvlink_segment_divides_nodes"),
        (B200, 128, 4, "nvlink_segment_spans_servers"),
    ],
)
def test_segment_refusals(profile, gpus: int, override: int, rule: str) -> None:
    with pytest.raises(SpecError, match=rule) as info:
        segment_nodes(profile, gpus, override=override)
    assert f"({override})" in str(info.value)


def test_refusal_names_the_valid_segments() -> None:
    with pytest.raises(SpecError, match="give one of 1, 2, 4, 8, 16, 18"):
        segment_nodes(GB200, 128, override=12)


def test_cluster_spec_refuses_a_non_positive_segment() -> None:
    with pytest.raises(SpecError, match="nvlink_segment_nodes"):
        ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=0)


NVL72_LAYOUTS = [
    (ParallelPlan(tp=1, pp=2, dp=64, ep=16), None),
    (ParallelPlan(tp=1, pp=2, dp=64, ep=16), 18),
    (ParallelPlan(tp=4, pp=2, dp=16, ep=8, etp=1), 18),
    (ParallelPlan(tp=2, pp=3, dp=16, ep=32, etp=1), None),  # 96 GPUs: segments of 12 trays
    (ParallelPlan(tp=8, pp=4, dp=6), None),  # 192 GPUs: segments of 16 trays
    (ParallelPlan(tp=4, cp=2, pp=4, dp=4), 18),
]


def graph_worst(plan: ParallelPlan, segment: int | None, axes: str):
    """The slowest group of ``axes`` over every group of the plan, placed on the graph."""
    layout = RankLayout.from_plan(plan)
    graph = cluster_graph(GB200, layout.world_size, RankPacking(segment_nodes=segment))
    return max((place_group(graph, g, axes) for g in layout.groups(axes)), key=slowness)


@pytest.mark.parametrize(("plan", "segment"), NVL72_LAYOUTS)
def test_worst_instance_agrees_with_every_group_on_the_graph(plan, segment) -> None:
    placed = plan_placements(GB200, plan, RankPacking(segment_nodes=segment))
    for axes in PLAN_AXES:
        assert slowness(placed[axes]) == slowness(graph_worst(plan, segment, axes)), axes
        assert placed[axes].num_domains == graph_worst(plan, segment, axes).num_domains


@pytest.mark.parametrize(("plan", "segment"), NVL72_LAYOUTS)
def test_pipeline_hops_agree_with_every_rank_on_the_graph(plan, segment) -> None:
    layout = RankLayout.from_plan(plan)
    graph = cluster_graph(GB200, layout.world_size, RankPacking(segment_nodes=segment))
    stage = layout.world_size // plan.pp

    def domain(rank: int) -> int:
        return graph.nodes[("gpu", rank)]["domain"]

    expected = [
        all(
            domain(r) == domain((r + stage) % layout.world_size)
            for r in range(s * stage, (s + 1) * stage)
        )
        for s in range(plan.pp)
    ]
    placed = plan_placements(GB200, plan, RankPacking(segment_nodes=segment))
    assert placed.pp_hop_intra == tuple(expected)


def test_rank_zero_is_not_the_slowest_in_an_unsegmented_rack() -> None:
    # 128 GPUs filling racks in order: stage 1's ranks 64..127 straddle ranks 71 | 72
    plan = ParallelPlan(tp=1, pp=2, dp=64, ep=16)
    straddled = plan_placements(GB200, plan, RankPacking(segment_nodes=18))
    segmented = plan_placements(GB200, plan)
    assert straddled["ep"].num_domains == 2 and segmented["ep"].num_domains == 1
    assert straddled["dp-cp"].num_domains == 2 and segmented["dp-cp"].num_domains == 1


QWEN = get_preset("qwen3-30b-a3b")
JOB = TrainingJob(seq_length=4096, global_batch_size=512, precision="bf16")


def test_straddling_launch_is_priced_slower_than_the_segmented_one() -> None:
    plan = ParallelPlan(tp=1, pp=2, dp=64, ep=16, distributed_optimizer=True)
    times = {}
    for segment in (None, 18):
        cluster = ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=segment)
        times[segment] = estimate_plan(QWEN, cluster, JOB, plan, GB200).iteration_time_s
    assert times[18] > times[None]


@pytest.mark.parametrize("segment", [None, 18])
def test_screen_prices_the_same_groups_as_the_simulator_on_nvl72(segment) -> None:
    plans = [
        ParallelPlan(tp=1, pp=2, dp=64, ep=16, distributed_optimizer=True),
        ParallelPlan(tp=2, pp=2, dp=32, ep=8, etp=1, distributed_optimizer=True),
    ]
    cluster = ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=segment)
    screened = screen_plans(QWEN, cluster, JOB, GB200, plans_frame(plans))
    for row, plan in zip(screened.itertuples(), plans, strict=True):
        simulated = estimate_plan(QWEN, cluster, JOB, plan, GB200).iteration_time_s
        assert row.iteration_time_s == pytest.approx(simulated, rel=0.05)


def test_packing_of_a_cluster_carries_its_servers_and_its_segment() -> None:
    # 32 trays in segments of 8: 32-GPU domains, where the launcher's rule gives 16 (64 GPUs)
    cluster = ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=8)
    packing = RankPacking.of(cluster)
    assert packing == RankPacking(gpus_per_node=None, segment_nodes=8)
    assert cluster_shape(GB200, cluster.num_gpus, packing).scale_up_domain == 32
    assert cluster_shape(GB200, cluster.num_gpus).scale_up_domain == 64


def test_placement_domain_names_the_segment_its_source_and_the_crossing_groups() -> None:
    plan = ParallelPlan(tp=1, pp=2, dp=64, ep=16)
    launcher = ClusterSpec(hardware="gb200-nvl72", num_gpus=128)
    domain = placement_domain(launcher, GB200, plan)
    assert domain is not None
    # 32 trays in segments of 16; each 64-rank stage fills one segment: only pp crosses
    assert (domain.kind, domain.gpus_per_domain, domain.source) == ("segments", 64, "launcher")
    assert domain.groups_across_domains == {"pp": 2}
    racks = ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=18)
    domain = placement_domain(racks, GB200, plan)
    assert domain is not None and (domain.kind, domain.source) == ("racks", "user")
    b200 = ClusterSpec(hardware="b200", num_gpus=128)
    assert placement_domain(b200, load_profile("b200"), plan) is None
