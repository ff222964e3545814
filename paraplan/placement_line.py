"""The NVLink domain a plan is placed in on a profile whose scale-up domain spans servers
(NVL72), as `paraplan estimate` and `paraplan plan` report it: the line of the text output
(`placement_line`) and the ``placement`` key of ``--json`` (`placement_json`), both from
one `PlacementDomain`: the domain's GPUs, the segment (`costmodel.scale_up`) and its
source, and the groups of the plan that cross domains, with how many each spans at its
slowest instance (`costmodel.topology.plan_placements`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from costmodel.scale_up import RankPacking, segment_nodes
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.plan import ParallelPlan


def check_segment(cluster: ClusterSpec, profile: HardwareProfile) -> None:
    """`SpecError` for a --nvlink-segment-nodes the profile and node count do not allow
    (`costmodel.scale_up.segment_nodes`), before any plan is priced."""
    segment_nodes(profile, cluster.num_gpus, cluster.gpus_per_node, cluster.nvlink_segment_nodes)


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
    """``user``: ``--nvlink-segment-nodes``; ``launcher``: Megatron-Bridge's launcher rule
    (`costmodel.scale_up.launcher_segment_nodes`)."""
    groups_across_domains: dict[str, int]
    """Domains spanned by the slowest instance of each group of
    `costmodel.topology.PLAN_AXES` that spans more than one, in that order."""


def placement_domain(
    cluster: ClusterSpec, profile: HardwareProfile, plan: ParallelPlan
) -> PlacementDomain | None:
    """The `PlacementDomain` of ``plan`` on ``cluster``; None on a profile whose scale-up
    domain is one server (groups across servers are the usual data-parallel case there)."""
    from costmodel.topology import PLAN_AXES, plan_placements

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


def placement_line(
    cluster: ClusterSpec, profile: HardwareProfile, plan: ParallelPlan
) -> str | None:
    """One line: the GPUs per NVLink domain the plan was placed in, the segment (``racks``
    where it is a whole domain that does not divide the nodes) and its source, and the
    groups that span several domains; None where `placement_domain` is."""
    domain = placement_domain(cluster, profile, plan)
    if domain is None:
        return None
    source = (
        f"--nvlink-segment-nodes {domain.segment_nodes}"
        if domain.source == "user"
        else "Megatron-Bridge launcher rule"
    )
    crossing = [f"{axes} over {k}" for axes, k in domain.groups_across_domains.items()]
    groups = "groups across domains: " + ", ".join(crossing) if crossing else "no group crosses"
    return (
        f"NVLink domain: {domain.gpus_per_domain} GPUs ({domain.kind} of "
        f"{domain.segment_nodes} servers x {domain.gpus_per_node}, {source}); {groups}"
    )


def placement_json(
    cluster: ClusterSpec, profile: HardwareProfile, plan: ParallelPlan
) -> dict[str, object]:
    """The ``placement`` key of ``--json`` output (the fields of `PlacementDomain`); empty
    where `placement_domain` is None, so output on one-server domains keeps its keys."""
    domain = placement_domain(cluster, profile, plan)
    return {} if domain is None else {"placement": asdict(domain)}
