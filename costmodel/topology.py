"""The cluster as a graph, and where each process group of a plan sits on it.

Graph (networkx, undirected), built from a profile's `Topology`:

- ``("gpu", r)`` for global rank r, with attributes ``node`` (server r // gpus_per_node),
  ``domain`` (scale-up domain r // scale_up_domain) and ``local`` (index on its node); a
  domain may span servers (NVL72: 72 GPUs in trays of 4), and a group inside one domain
  is ``intra`` (NVLink-priced) even when it crosses trays;
- ``("scale_up", d)``: the NVSwitch / xGMI / host fabric of domain d, linked to its GPUs
  with the per-GPU scale-up bandwidth (``GBps``);
- ``("nic", node, j)``: scale-out NIC j of a server; GPU ``local`` uses rail
  ``local·nics_per_node // gpus_per_node`` (DGX rail-optimised wiring: one NIC per GPU on
  DGX A100/H100);
- ``("fabric",)``: the scale-out network joining every NIC (a non-blocking fat tree, the
  reference design of DGX SuperPOD/BasePOD).

Megatron places ranks ``tp-cp-ep-dp-pp`` with tp fastest (`specs.layout.RankLayout`), and
consecutive ranks fill a server before the next one, so a group is a set of ranks whose
placement (servers spanned, ranks per server) decides which collective fit applies.

A 16k-GPU graph has ~35k vertices and takes most of a second to build, so callers build
it only for the ranks they place (``ranks=``); vertices of other ranks are never read.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

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


def _sizes(profile: HardwareProfile, gpus_per_node: int | None) -> tuple[int, int, int]:
    topo = profile.topology
    per_node = gpus_per_node or topo.gpus_per_node
    if per_node < 1:
        raise SpecError(f"gpus_per_node must be >= 1, got {per_node}")
    return per_node, scale_up_domain_size(profile, gpus_per_node), topo.nics_per_node


def cluster_graph(
    profile: HardwareProfile,
    num_gpus: int,
    gpus_per_node: int | None = None,
    *,
    ranks: Iterable[int] | None = None,
) -> nx.Graph:
    """The cluster graph of the module docstring, for ``ranks`` (default: every rank).

    ``gpus_per_node`` overrides the profile's (a cluster spec may); the scale-up domain
    follows `scale_up_domain_size`. Raises `SpecError` for a rank outside ``range(num_gpus)``.
    """
    per_node, domain, nics = _sizes(profile, gpus_per_node)
    chosen = range(num_gpus) if ranks is None else sorted(set(ranks))
    graph = nx.Graph(gpus_per_node=per_node, scale_up_domain=domain, nics_per_node=nics)
    link = profile.topology.scale_up_GBps_per_gpu
    nic_rate = profile.topology.nic_GBps_per_gpu
    num_nodes = math.ceil(num_gpus / per_node)
    for r in chosen:
        if not 0 <= r < num_gpus:
            raise SpecError(f"rank {r} is outside the cluster's {num_gpus} GPUs")
        node, local = divmod(r, per_node)
        gpu = ("gpu", r)
        graph.add_node(gpu, kind="gpu", node=node, domain=r // domain, local=local)
        graph.add_edge(gpu, ("scale_up", r // domain), kind="scale_up", GBps=link)
        if nics and num_nodes > 1:
            nic = ("nic", node, local * nics // per_node)
            graph.add_edge(gpu, nic, kind="host_link")
            graph.add_edge(nic, ("fabric",), kind="scale_out", GBps=nic_rate)
    for vertex in graph.nodes:
        graph.nodes[vertex].setdefault("kind", vertex[0])
    return graph


def place_group(graph: nx.Graph, ranks: Iterable[int], axes: str = "") -> GroupPlacement:
    """Placement of one group on ``graph`` (whose vertices must include its ranks)."""
    members = tuple(ranks)
    if not members:
        raise SpecError("place_group: a group needs at least one rank")
    missing = [r for r in members if ("gpu", r) not in graph]
    if missing:
        raise SpecError(
            f"place_group: ranks {missing[:4]} are not in the graph; build it with "
            "cluster_graph(..., ranks=...) covering the group"
        )
    attrs = [graph.nodes[("gpu", r)] for r in members]
    per_node = Counter(a["node"] for a in attrs)
    per_domain = Counter(a["domain"] for a in attrs)
    busiest = max(per_node, key=per_node.__getitem__)
    nics = {
        nbr
        for r, a in zip(members, attrs, strict=True)
        if a["node"] == busiest
        for nbr in graph.neighbors(("gpu", r))
        if nbr[0] == "nic"
    }
    return GroupPlacement(
        axes=axes,
        size=len(members),
        num_nodes=len(per_node),
        num_domains=len(per_domain),
        ranks_per_node=max(per_node.values()),
        ranks_per_domain=max(per_domain.values()),
        nics_per_node=len(nics) if len(per_node) > 1 else 0,
    )


def strided_group_placement(
    size: int,
    stride: int,
    *,
    gpus_per_node: int,
    scale_up_domain: int,
    nics_per_node: int,
    axes: str = "",
) -> GroupPlacement:
    """Placement of the group {0, stride, ..., (size-1)·stride} without building a graph.

    Every Megatron group over adjacent axes is such a progression shifted by a base that is
    a multiple of the next-faster axes (tp-cp-ep-dp-pp order); the group containing rank 0
    stands for all of them when gpus_per_node is a multiple of the strides involved, the
    usual power-of-two case. Agrees with `place_group` on the graph (tested).
    """
    if size < 1 or stride < 1:
        raise SpecError(f"strided group needs size >= 1 and stride >= 1, got {size}, {stride}")
    if size == 1:
        return single_rank_placement(axes)
    ranks = [i * stride for i in range(size)]
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
"""Groups the cost model places on the cluster graph: TP, CP, the gradient group DP x CP,
the expert groups (EP, expert TP, expert DP) and the pipeline."""

AMAX_AXES = "tp-dp-cp"
"""The group of one stage's TP x DP x CP ranks, over which Transformer Engine's delayed
scaling all-reduces its amaxes (Megatron-core ``get_amax_reduction_group(
with_context_parallel=True)``); placed as the product of TP and DP x CP
(`product_placement`), not on the graph."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanPlacements:
    """Placements of the groups of one representative rank, and its pipeline hops."""

    groups: dict[str, GroupPlacement]
    """Placement per axes name of `PLAN_AXES`, and of `AMAX_AXES`."""
    pp_hop_intra: tuple[bool, ...]
    """For each boundary between stage s and s+1 (and, interleaved, from the last stage
    back to the first), True when the two ranks share a scale-up domain."""

    def __getitem__(self, axes: str) -> GroupPlacement:
        return self.groups[axes]


def plan_placements(
    profile: HardwareProfile, plan: ParallelPlan, gpus_per_node: int | None = None, rank: int = 0
) -> PlanPlacements:
    """Place the groups of ``rank`` for ``plan`` (`specs.layout.RankLayout`, Megatron order).

    Ranks with the same tp, cp and dp index in other stages are symmetric to ``rank`` in
    every power-of-two layout, so one rank stands for the plan. The groups of `PLAN_AXES`
    are placed on the cluster graph; the TP x DP x CP group (`AMAX_AXES`) is the product of
    the TP and DP x CP placements (`product_placement`), which spares a graph of every rank
    of a stage.
    """
    layout = RankLayout.from_plan(plan)
    members = {axes: layout.group_of(rank, axes) for axes in PLAN_AXES}
    wanted = {r for group in members.values() for r in group}
    graph = cluster_graph(profile, layout.world_size, gpus_per_node, ranks=wanted)
    placements = {axes: place_group(graph, group, axes) for axes, group in members.items()}
    amax_parts = (placements["tp"], placements["dp-cp"])
    placements[AMAX_AXES] = product_placement(profile, amax_parts, AMAX_AXES)
    stages = members["pp"]
    hops = [
        graph.nodes[("gpu", a)]["domain"] == graph.nodes[("gpu", b)]["domain"]
        for a, b in zip(stages, (*stages[1:], stages[0]), strict=True)
    ]
    return PlanPlacements(groups=placements, pp_hop_intra=tuple(hops))


def product_placement(
    profile: HardwareProfile, parts: tuple[GroupPlacement, ...], axes: str
) -> GroupPlacement:
    """The placement of the group spanned by ``parts``: groups of one rank over adjacent
    axes of Megatron rank order (`specs.layout`: tp, cp, ep, dp, pp), e.g. tp and cp for the
    tp·cp block, or tp, dp-cp and pp for the whole world.

    Each axis strides by the product of the faster ones, so the servers (and scale-up
    domains) the combined group spans are the product of those its parts span; every server
    holds the same number of its ranks and uses every NIC they reach (`cluster_graph`).
    Agrees with `place_group` over the combined ranks (tested) without building their graph.
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
