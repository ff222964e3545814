"""The communication and topology sections of a `profiles.schema.HardwareProfile`: α-β
fits of every collective per group size and placement (`CommunicationProfile`), and how
many devices share a node and a scale-up domain, with the NICs (`Topology`). Collective
sizes follow nccl-tests' conventions (`BUS_FACTOR_DOC`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from profiles.schema_checks import require_positive_float
from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_non_negative, require_positive

CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
Placement = Literal["intra", "inter"]
ScaleUpFabric = Literal["nvswitch", "xgmi_mesh", "pcie", "host_memory"]

BUS_FACTOR_DOC = (
    "nccl-tests busbw = algbw · factor, algbw = S / t: all_reduce 2(n-1)/n with S the full "
    "array per rank; all_gather, reduce_scatter and all_to_all (n-1)/n with S the total "
    "(per-rank part · n); send_recv 1 with S the message."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TimePoint:
    """A measured collective time at one message size."""

    size_bytes: float
    """Message size in the nccl-tests convention of `CollectiveFit`."""
    seconds: float
    """Typical (fastest-sample) time of one call."""

    def __post_init__(self) -> None:
        require_positive_float("TimePoint", "size_bytes", self.size_bytes)
        require_positive_float("TimePoint", "seconds", self.seconds)


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveFit:
    """α-β fit of one collective for one group size and placement."""

    op: CollectiveOp
    """The collective; `send_recv` is a point-to-point transfer between 2 ranks."""
    group_size: int
    """Ranks in the group (2 for send_recv)."""
    placement: Placement
    """`intra`: all ranks in one scale-up domain (NVLink/xGMI or one host). `inter`: one
    rank per node, so every rank's traffic crosses its own NIC; groups with several ranks
    per node are composed from an intra and an inter fit by the cost model."""
    latency_s: float
    """α: time of a tiny message, seconds."""
    busbw_GBps: float
    """β: large-message bus bandwidth, GB/s, in the nccl-tests convention (algbw for
    send_recv)."""
    algorithm: str = "ring"
    """Algorithm the fit describes, e.g. ``ring``, ``nvls`` (NVLink SHARP in-switch
    reduction, whose busbw can exceed the link rate), ``ring+tree`` or ``gloo``."""
    points: tuple[TimePoint, ...] = ()
    """Measured times the α-β line was fitted through, in strictly increasing size.
    `profiles.lookup.collective_time_s` scales the line by their measured-to-line ratio
    (interpolated in log size), following a library's protocol and cache regimes that one
    line cannot. Empty in datasheet profiles."""

    def __post_init__(self) -> None:
        require_choice(self, "op", CollectiveOp)
        require_choice(self, "placement", Placement)
        require_positive(self, "group_size")
        if self.group_size < 2:
            raise SpecError(f"CollectiveFit {self.op}: group_size must be >= 2, got 1")
        if self.op == "send_recv" and self.group_size != 2:
            raise SpecError(
                f"CollectiveFit send_recv: group_size must be 2 (one sender, one receiver), "
                f"got {self.group_size}"
            )
        if self.latency_s < 0:
            raise SpecError(f"CollectiveFit {self.op}: latency_s must be >= 0")
        sizes = [p.size_bytes for p in self.points]
        if any(b <= a for a, b in itertools.pairwise(sizes)):
            raise SpecError(
                f"CollectiveFit {self.op}: points must strictly increase in size_bytes, got "
                f"{sizes}; sort them and merge equal sizes"
            )
        require_positive_float(f"CollectiveFit {self.op}", "busbw_GBps", self.busbw_GBps)


@dataclass(frozen=True, kw_only=True, slots=True)
class CommunicationProfile:
    """Collective fits: depends on the topology and the library, not on the device."""

    backend: str
    """Collective library the fits describe: ``nccl``, ``rccl`` or ``gloo``."""
    fits: tuple[CollectiveFit, ...]
    """At most one fit per (op, group_size, placement)."""

    def __post_init__(self) -> None:
        if not self.backend:
            raise SpecError("CommunicationProfile.backend must name a library, e.g. nccl")
        keys = [(f.op, f.group_size, f.placement) for f in self.fits]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise SpecError(
                f"CommunicationProfile.fits: duplicate fits for (op, group_size, placement) "
                f"{duplicates}; keep the one the library uses by default"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Topology:
    """How devices are wired into nodes and scale-up domains."""

    gpus_per_node: int
    """Devices per node (processes per host on a CPU profile)."""
    scale_up_domain: int
    """Devices that share one scale-up fabric (NVLink/NVSwitch, xGMI, or a host)."""
    scale_up_fabric: ScaleUpFabric
    """`nvswitch` (any-to-any at full rate), `xgmi_mesh` (one link per peer), `pcie`,
    or `host_memory` (processes on one CPU host)."""
    scale_up_GBps_per_gpu: float | None = None
    """Scale-up bandwidth per device per direction, GB/s, summed over links; None if
    unknown (a measured CPU profile)."""
    scale_up_peer_GBps: float | None = None
    """Per-direction bandwidth between one pair of devices where a mesh limits it
    (xGMI: one link per peer); None on a switched fabric."""
    nics_per_node: int
    """Scale-out NICs per node (0 for a single machine without one)."""
    nic_GBps_per_gpu: float | None = None
    """Scale-out line rate per device, GB/s (BYTES: 400 Gb/s is 50 GB/s); None without a
    NIC."""

    def __post_init__(self) -> None:
        require_positive(self, "gpus_per_node", "scale_up_domain")
        require_non_negative(self, "nics_per_node")
        require_choice(self, "scale_up_fabric", ScaleUpFabric)
        for name in ("scale_up_GBps_per_gpu", "scale_up_peer_GBps", "nic_GBps_per_gpu"):
            value = getattr(self, name)
            if value is not None:
                require_positive_float("Topology", name, value)
