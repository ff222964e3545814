"""The host section of a CPU `profiles.schema.HardwareProfile` (`HostOverheads`): the host
cost of paraplan's own executor per operator, per streamed byte, per transcendental kernel
and per waited-for collective, each row with the statistics of its timed samples
(`HostSamples`), and the torch runtime's two calibration scales."""

from __future__ import annotations

from dataclasses import dataclass

from profiles.schema_checks import require_dtype, require_positive_float
from profiles.schema_network import CollectiveOp
from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_positive


@dataclass(frozen=True, kw_only=True, slots=True)
class HostSamples:
    """The statistics every host row carries: timed samples of one probe, seconds per call
    (or per operator, node or tensor, as the probe defines it); for a collective each sample
    is the slowest rank's."""

    num_samples: int
    """Timed samples."""
    mean_s: float
    """Mean of the samples, seconds."""
    median_s: float | None = None
    """Median of the samples, seconds (None where it was not recorded)."""
    min_s: float
    """Smallest sample, seconds."""
    max_s: float
    """Largest sample, seconds."""

    def check_samples(self, owner: str) -> None:
        """At least one sample, mean and median within min and max."""
        require_positive(self, "num_samples")
        middle = (self.mean_s,) if self.median_s is None else (self.mean_s, self.median_s)
        if any(not self.min_s <= v <= self.max_s for v in middle):
            raise SpecError(
                f"{owner}: need min_s <= mean_s, median_s <= max_s, got min_s={self.min_s}, "
                f"mean_s={self.mean_s}, median_s={self.median_s}, max_s={self.max_s}; re-run "
                "`paraplan profile` on a CPU"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class HostTiming(HostSamples):
    """One host-cost probe of the torch runtime's model: seconds per call (or per operator,
    node or tensor, as the probe defines it). A paired difference (a timing less its
    baseline, `profiles.profiler.compute.Runner.paired`) may be negative."""

    name: str
    """The probe, e.g. ``add`` (plain dispatch), ``autograd_forward`` or
    ``moe_exchange_forward_w1`` (`profiles.profiler.timing.OverheadTiming.op`)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("HostTiming.name must not be empty; name the probe, e.g. add")
        self.check_samples(f"HostTiming {self.name!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class HostStream(HostSamples):
    """One memory-bound operator timed at one size on a CPU rank: the points the torch
    runtime fits its element-wise, transpose and AdamW rates through
    (`costmodel.runtimes.torch.host_rates`); bytes as `profiles.profiler.compute` counts
    them per operator."""

    op: str
    """``copy``, ``add``, ``rmsnorm``, ``transpose`` or ``adamw``
    (`profiles.profiler.timing.MemoryTiming.op`)."""
    dtype: str
    """dtype key of the tensors."""
    bytes_moved: int
    """Bytes the operator reads and writes per call."""

    def __post_init__(self) -> None:
        if not self.op:
            raise SpecError("HostStream.op must name the operator, e.g. add")
        require_dtype(f"HostStream {self.op!r}", self.dtype)
        require_positive(self, "bytes_moved")
        self.check_samples(f"HostStream {self.op}/{self.bytes_moved}B")


TRANSCENDENTAL_OPS: tuple[str, ...] = (
    "silu",
    "silu_backward",
    "log_softmax",
    "log_softmax_backward",
)
"""Kernels of the transcendental probe (`profiles.profiler.transcendental`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostTranscendental(HostSamples):
    """One transcendental element-wise kernel timed at one size on a CPU rank, its fp32
    inputs and outputs cold (`profiles.profiler.transcendental`): the points the torch
    runtime fits its per-element rates through (`costmodel.runtimes.torch.transcendental_rates`)."""

    op: str
    """One of `TRANSCENDENTAL_OPS`."""
    elements: int
    """Elements of the kernel's output per call."""

    def __post_init__(self) -> None:
        if self.op not in TRANSCENDENTAL_OPS:
            raise SpecError(
                f"HostTranscendental.op {self.op!r} is not a probed kernel; use one of "
                f"{', '.join(TRANSCENDENTAL_OPS)}"
            )
        require_positive(self, "elements")
        self.check_samples(f"HostTranscendental {self.op}/{self.elements}")


@dataclass(frozen=True, kw_only=True, slots=True)
class HostCollective(HostSamples):
    """One collective within a host, timed at one message size as a step waits for it: its
    mean over the α-β fit's fast edge is what a waited-for call costs beyond the fit
    (`costmodel.runtimes.torch.host_rates`)."""

    op: CollectiveOp
    """The collective."""
    group_size: int
    """Ranks in the group (all on one host)."""
    size_bytes: int
    """Message size in the nccl-tests convention of `CollectiveFit`."""

    def __post_init__(self) -> None:
        require_choice(self, "op", CollectiveOp)
        require_positive(self, "group_size", "size_bytes")
        self.check_samples(f"HostCollective {self.op}/{self.group_size}/{self.size_bytes}B")


def _require_unique(owner: str, keys: list[tuple]) -> None:
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise SpecError(f"HostOverheads.{owner}: repeated keys {repeated}; keep one row per key")


@dataclass(frozen=True, kw_only=True, slots=True)
class HostOverheads:
    """Host-side costs of paraplan's own executor on CPU ranks, measured by the profiler
    (`profiles.profiler.assemble`) and read by the torch runtime
    (`costmodel.runtimes.torch.host_rates`), with that runtime's two calibration scales
    (`reports.calibrate`). Only CPU profiles carry this section: on a GPU the host issues
    kernels ahead of the device, and the torch runtime prices a profile without the section
    kernel-bound (no host cost)."""

    timings: tuple[HostTiming, ...] = ()
    """Host-cost probes, each name at most once (`profiles.profiler.framework`,
    `profiles.profiler.collective_forms` and the in-context probes)."""
    streams: tuple[HostStream, ...] = ()
    """Memory-bound operators by size, at most one row per (op, dtype, bytes_moved)."""
    collective_calls: tuple[HostCollective, ...] = ()
    """Collectives within the host by size, at most one row per (op, group_size,
    size_bytes)."""
    backward_scale: float = 1.0
    """Factor on the compute time of every backward pass the torch runtime prices
    (`costmodel.runtimes.torch.passes.executor_pass_costs`); a recompute's rerun, a forward,
    keeps the forward's price. 1 as measured; `paraplan calibrate` fits it on its runs'
    forward/backward split (`reports.calibrate_time.fit_backward_scale`)."""
    layer_collective_scale: float = 1.0
    """Factor on the time of every layer collective the torch runtime prices one by one
    (tensor-, context- and expert-parallel calls: wire time, waited-for excess and
    functional extras, `costmodel.runtimes.torch.passes`). 1 as measured; `paraplan
    calibrate` fits it on runs with layer collectives (`reports.calibrate_layers`)."""
    transcendental: tuple[HostTranscendental, ...] = ()
    """Transcendental element-wise kernels by size, at most one row per (op, elements);
    empty in profiles measured before the probe existed, whose transcendental kernels the
    torch runtime prices per byte like every element-wise kernel."""

    def __post_init__(self) -> None:
        _require_unique("timings", [(t.name,) for t in self.timings])
        _require_unique("streams", [(s.op, s.dtype, s.bytes_moved) for s in self.streams])
        _require_unique(
            "collective_calls", [(c.op, c.group_size, c.size_bytes) for c in self.collective_calls]
        )
        _require_unique("transcendental", [(t.op, t.elements) for t in self.transcendental])
        require_positive_float("HostOverheads", "backward_scale", self.backward_scale)
        require_positive_float(
            "HostOverheads", "layer_collective_scale", self.layer_collective_scale
        )

    def timing(self, name: str) -> HostTiming | None:
        """The timing named ``name``, None when the profile has none."""
        return next((t for t in self.timings if t.name == name), None)
