"""The cluster as a graph, and the placement of one group of ranks on it.

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

A 16k-GPU graph has ~35k vertices and takes most of a second to build, so callers build
it only for the ranks they place (``ranks=``); vertices of other ranks are never read.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import networkx as nx

from costmodel.scale_up import PROFILE_PACKING, RankPacking
from costmodel.topology import GroupPlacement, cluster_shape
from profiles.schema import HardwareProfile
from specs.errors import SpecError


def cluster_graph(
    profile: HardwareProfile,
    num_gpus: int,
    packing: RankPacking = PROFILE_PACKING,
    *,
    ranks: Iterable[int] | None = None,
) -> nx.Graph:
    """The cluster graph of the module docstring, for ``ranks`` (default: every rank).

    ``packing`` gives the servers (a cluster spec may override the profile's) and the
    NVLink segment; the scale-up domain follows `cluster_shape`. Raises `SpecError` for a
    rank outside ``range(num_gpus)``.
    """
    shape = cluster_shape(profile, num_gpus, packing)
    per_node, domain, nics = shape.gpus_per_node, shape.scale_up_domain, shape.nics_per_node
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
