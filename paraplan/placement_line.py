"""The line `paraplan estimate` and `paraplan plan` print on a profile whose scale-up domain
spans servers (NVL72): the NVLink domain the groups were placed in, where it comes from
(`costmodel.scale_up`), and the groups of the plan that cross domains, with how many each
spans at its slowest instance (`costmodel.topology.plan_placements`)."""

from __future__ import annotations

from costmodel.scale_up import RankPacking, segment_nodes
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.plan import ParallelPlan


def check_segment(cluster: ClusterSpec, profile: HardwareProfile) -> None:
    """`SpecError` for a --nvlink-segment-nodes the profile and node count do not allow
    (`costmodel.scale_up.segment_nodes`), before any plan is priced."""
    segment_nodes(profile, cluster.num_gpus, cluster.gpus_per_node, cluster.nvlink_segment_nodes)


def placement_line(
    cluster: ClusterSpec, profile: HardwareProfile, plan: ParallelPlan
) -> str | None:
    """One line: the GPUs per NVLink domain the plan was placed in, the segment (``racks``
    where it is a whole domain that does not divide the nodes: no segment, racks filled in
    order) and its source, and the groups that span several domains; None on a profile
    whose scale-up domain is one server (groups across servers are the usual data-parallel
    case there)."""
    from costmodel.topology import PLAN_AXES, plan_placements

    per_node = cluster.gpus_per_node or profile.topology.gpus_per_node
    segment = segment_nodes(
        profile, cluster.num_gpus, cluster.gpus_per_node, cluster.nvlink_segment_nodes
    )
    if segment is None:
        return None
    source = (
        f"--nvlink-segment-nodes {segment}"
        if cluster.nvlink_segment_nodes is not None
        else "Megatron-Bridge launcher rule"
    )
    placements = plan_placements(profile, plan, RankPacking.of(cluster))
    crossing = [
        f"{axes} over {placements[axes].num_domains}"
        for axes in PLAN_AXES
        if placements[axes].num_domains > 1
    ]
    groups = "groups across domains: " + ", ".join(crossing) if crossing else "no group crosses"
    num_nodes = -(-cluster.num_gpus // per_node)
    unit = "racks" if num_nodes % segment else "segments"
    return (
        f"NVLink domain: {segment * per_node} GPUs ({unit} of {segment} servers x {per_node}, "
        f"{source}); {groups}"
    )
