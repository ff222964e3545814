"""Where each process group of a plan sits on the cluster: servers, scale-up domains, NICs.

Megatron places ranks ``tp-cp-ep-dp-pp`` with tp fastest (`specs.layout.RankLayout`), and
consecutive ranks fill a server before the next one, so a group is a set of ranks whose
placement (servers spanned, ranks per server) decides which collective fit applies. The
scale-up domain is a run of consecutive ranks: the profile's fabric, or on NVL72 the NVLink
segment the launcher gives the job (`costmodel.scale_up`).

Groups of one axis differ in placement when the domain is not a power of two (72 GPUs, or
a segment of 12 or 18 trays): the EP group of ranks 64..79 crosses racks while that of
ranks 0..15 does not. Every rank waits for the slowest instance (at the next pipeline hop,
and at the gradient reduction and optimizer step that end the iteration), so the cost
model prices each axis at its slowest instance. Each group of `PLAN_AXES` is an arithmetic
progression of ranks, so `plan_placements` places them without a graph
(`worst_strided_placement`, one base per residue modulo the server-and-domain period); the
graph (`costmodel.cluster_graph`) places measured groups one by one
(`reports.calibrate_comm`) and is the reference the arithmetic is tested against.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from costmodel.scale_up import PROFILE_PACKING, RankPacking, placement_domain_size
from profiles.schema import HardwareProfile
from specs.errors import SpecError
from specs.layout import RankLayout
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupPlacement:
    """Where one process group sits: the numbers the collective model needs."""

    axes: str
    """The group's axes, e.g. ``tp`` or ``dp-cp`` (`specs.layout` names)."""
    size: int
    """Ranks in the group."""
    num_nodes: int
    """Servers the group spans."""
    num_domains: int
    """Scale-up domains the group spans (equal to num_nodes when a domain is a server)."""
    ranks_per_node: int
    """Most ranks of the group on one server."""
    ranks_per_domain: int
    """Most ranks of the group in one scale-up domain."""
    nics_per_node: int
    """Distinct NICs the group's ranks use on its busiest server; 0 when the group stays
    inside one server (it never leaves through a NIC)."""

    @property
    def placement(self) -> str:
        """``intra`` when the whole group shares one scale-up domain, else ``inter``."""
        return "intra" if self.num_domains == 1 else "inter"

    @property
    def spans_nodes(self) -> bool:
        """True when the group crosses servers."""
        return self.num_nodes > 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterShape:
    """The numbers that place a job's groups: its ranks, servers, domains and NICs."""

    world_size: int
    """Ranks of the job."""
    gpus_per_node: int
    """Ranks per server."""
    scale_up_domain: int
    """Consecutive ranks per scale-up domain: on NVL72 the job's NVLink segment
    (`costmodel.scale_up.placement_domain_size`)."""
    nics_per_node: int
    """Scale-out NICs per server."""

    def place(self, size: int, stride: int, axes: str = "") -> GroupPlacement:
        """The slowest group {b + i·stride, i < size} of the job (`worst_strided_placement`)."""
        return worst_strided_placement(
            size,
            stride,
            world_size=self.world_size,
            gpus_per_node=self.gpus_per_node,
            scale_up_domain=self.scale_up_domain,
            nics_per_node=self.nics_per_node,
            axes=axes,
        )


def cluster_shape(
    profile: HardwareProfile, num_gpus: int, packing: RankPacking = PROFILE_PACKING
) -> ClusterShape:
    """The `ClusterShape` of a job of ``num_gpus`` ranks packed as ``packing``: the domain is
    the NVLink segment on a domain that spans servers
    (`costmodel.scale_up.placement_domain_size`), else the profile's (capped at a server
    under a smaller ``packing.gpus_per_node``)."""
    topo = profile.topology
    per_node = packing.gpus_per_node or topo.gpus_per_node
    if per_node < 1:
        raise SpecError(f"gpus_per_node must be >= 1, got {per_node}")
    domain = placement_domain_size(profile, num_gpus, packing.gpus_per_node, packing.segment_nodes)
    return ClusterShape(
        world_size=num_gpus,
        gpus_per_node=per_node,
        scale_up_domain=domain,
        nics_per_node=topo.nics_per_node,
    )


def strided_group_placement(
    size: int,
    stride: int,
    *,
    gpus_per_node: int,
    scale_up_domain: int,
    nics_per_node: int,
    axes: str = "",
    base: int = 0,
) -> GroupPlacement:
    """Placement of the group {base, base + stride, ..., base + (size-1)·stride} without
    building a graph.

    Every Megatron group over adjacent axes is such a progression, its base a rank whose
    digits on the group's axes are 0 (tp-cp-ep-dp-pp order); `worst_strided_placement`
    takes the slowest over the bases. Agrees with `costmodel.cluster_graph.place_group` (tested).
    """
    if size < 1 or stride < 1:
        raise SpecError(f"strided group needs size >= 1 and stride >= 1, got {size}, {stride}")
    if size == 1:
        return single_rank_placement(axes)
    ranks = [base + i * stride for i in range(size)]
    nodes = Counter(r // gpus_per_node for r in ranks)
    domains = Counter(r // scale_up_domain for r in ranks)
    busiest = max(nodes, key=nodes.__getitem__)
    rails = {
        (r % gpus_per_node) * nics_per_node // gpus_per_node
        for r in ranks
        if r // gpus_per_node == busiest
    }
    return GroupPlacement(
        axes=axes,
        size=size,
        num_nodes=len(nodes),
        num_domains=len(domains),
        ranks_per_node=max(nodes.values()),
        ranks_per_domain=max(domains.values()),
        nics_per_node=len(rails) if len(nodes) > 1 and nics_per_node else 0,
    )


def slowness(group: GroupPlacement) -> tuple[float, ...]:
    """Order of the collective time of groups of one size (`costmodel.collectives`): one
    inside a scale-up domain runs the ``intra`` fit of its size, whatever servers it spans;
    across domains the ring's latency grows with the domains k and its NIC bound
    g · busbw_inter shrinks with the ranks per domain g and their share of the NICs, as the
    remote part of an all-to-all grows. Larger is slower."""
    share = 1.0
    if group.nics_per_node and group.ranks_per_node > group.nics_per_node:
        share = group.nics_per_node / group.ranks_per_node
    if group.num_domains == 1:
        return (1.0, 0.0, 0.0, 0.0)
    return (float(group.num_domains), -float(group.ranks_per_domain), -share, 0.0)


def instance_bases(size: int, stride: int, world_size: int, period: int) -> list[int]:
    """First ranks, modulo ``period``, of every group {b + i·stride, i < size} that tiles
    ``range(world_size)``: b = q·stride·size + j with j < stride. A group shifted by a
    multiple of ``period`` (a multiple of the server and of the domain) is placed alike, so
    these residues stand for every instance; rank 0's group (residue 0) comes first."""
    block = stride * size
    heads = {q * block % period for q in range(min(max(world_size // block, 1), period))}
    offsets = range(min(stride, period))
    residues = {(h + j) % period for h in heads for j in offsets}
    return sorted(residues)


def worst_strided_placement(
    size: int,
    stride: int,
    *,
    world_size: int,
    gpus_per_node: int,
    scale_up_domain: int,
    nics_per_node: int,
    axes: str = "",
) -> GroupPlacement:
    """The slowest (`slowness`) of the groups {b + i·stride} over all bases b, rank 0's on
    a tie: each of a plan's groups of one axis runs the same collective at the same step,
    and every rank waits for the slowest of them at the next pipeline hop and at the
    gradient reduction and optimizer step, so the slowest instance sets the iteration time.
    On power-of-two layouts in power-of-two domains every instance is placed as rank 0's;
    in a 72-GPU NVL72 domain (or a segment of 12 or 18 trays) a group of ranks 64..79 spans
    two domains while ranks 0..15 share one."""
    period = math.lcm(gpus_per_node, scale_up_domain)
    place = [
        strided_group_placement(
            size,
            stride,
            gpus_per_node=gpus_per_node,
            scale_up_domain=scale_up_domain,
            nics_per_node=nics_per_node,
            axes=axes,
            base=base,
        )
        for base in (instance_bases(size, stride, world_size, period) if size > 1 else [0])
    ]
    return max(place, key=slowness)


def single_rank_placement(axes: str) -> GroupPlacement:
    """The placement of a group of one rank (no communication)."""
    return GroupPlacement(
        axes=axes,
        size=1,
        num_nodes=1,
        num_domains=1,
        ranks_per_node=1,
        ranks_per_domain=1,
        nics_per_node=0,
    )


PLAN_AXES = ("tp", "cp", "dp-cp", "ep", "etp", "edp", "pp")
"""Groups the cost model places on the cluster: TP, CP, the gradient group DP x CP,
the expert groups (EP, expert TP, expert DP) and the pipeline."""

AMAX_AXES = "tp-dp-cp"
"""The group of one stage's TP x DP x CP ranks, over which Transformer Engine's delayed
scaling all-reduces its amaxes (Megatron-core ``get_amax_reduction_group(
with_context_parallel=True)``); placed as the product of TP and DP x CP
(`product_placement`), not on the graph."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanPlacements:
    """Placements of the slowest group of each axes over all ranks, and the pipeline hops
    (`plan_placements`)."""

    groups: dict[str, GroupPlacement]
    """Placement per axes name of `PLAN_AXES`, and of `AMAX_AXES`."""
    pp_hop_intra: tuple[bool, ...]
    """For each boundary between stage s and s+1 (and, interleaved, from the last stage
    back to the first), True when every rank's hop over it stays in its scale-up domain."""

    def __getitem__(self, axes: str) -> GroupPlacement:
        return self.groups[axes]


def plan_placements(
    profile: HardwareProfile, plan: ParallelPlan, packing: RankPacking = PROFILE_PACKING
) -> PlanPlacements:
    """Place the groups of ``plan`` (`specs.layout.RankLayout`, Megatron order) on a job of
    ``plan.world_size`` ranks packed as ``packing``, whose scale-up domain is
    `cluster_shape`'s (the NVLink segment on NVL72).

    Each group of `PLAN_AXES` is a progression of ranks (`strided_group_placement`) and
    stands for its slowest instance over all ranks (`worst_strided_placement`); each
    pipeline boundary is intra only when every rank's hop over it is (`pipeline_hops`). The
    TP x DP x CP group (`AMAX_AXES`) is the product of the TP and DP x CP placements
    (`product_placement`).
    """
    layout = RankLayout.from_plan(plan)
    shape = cluster_shape(profile, layout.world_size, packing)
    placements = {}
    for axes in PLAN_AXES:
        first = layout.group_of(0, axes)
        stride = first[1] - first[0] if len(first) > 1 else 1
        placements[axes] = shape.place(len(first), stride, axes)
    amax_parts = (placements["tp"], placements["dp-cp"])
    placements[AMAX_AXES] = product_placement(profile, amax_parts, AMAX_AXES)
    hops = pipeline_hops(plan.pp, layout.world_size // plan.pp, shape.scale_up_domain)
    return PlanPlacements(groups=placements, pp_hop_intra=hops)


def pipeline_hops(pp: int, stage_ranks: int, domain: int) -> tuple[bool, ...]:
    """For each boundary from stage s to s+1, and from the last stage back to the first,
    True when every rank's hop over it stays in its scale-up domain. Stage s holds ranks
    [s·S, (s+1)·S) (S = ``stage_ranks``) and rank r sends to r + S, so the hops of boundary
    s cover [s·S, (s+2)·S) and stay inside a domain only if that whole span does; the hop
    back from the last stage covers the world."""
    if pp == 1:
        return (True,)
    spans = [(s * stage_ranks, (s + 2) * stage_ranks - 1) for s in range(pp - 1)]
    spans.append((0, pp * stage_ranks - 1))
    return tuple(lo // domain == hi // domain for lo, hi in spans)


def product_placement(
    profile: HardwareProfile, parts: tuple[GroupPlacement, ...], axes: str
) -> GroupPlacement:
    """The placement of the group spanned by ``parts``: groups of one rank over adjacent
    axes of Megatron rank order (`specs.layout`: tp, cp, ep, dp, pp), e.g. tp and cp for the
    tp·cp block, or tp, dp-cp and pp for the whole world.

    Each axis strides by the product of the faster ones, so the servers (and scale-up
    domains) the combined group spans are the product of those its parts span; every server
    holds the same number of its ranks and uses every NIC they reach
    (`costmodel.cluster_graph`). Agrees with `costmodel.cluster_graph.place_group` over the
    combined ranks (tested) without building their graph.
    """
    size = math.prod(p.size for p in parts)
    num_nodes = math.prod(p.num_nodes for p in parts)
    num_domains = math.prod(p.num_domains for p in parts)
    per_node = max(size // num_nodes, 1)
    return GroupPlacement(
        axes=axes,
        size=size,
        num_nodes=num_nodes,
        num_domains=num_domains,
        ranks_per_node=per_node,
        ranks_per_domain=max(size // num_domains, 1),
        nics_per_node=min(profile.topology.nics_per_node, per_node) if num_nodes > 1 else 0,
    )


def world_placement(profile: HardwareProfile, placements: PlanPlacements) -> GroupPlacement:
    """The placement of every rank of the plan: one stage's tp x dp-cp block times the
    pipeline (`product_placement`)."""
    parts = (placements["tp"], placements["dp-cp"], placements["pp"])
    return product_placement(profile, parts, "world")


def end_stages_pair(pipeline: GroupPlacement) -> GroupPlacement:
    """The group of a first-stage rank and its peer in the last stage (the tied-embedding
    all-reduce) given the slowest pipeline group: scale-up domains are runs of consecutive
    ranks, so the pair shares a domain (and a server) exactly when its whole pipeline group
    does; otherwise it is one rank on each of two servers and domains."""
    one_node, one_domain = pipeline.num_nodes == 1, pipeline.num_domains == 1
    return GroupPlacement(
        axes="embedding",
        size=2,
        num_nodes=1 if one_node else 2,
        num_domains=1 if one_domain else 2,
        ranks_per_node=2 if one_node else 1,
        ranks_per_domain=2 if one_domain else 1,
        nics_per_node=0 if one_node else 1,
    )
