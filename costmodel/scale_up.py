"""The scale-up domain a job's process groups are placed in.

A profile's `Topology` gives the scale-up fabric: ``scale_up_domain`` devices that share
one NVSwitch / xGMI / host fabric. On most machines that is one server. On a rack-scale
NVLink system (GB200 / GB300 NVL72: 72 GPUs over 18 trays of 4) the domain spans servers,
and where a job's ranks land in it is the launcher's choice: SLURM's ``--segment=N``
gives the job whole segments of N consecutive nodes, each segment inside one NVLink
domain (block topology), and Megatron-Bridge's performance launcher sets it for 4-GPU
nodes (`scripts/performance/utils/executors.py`, ``slurm_executor``, releases v0.3.0 to
v0.6.0: ``segment = nodes`` when nodes <= 18, else the largest divisor of the node count
that is <= 18; v0.2.0 set it only above 18 nodes). So 256 GB200 GPUs (64 trays) run as
4 segments of 16 trays, 64 GPUs per NVLink domain, and a group that the rank order keeps
inside 64 consecutive ranks never leaves NVLink.

For placement the domain is therefore the segment: ``segment_nodes x gpus_per_node``
consecutive ranks (`placement_domain_size`). The launcher's 18 is the trays of one NVL72
rack (72 / 4); here it is the profile's ``scale_up_domain / gpus_per_node``. A user may
give the segment (`specs.cluster.ClusterSpec.nvlink_segment_nodes`): a divisor of the node
count, as SLURM requires, or the nodes of a whole domain, which is the launch without a
segment (racks filled in order, the last one partly, so groups may cross racks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class RankPacking:
    """How a job's consecutive ranks fill servers and NVLink segments: the two
    `specs.cluster.ClusterSpec` fields that placement reads, kept together from the cluster
    to `costmodel.topology.cluster_shape`."""

    gpus_per_node: int | None = None
    """Ranks per server; None means the profile's."""
    segment_nodes: int | None = None
    """Servers of one NVLink segment (`ClusterSpec.nvlink_segment_nodes`); None means the
    launcher's rule (`launcher_segment_nodes`); the function `segment_nodes` checks it."""

    @classmethod
    def of(cls, cluster: ClusterSpec) -> RankPacking:
        """The packing ``cluster`` asks for."""
        return cls(gpus_per_node=cluster.gpus_per_node, segment_nodes=cluster.nvlink_segment_nodes)


PROFILE_PACKING = RankPacking()
"""The profile's servers and the launcher's segment: the packing of a job that names
neither."""


def scale_up_domain_size(profile: HardwareProfile, gpus_per_node: int | None = None) -> int:
    """Devices that share one scale-up fabric when servers hold ``gpus_per_node`` devices.

    Without an override this is the profile's domain. A domain that spans several servers
    (NVL72: 72 GPUs over trays of 4) stays whole under an override that divides it, since
    the NVLink switch trays, not the server, bound it; otherwise the domain is capped at a
    server (a cluster spec with fewer devices per server than the profile's node).
    """
    topo = profile.topology
    if not gpus_per_node:
        return topo.scale_up_domain
    spans_servers = topo.scale_up_domain > topo.gpus_per_node
    if spans_servers and topo.scale_up_domain % gpus_per_node == 0:
        return topo.scale_up_domain
    return max(min(topo.scale_up_domain, gpus_per_node), 1)


def domain_nodes(profile: HardwareProfile, gpus_per_node: int | None = None) -> int:
    """Servers of one scale-up domain; 1 where the domain is a server or less."""
    per_node = gpus_per_node or profile.topology.gpus_per_node
    return max(scale_up_domain_size(profile, gpus_per_node) // per_node, 1)


def launcher_segment_nodes(num_nodes: int, nodes_per_domain: int) -> int:
    """Megatron-Bridge's segment for a job of ``num_nodes`` servers on domains of
    ``nodes_per_domain`` (module docstring): the whole job when it fits one domain, else the
    largest divisor of ``num_nodes`` that fits one (1 for a prime count above the domain)."""
    if num_nodes < 1 or nodes_per_domain < 1:
        raise SpecError(
            f"launcher_segment_nodes needs positive counts, got num_nodes {num_nodes}, "
            f"nodes_per_domain {nodes_per_domain}"
        )
    if num_nodes <= nodes_per_domain:
        return num_nodes
    return next(d for d in range(nodes_per_domain, 0, -1) if num_nodes % d == 0)


def segment_nodes(
    profile: HardwareProfile,
    num_gpus: int,
    gpus_per_node: int | None = None,
    override: int | None = None,
) -> int | None:
    """Servers of the NVLink segment the job runs in, None where the profile's scale-up
    domain is one server or less (no segment to choose). ``override`` is the user's
    (`ClusterSpec.nvlink_segment_nodes`), checked: only on a domain that spans servers, at
    most one domain of servers, and a divisor of the job's servers or a whole domain."""
    per_node = gpus_per_node or profile.topology.gpus_per_node
    per_domain = domain_nodes(profile, gpus_per_node)
    num_nodes = math.ceil(num_gpus / per_node)
    if per_domain == 1:
        if override is not None:
            raise SpecError(
                f"rule nvlink_segment_spans_servers: ClusterSpec.nvlink_segment_nodes "
                f"({override}) places a job in an NVLink domain that spans servers; profile "
                f"{profile.name!r} has a scale-up domain of "
                f"{scale_up_domain_size(profile, gpus_per_node)} GPUs on servers of {per_node}: "
                "drop the segment"
            )
        return None
    if override is None:
        return launcher_segment_nodes(num_nodes, per_domain)
    if override > per_domain:
        raise SpecError(
            f"rule nvlink_segment_within_domain: ClusterSpec.nvlink_segment_nodes ({override}) "
            f"must fit one NVLink domain of {per_domain} servers "
            f"({scale_up_domain_size(profile, gpus_per_node)} GPUs / {per_node} per server) "
            f"on {profile.name!r}; give at most {per_domain}"
        )
    if num_nodes % override and override != per_domain:
        fits = [d for d in range(1, per_domain + 1) if num_nodes % d == 0]
        raise SpecError(
            f"rule nvlink_segment_divides_nodes: ClusterSpec.nvlink_segment_nodes "
            f"({override}) must divide the job's {num_nodes} servers (SLURM --segment), or "
            f"equal the {per_domain} servers of a whole domain (no segment: racks filled in "
            f"order); give one of {', '.join(map(str, sorted({*fits, per_domain})))}"
        )
    return override


def placement_domain_size(
    profile: HardwareProfile,
    num_gpus: int,
    gpus_per_node: int | None = None,
    override: int | None = None,
) -> int:
    """Consecutive ranks that share one scale-up domain for the job: the segment's
    ``segment_nodes x gpus_per_node`` on a domain that spans servers (`segment_nodes`),
    else the fabric's domain (`scale_up_domain_size`)."""
    segment = segment_nodes(profile, num_gpus, gpus_per_node, override)
    if segment is None:
        return scale_up_domain_size(profile, gpus_per_node)
    return segment * (gpus_per_node or profile.topology.gpus_per_node)
