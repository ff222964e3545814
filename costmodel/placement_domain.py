"""The NVLink domain a plan's groups are placed in on a profile whose scale-up domain spans
servers (NVL72): the segment the job runs in (`costmodel.scale_up`) and its source, and the
groups of the plan that leave it, each with the domains its slowest instance spans
(`costmodel.topology.plan_placements`). `paraplan estimate` and `paraplan plan` print it
(`paraplan.placement_line`); the Megatron-LM export gives its segment to SLURM
(`planner.export_segment`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from costmodel.scale_up import RankPacking, segment_nodes
from costmodel.topology import PLAN_AXES, plan_placements
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class PlacementDomain:
    """The NVLink domain a plan's groups are placed in, and the groups that leave it."""

    kind: Literal["segments", "racks"]
    """``segments``: the job runs in whole segments of ``segment_nodes`` servers (SLURM
    ``--segment``); ``racks``: a whole domain's servers that do not divide the job's, the
    launch without a segment (racks filled in order, the last one partly)."""
    gpus_per_domain: int
    """Consecutive ranks of one domain: ``segment_nodes x gpus_per_node``."""
    segment_nodes: int
    """Servers of one segment (`costmodel.scale_up.segment_nodes`)."""
    gpus_per_node: int
    """GPUs per server."""
    source: Literal["user", "launcher"]
    """``user``: `ClusterSpec.nvlink_segment_nodes`; ``launcher``: Megatron-Bridge's
    launcher rule (`costmodel.scale_up.launcher_segment_nodes`)."""
    groups_across_domains: dict[str, int]
    """Domains spanned by the slowest instance of each group of `PLAN_AXES` that spans
    more than one, in that order."""


def placement_domain(
    cluster: ClusterSpec, profile: HardwareProfile, plan: ParallelPlan
) -> PlacementDomain | None:
    """The `PlacementDomain` of ``plan`` on ``cluster``; None on a profile whose scale-up
    domain is one server (groups across servers are the usual data-parallel case there).
    `SpecError` for a segment the profile and node count do not allow."""
    per_node = cluster.gpus_per_node or profile.topology.gpus_per_node
    segment = segment_nodes(
        profile, cluster.num_gpus, cluster.gpus_per_node, cluster.nvlink_segment_nodes
    )
    if segment is None:
        return None
    placements = plan_placements(profile, plan, RankPacking.of(cluster))
    num_nodes = -(-cluster.num_gpus // per_node)
    return PlacementDomain(
        kind="racks" if num_nodes % segment else "segments",
        gpus_per_domain=segment * per_node,
        segment_nodes=segment,
        gpus_per_node=per_node,
        source="launcher" if cluster.nvlink_segment_nodes is None else "user",
        groups_across_domains={
            axes: placements[axes].num_domains
            for axes in PLAN_AXES
            if placements[axes].num_domains > 1
        },
    )
