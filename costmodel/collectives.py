"""Collective and point-to-point times for a process group placed on the cluster.

Sizes follow nccl-tests (hardware.md §2c [S29]): ``size_bytes`` is the full array per
rank for all_reduce, the total (per-rank part x group size) for all_gather,
reduce_scatter and all_to_all, the message for a send. Time = latency + size · factor /
bus bandwidth, with factor 2(n-1)/n for all_reduce and (n-1)/n for the others
(`profiles.lookup.bus_factor`).

Placement (`costmodel.topology.GroupPlacement`):

- inside one scale-up domain: the profile's ``intra`` fit for the group size;
- across domains (n ranks, k domains, g ranks of the group per domain): NCCL's default
  large-message algorithm is a ring through all n ranks (trees for the latency-bound
  range), so every rank still moves factor·size bytes and the bottleneck is the slower of
  the scale-up segment (``intra`` busbw at g) and the g NICs the group's ranks use on each
  server (g x the ``inter`` busbw, which is per rank with one rank per server).
  Time = α_inter(k) + α_intra(g) + size · factor(n) / min(busbw_intra(g), g · busbw_inter(k)).
  Choice documented: a two-level algorithm (intra reduce-scatter, inter all-reduce of 1/g
  of the data, intra all-gather) would cut inter traffic by up to 2x at k = 2, but NCCL
  does not run it by default; the measured DGX A100 figure of 192 GB/s all-reduce busbw
  over 8 x 200 Gb/s NICs (NVIDIA/nccl#812 [S21]) is exactly 8 x the per-NIC 24 GB/s, the
  ring bound, and the same bound holds for 2 or more servers (nccl-tests#319 [S43]).
- all_to_all across domains: each rank sends (n-g)/n of its data to other servers
  through its own NIC and (g-1)/n over the scale-up fabric, concurrently; NCCL's
  all-to-all cannot spread one rank's traffic over several NICs (nccl-tests#267 [S33]),
  so time = α + max((n-g)/n · size / busbw_inter, (g-1)/n · size / busbw_intra), with
  busbw_inter the profile's ``inter`` all_to_all fit: the rate an all-to-all drives
  through one NIC, which on DGX A100 and H100 is 74% of line rate, below the ring's
  (`profiles.derive_alltoall.AlltoallNetBar`).
- When the group's ranks on a server share fewer NICs than ranks, the inter bandwidth
  is scaled by NICs / ranks.

Point-to-point (pipeline sends, the context-parallel ring): α + size / busbw of the
``send_recv`` fit, intra or inter by whether the two ranks share a scale-up domain.
"""

from __future__ import annotations

from costmodel.compute import element_bytes
from costmodel.topology import GroupPlacement
from profiles.lookup import bus_factor, collective_fit
from profiles.lookup import collective_time_s as fit_time_s
from profiles.schema import HardwareProfile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collectives `collective_time_s` times; send_recv goes through `p2p_time_s`."""


def collective_time_s(
    profile: HardwareProfile, op: str, size_bytes: float, group: GroupPlacement
) -> float:
    """Seconds of one collective ``op`` of ``size_bytes`` (nccl-tests size) over ``group``.

    0 for a group of one rank or an empty message. Raises `SpecError` for an unknown op.
    """
    if op not in COLLECTIVES:
        raise SpecError(
            f"unknown collective {op!r}; valid: {', '.join(COLLECTIVES)} (use p2p_time_s for "
            "send_recv)"
        )
    if size_bytes < 0:
        raise SpecError(f"collective size_bytes must be >= 0, got {size_bytes}")
    n = group.size
    if n < 2 or size_bytes == 0:
        return 0.0
    if group.num_domains == 1:
        return fit_time_s(collective_fit(profile, op, n, "intra"), size_bytes)
    if op == "all_to_all":
        return _all_to_all_inter_s(profile, size_bytes, group)
    return _ring_inter_s(profile, op, size_bytes, group)


def _nic_share(group: GroupPlacement) -> float:
    """Fraction of a NIC each of the group's ranks on one server gets."""
    if group.nics_per_node < 1 or group.nics_per_node >= group.ranks_per_node:
        return 1.0
    return group.nics_per_node / group.ranks_per_node


def _ring_inter_s(
    profile: HardwareProfile, op: str, size_bytes: float, group: GroupPlacement
) -> float:
    """Ring over every rank, bounded by the slower of scale-up and the group's NICs."""
    g, k = group.ranks_per_domain, group.num_domains
    inter = collective_fit(profile, op, k, "inter")
    busbw_GBps = g * inter.busbw_GBps * _nic_share(group)
    latency_s = inter.latency_s
    if g > 1:
        intra = collective_fit(profile, op, g, "intra")
        busbw_GBps = min(busbw_GBps, intra.busbw_GBps)
        latency_s += intra.latency_s
    return latency_s + size_bytes * bus_factor(op, group.size) / (busbw_GBps * 1e9)


def _all_to_all_inter_s(
    profile: HardwareProfile, size_bytes: float, group: GroupPlacement
) -> float:
    """All-to-all across servers: one NIC per rank for the remote part, NVLink for the rest."""
    n, g = group.size, group.ranks_per_domain
    return split_all_to_all_time_s(
        profile, size_bytes * (n - g) / n, size_bytes * (g - 1) / n, group
    )


def split_all_to_all_time_s(
    profile: HardwareProfile, remote_bytes: float, local_bytes: float, group: GroupPlacement
) -> float:
    """An all-to-all whose rank sends ``remote_bytes`` to other scale-up domains (over its
    NIC share) and ``local_bytes`` to ranks of its own domain (over the scale-up fabric),
    concurrently: α + max(remote / NIC bus bandwidth, local / scale-up bus bandwidth). A
    uniform all-to-all of nccl-tests size S sends S·(n-g)/n and S·(g-1)/n; deduplicating
    dispatchers (DeepEP, HybridEP) send other volumes (`costmodel.runtimes.megatron.moe_costs`).
    Inside one domain it is the uniform all-to-all that moves ``local_bytes``."""
    n, g = group.size, group.ranks_per_domain
    if n < 2 or remote_bytes + local_bytes <= 0:
        return 0.0
    if group.num_domains == 1:
        return collective_time_s(profile, "all_to_all", local_bytes * n / (n - 1), group)
    inter = collective_fit(profile, "all_to_all", n, "inter")
    remote_s = remote_bytes / (inter.busbw_GBps * _nic_share(group) * 1e9)
    local_s = 0.0
    latency_s = inter.latency_s
    if g > 1:
        intra = collective_fit(profile, "all_to_all", g, "intra")
        local_s = local_bytes / (intra.busbw_GBps * 1e9)
        latency_s = max(latency_s, intra.latency_s)
    return latency_s + max(remote_s, local_s)


def p2p_time_s(profile: HardwareProfile, size_bytes: float, *, intra: bool) -> float:
    """Seconds to send ``size_bytes`` from one rank to another: α + size / busbw of the
    profile's ``send_recv`` fit (intra: same scale-up domain; else across servers)."""
    if size_bytes < 0:
        raise SpecError(f"p2p size_bytes must be >= 0, got {size_bytes}")
    if size_bytes == 0:
        return 0.0
    return fit_time_s(
        collective_fit(profile, "send_recv", 2, "intra" if intra else "inter"), size_bytes
    )


def ring_exchange_time_s(
    profile: HardwareProfile, chunk_bytes: float, steps: int, group: GroupPlacement
) -> float:
    """``steps`` rounds of a ring exchange in which every rank sends ``chunk_bytes`` to its
    neighbour (context-parallel K/V rotation); the slowest hop sets each round, so a ring
    that spans servers runs at the inter-server send rate."""
    if steps < 0:
        raise SpecError(f"ring exchange steps must be >= 0, got {steps}")
    if steps == 0 or group.size < 2:
        return 0.0
    return steps * p2p_time_s(profile, chunk_bytes, intra=group.num_domains == 1)


def pipeline_send_bytes(model: ModelSpec, job: TrainingJob, plan: ParallelPlan) -> float:
    """Bytes of one microbatch's activation a pipeline stage sends to the next: [s/cp
    (/tp with sequence parallelism), b, h] elements of the job's activation dtype
    (megatron-facts.md §3.4)."""
    sp = plan.tp if plan.sequence_parallel and plan.tp > 1 else 1
    return (
        plan.micro_batch_size
        * job.seq_length
        / plan.cp
        * model.hidden_size
        / sp
        * element_bytes(job.precision)
    )
