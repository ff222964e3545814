"""`ClusterSpec`: where the job runs. The hardware itself (peaks, links, topology) lives in
a `profiles` HardwareProfile named here; the spec only says which one and how many."""

from __future__ import annotations

from dataclasses import dataclass

from specs.errors import SpecError
from specs.fieldcheck import require_optional_positive, require_positive


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """A homogeneous cluster of accelerators (on a CPU profile each "GPU" is one process)."""

    hardware: str
    """A stored hardware profile name (e.g. `h100-sxm-80gb`) or a path to a profile JSON."""
    num_gpus: int
    """Total GPUs (ranks) in the job: the world size."""
    gpus_per_node: int | None = None
    """GPUs per node; None means the profile's value."""
    nvlink_segment_nodes: int | None = None
    """Servers (trays) of one NVLink segment on a profile whose scale-up domain spans
    servers (NVL72): the job's ranks fill whole segments of this many consecutive servers,
    each segment inside one NVLink domain (SLURM ``--segment``). None means the launcher's
    rule (`costmodel.scale_up.launcher_segment_nodes`); checked against the profile
    there (`costmodel.scale_up.segment_nodes`)."""

    def __post_init__(self) -> None:
        if not self.hardware:
            raise SpecError("ClusterSpec.hardware must name a profile or a profile JSON path")
        require_positive(self, "num_gpus")
        require_optional_positive(self, "gpus_per_node", "nvlink_segment_nodes")
