"""The NVLink domain a plan is placed in on a profile whose scale-up domain spans servers
(NVL72), as `paraplan estimate` and `paraplan plan` report it: the line of the text output
(`placement_line`) and the ``placement`` key of ``--json`` (`placement_json`), both from
one `costmodel.placement_domain.PlacementDomain`: the domain's GPUs, the segment and its
source, and the groups of the plan that cross domains."""

from __future__ import annotations

from dataclasses import asdict

from costmodel.placement_domain import placement_domain
from costmodel.scale_up import segment_nodes
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
    """The ``placement`` key of ``--json`` output (the fields of
    `costmodel.placement_domain.PlacementDomain`); empty where `placement_domain` is None,
    so output on one-server domains keeps its keys."""
    domain = placement_domain(cluster, profile, plan)
    return {} if domain is None else {"placement": asdict(domain)}
