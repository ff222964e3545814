"""`HardwareProfile`: what one device computes and how the machines that hold it talk.

A profile has these parts, kept apart because they vary with different things (vidur's
split of compute profiles per device from network profiles per topology):

- `device`: the datasheet figures of one accelerator (or of the CPU of a gloo machine);
- `compute`: how close real kernels come to those figures, as a function of shape;
- `communication`: α-β fits of every collective per group size and placement;
- `topology`: how many devices share a node and a scale-up domain, and the NICs;
- `provenance`: whether the numbers were derived from published sources or measured,
  and the spread of every measurement (a record, never a model input);
- `host` (CPU profiles only): the host cost of paraplan's own executor per operator, per
  streamed byte and per waited-for collective, read by the torch runtime.

The same schema holds a profile derived from sources (`profiles.derive`) and one that
`paraplan profile` measures (on GPUs with NCCL, or on a CPU with gloo, where device
"peak" is the best measured GEMM rate and the efficiency curve is relative to it).

Conventions
- Units are in the field names: TFLOP/s = 1e12 FLOP/s, GB/s = 1e9 bytes/s, GiB = 2**30
  bytes, seconds (`_s`).
- dtype keys are `bf16`, `fp16`, `fp8`, `fp32`; `fp32` is plain IEEE fp32 matmul (torch's
  default on CUDA keeps TF32 off for matmul), so its peak is the non-tensor-core figure.
- GEMM work is 2·m·n·k FLOP; efficiency is achieved FLOP/s over the dtype's peak.
- Attention throughput follows the FlashAttention benchmark convention: forward counts
  4·batch·heads·seq²·head_dim FLOP, halved under a causal mask, backward 2.5 times the
  forward. Stored throughputs are causal-counted, so time = causal FLOPs / throughput,
  which matches the Megatron-LM model-FLOPs convention (causal attention counted as half).
- Collectives: time_s = latency_s + size_bytes · bus_factor(op, n) / (busbw_GBps · 1e9),
  with nccl-tests' size and factor conventions (`BUS_FACTOR_DOC`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_non_negative, require_positive

SCHEMA_VERSION = 1
"""The version this code reads and writes; a file with another version is refused."""

DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32")
"""Valid dtype keys of `peak_tflops`, `gemm_efficiency` and attention curves."""

GENERATIONS: tuple[str, ...] = ("ampere", "hopper", "blackwell", "blackwell_ultra", "cdna3")
"""Valid `DeviceSpec.generation` names: NVIDIA Ampere (A100), Hopper (H100, H200, H800),
Blackwell (B200, GB200; compute capability sm_100), Blackwell Ultra (B300, GB300; sm_103, a
distinct chip: its own key in the cost model's fitted per-generation tables) and AMD CDNA 3
(MI300X)."""

DeviceKind = Literal["gpu", "cpu"]
Direction = Literal["forward", "backward"]
CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
Placement = Literal["intra", "inter"]
ScaleUpFabric = Literal["nvswitch", "xgmi_mesh", "pcie", "host_memory"]
ProvenanceMethod = Literal["derived", "measured", "calibrated"]

BUS_FACTOR_DOC = (
    "nccl-tests busbw = algbw · factor, algbw = S / t: all_reduce 2(n-1)/n with S the full "
    "array per rank; all_gather, reduce_scatter and all_to_all (n-1)/n with S the total "
    "(per-rank part · n); send_recv 1 with S the message."
)


def _require_fraction(owner: str, name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise SpecError(f"{owner}.{name} must be in (0, 1], got {value!r}")


def _require_positive_float(owner: str, name: str, value: float) -> None:
    if not value > 0.0:
        raise SpecError(f"{owner}.{name} must be > 0, got {value!r}")


def _require_dtype(owner: str, dtype: str) -> None:
    if dtype not in DTYPES:
        raise SpecError(
            f"{owner}: unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}; "
            "store TF32 or other formats under the dtype the framework reports"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceSpec:
    """Datasheet figures of one device: the ceilings every efficiency is relative to."""

    name: str
    """Marketing name, e.g. ``NVIDIA H100 SXM5 80GB``, or the CPU model of a gloo machine."""
    vendor: str
    """Maker, e.g. ``NVIDIA``, ``AMD``, ``Intel``."""
    kind: DeviceKind = "gpu"
    """`gpu`, or `cpu` for a gloo machine where each "GPU" is one process."""
    peak_tflops: dict[str, float]
    """Dense peak TFLOP/s per dtype (no 2:4 sparsity); a dtype the device cannot run
    (fp8 on A100) is absent. On a measured CPU profile: the best measured GEMM rate."""
    memory_gib: float
    """Device memory a framework can allocate into, GiB, before any planner reserve."""
    hbm_GBps: float
    """Peak device-memory bandwidth, GB/s (HBM on GPUs; DRAM on a CPU profile, where a
    measured profile stores the best measured copy rate)."""
    generation: str = ""
    """Architecture generation of the device (`GENERATIONS`: ``ampere``, ``hopper``,
    ``blackwell``, ``blackwell_ultra``, ``cdna3``), the key of the cost model's
    per-generation tables (`costmodel.fitted_rates.sustained_gemm_rate_factor`,
    `costmodel.fitted_rates.fp8_gemm_rate_factor`); empty when not known (a CPU, or a
    measured GPU that matches no stored profile)."""

    def __post_init__(self) -> None:
        owner = f"DeviceSpec {self.name!r}"
        require_choice(self, "kind", DeviceKind)
        if not self.peak_tflops:
            raise SpecError(f"{owner}.peak_tflops must list at least one dtype, e.g. bf16")
        for dtype, tflops in self.peak_tflops.items():
            _require_dtype(f"{owner}.peak_tflops", dtype)
            _require_positive_float(owner, f"peak_tflops[{dtype}]", tflops)
        _require_positive_float(owner, "memory_gib", self.memory_gib)
        _require_positive_float(owner, "hbm_GBps", self.hbm_GBps)
        if self.generation and self.generation not in GENERATIONS:
            raise SpecError(
                f"{owner}.generation must be one of {', '.join(GENERATIONS)} or empty, got "
                f"{self.generation!r}; leave it empty for a device of another generation"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class EfficiencyPoint:
    """One point of a GEMM efficiency curve."""

    gflop: float
    """GEMM work 2·m·n·k in GFLOP (1e9 FLOP)."""
    efficiency: float
    """Achieved FLOP/s over the dtype's peak, in (0, 1]."""

    def __post_init__(self) -> None:
        _require_positive_float("EfficiencyPoint", "gflop", self.gflop)
        _require_fraction("EfficiencyPoint", "efficiency", self.efficiency)


@dataclass(frozen=True, kw_only=True, slots=True)
class BandwidthPoint:
    """Memory-bound bandwidth at one size of operator."""

    bytes_moved: float
    """Bytes one operator moves (``x + y`` over n elements of e bytes: 3·n·e)."""
    efficiency: float
    """Achieved bytes/s over `DeviceSpec.hbm_GBps`, in (0, 1]."""

    def __post_init__(self) -> None:
        _require_positive_float("BandwidthPoint", "bytes_moved", self.bytes_moved)
        _require_fraction("BandwidthPoint", "efficiency", self.efficiency)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionPoint:
    """Attention throughput at one sequence length."""

    seq_len: int
    """Sequence length (tokens per sequence) of the benchmark."""
    tflops: float
    """Causal-counted TFLOP/s (see the module docstring)."""

    def __post_init__(self) -> None:
        require_positive(self, "seq_len")
        _require_positive_float("AttentionPoint", "tflops", self.tflops)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionCurve:
    """Fused attention throughput against sequence length for one pass, dtype, head dim."""

    direction: Direction
    """`forward` or `backward` pass."""
    dtype: str
    """Input dtype of the attention kernel."""
    head_dim: int
    """Head dimension of the benchmark; lookups use the nearest stored head dim."""
    points: tuple[AttentionPoint, ...]
    """Points in strictly increasing seq_len; interpolated linearly in log2(seq_len)."""

    def __post_init__(self) -> None:
        require_choice(self, "direction", Direction)
        _require_dtype("AttentionCurve", self.dtype)
        require_positive(self, "head_dim")
        if not self.points:
            raise SpecError(f"AttentionCurve {self.direction}/{self.dtype}: needs >= 1 point")
        lengths = [p.seq_len for p in self.points]
        if any(b <= a for a, b in itertools.pairwise(lengths)):
            raise SpecError(
                f"AttentionCurve {self.direction}/{self.dtype}/d{self.head_dim}: seq_len must "
                f"strictly increase, got {lengths}; sort the points"
            )


def _check_gemm_curve(dtype: str, points: tuple[EfficiencyPoint, ...]) -> None:
    owner = f"ComputeProfile.gemm_efficiency[{dtype}]"
    _require_dtype(owner, dtype)
    if not points:
        raise SpecError(f"{owner}: needs at least one point")
    for a, b in itertools.pairwise(points):
        if b.gflop <= a.gflop or b.efficiency < a.efficiency:
            raise SpecError(
                f"{owner}: points must have strictly increasing gflop and non-decreasing "
                f"efficiency, got ({a.gflop}, {a.efficiency}) then ({b.gflop}, {b.efficiency}); "
                "a larger GEMM never runs at a lower fraction of peak in this model"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeProfile:
    """Achievable fractions of the device's peaks: depends on the device, not the network."""

    gemm_efficiency: dict[str, tuple[EfficiencyPoint, ...]]
    """Per dtype, a monotone curve of efficiency against GEMM GFLOP, interpolated linearly
    in log(gflop). Below the first point the GEMM time is held at the first point's
    (launch- and latency-bound), so efficiency falls in proportion to work; above the
    last point efficiency stays at the last point's."""
    gemm_alignment_elements: int
    """Granule (elements) that every GEMM dimension must be a multiple of to run at the
    curve's efficiency."""
    gemm_misaligned_factor: float
    """Multiplier on efficiency, in (0, 1], applied once when any of m, n, k is not a
    multiple of `gemm_alignment_elements`."""
    attention: tuple[AttentionCurve, ...] = ()
    """Fused attention curves; at most one per (direction, dtype, head_dim)."""
    attention_kernel: str = ""
    """Which kernel the attention curves describe, e.g. ``FlashAttention-3``."""
    memory_bandwidth_efficiency: float
    """Fraction of `DeviceSpec.hbm_GBps` that memory-bound kernels (norms, activations,
    optimizer steps) achieve on large tensors."""
    memory_bandwidth_curve: tuple[BandwidthPoint, ...] = ()
    """Efficiency against the bytes one operator moves, in strictly increasing bytes,
    interpolated linearly in log(bytes) and held at the end points
    (`profiles.lookup.memory_bandwidth_Bps`). Measured on CPUs, whose caches make small
    operators several times faster than DRAM-bound ones; empty (the flat
    `memory_bandwidth_efficiency`) in the datasheet profiles."""
    op_overhead_s: float = 0.0
    """Fixed host-side time per operator launch (framework dispatch, kernel launch) that
    is not hidden behind device work. Near zero for GPU profiles, where launches run
    ahead of the device; measured by `paraplan profile` on CPU, where it dominates small
    operators."""
    exp_per_s: float = 0.0
    """Hardware exponentials per second of the special function units (MUFU) of the whole
    device; 0 when no source gives it. Bounds the fused-attention kernel, which takes one
    exponential per score element (`costmodel.attention_core.attention_core_time_s`). Blackwell
    B200/GB200 5e12, Blackwell Ultra B300/GB300 10.7e12 (hardware.md [S9], per-GPU table)."""

    def __post_init__(self) -> None:
        if self.exp_per_s < 0.0:
            raise SpecError(
                f"ComputeProfile.exp_per_s must be >= 0 (0: no figure), got {self.exp_per_s}"
            )
        if not 0.0 <= self.op_overhead_s < 1.0:
            raise SpecError(
                f"ComputeProfile.op_overhead_s must be in [0, 1) seconds, got {self.op_overhead_s}"
            )
        for dtype, points in self.gemm_efficiency.items():
            _check_gemm_curve(dtype, points)
        require_positive(self, "gemm_alignment_elements")
        _require_fraction("ComputeProfile", "gemm_misaligned_factor", self.gemm_misaligned_factor)
        _require_fraction(
            "ComputeProfile", "memory_bandwidth_efficiency", self.memory_bandwidth_efficiency
        )
        sizes = [p.bytes_moved for p in self.memory_bandwidth_curve]
        if any(b <= a for a, b in itertools.pairwise(sizes)):
            raise SpecError(
                f"ComputeProfile.memory_bandwidth_curve: bytes_moved must strictly increase, "
                f"got {sizes}; sort the points and merge equal sizes"
            )
        keys = [(c.direction, c.dtype, c.head_dim) for c in self.attention]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise SpecError(
                f"ComputeProfile.attention: duplicate curves for (direction, dtype, head_dim) "
                f"{duplicates}; keep one curve per key"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class TimePoint:
    """A measured collective time at one message size."""

    size_bytes: float
    """Message size in the nccl-tests convention of `CollectiveFit`."""
    seconds: float
    """Typical (fastest-sample) time of one call."""

    def __post_init__(self) -> None:
        _require_positive_float("TimePoint", "size_bytes", self.size_bytes)
        _require_positive_float("TimePoint", "seconds", self.seconds)


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
        _require_positive_float(f"CollectiveFit {self.op}", "busbw_GBps", self.busbw_GBps)


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
                _require_positive_float("Topology", name, value)


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasurementSpread:
    """Spread of repeated timings behind one measured figure: a record of the measurement
    in the provenance, which no cost model reads (the host costs they fed are the typed
    `HostOverheads` section)."""

    quantity: str
    """What was measured, e.g. ``gemm.bf16.4096x4096x4096`` or ``all_reduce.intra.8``."""
    unit: str
    """Unit of the statistics below, e.g. ``s`` or ``TFLOP/s``."""
    num_samples: int
    """Timed repetitions."""
    mean: float
    """Mean of the samples."""
    stdev: float
    """Sample standard deviation."""
    min: float
    """Smallest sample."""
    max: float
    """Largest sample."""
    median: float | None = None
    """Median of the samples (None in profiles written before it was recorded)."""

    def __post_init__(self) -> None:
        require_positive(self, "num_samples")
        if self.stdev < 0 or not self.min <= self.mean <= self.max:
            raise SpecError(
                f"MeasurementSpread {self.quantity!r}: need stdev >= 0 and min <= mean <= max, "
                f"got stdev={self.stdev}, min={self.min}, mean={self.mean}, max={self.max}"
            )
        if self.median is not None and not self.min <= self.median <= self.max:
            raise SpecError(
                f"MeasurementSpread {self.quantity!r}: need min <= median <= max, got "
                f"min={self.min}, median={self.median}, max={self.max}"
            )

    def host_stats(self) -> dict[str, Any]:
        """The statistics a host-section row (`HostTiming`, `HostStream`, `HostCollective`)
        carries, keyed by its field names: sample count and mean, median, min and max in
        seconds (the spread's unit for host timings)."""
        return {
            "num_samples": self.num_samples,
            "mean_s": self.mean,
            "median_s": self.median,
            "min_s": self.min,
            "max_s": self.max,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """Where the numbers came from."""

    method: ProvenanceMethod
    """`derived` from published sources, `measured` on a machine, or `calibrated` from
    predicted-vs-measured residuals."""
    sources: tuple[str, ...] = ()
    """Published sources (derived) or the profiles a calibration started from."""
    date: str
    """ISO date (YYYY-MM-DD) the profile was made."""
    command: str
    """Command that produced the file, e.g. ``python -m profiles.derive --write``."""
    tool_version: str | None = None
    """paraplan version that wrote a measured profile."""
    torch_version: str | None = None
    """torch version used for measurements."""
    collective_library_version: str | None = None
    """NCCL/RCCL version (or gloo) used for the collective sweep."""
    driver_version: str | None = None
    """GPU driver version of the measured machine."""
    host: str | None = None
    """Host name or machine description of the measured machine."""
    notes: tuple[str, ...] = ()
    """Free-text notes: assumptions, conflicts between sources, caveats."""
    spread: tuple[MeasurementSpread, ...] = ()
    """Per-measurement spread of a measured profile (a record, not a model input)."""

    def __post_init__(self) -> None:
        require_choice(self, "method", ProvenanceMethod)
        if self.method == "derived" and not self.sources:
            raise SpecError("Provenance: a derived profile must list its sources")
        if len(self.date) != 10 or self.date[4] != "-" or self.date[7] != "-":
            raise SpecError(f"Provenance.date must be an ISO date YYYY-MM-DD, got {self.date!r}")


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
        _require_dtype(f"HostStream {self.op!r}", self.dtype)
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
        _require_positive_float("HostOverheads", "backward_scale", self.backward_scale)
        _require_positive_float(
            "HostOverheads", "layer_collective_scale", self.layer_collective_scale
        )

    def timing(self, name: str) -> HostTiming | None:
        """The timing named ``name``, None when the profile has none."""
        return next((t for t in self.timings if t.name == name), None)


@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareProfile:
    """Everything the cost model needs to know about one kind of machine."""

    schema_version: int = SCHEMA_VERSION
    """Version of this schema; files with another version are refused."""
    name: str
    """Profile name, e.g. ``h100-sxm-80gb`` (the stored file's stem)."""
    device: DeviceSpec
    """Datasheet figures of one device."""
    compute: ComputeProfile
    """Achievable compute and memory-bound rates, per device."""
    communication: CommunicationProfile
    """Collective fits, per topology."""
    topology: Topology
    """Node, scale-up domain and NIC layout."""
    provenance: Provenance
    """How the profile was made."""
    host: HostOverheads | None = None
    """Host costs of the torch runtime: CPU profiles only; None on a GPU profile, which
    the torch runtime prices kernel-bound."""

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise SpecError(
                f"HardwareProfile {self.name!r}: schema_version {self.schema_version} is not "
                f"supported (this paraplan reads version {SCHEMA_VERSION}); regenerate the "
                "profile with this version's `paraplan profile` or `python -m profiles.derive`"
            )
        if not self.name:
            raise SpecError("HardwareProfile.name must not be empty")
        _check_dtypes_have_peaks(self)
        if self.host is not None and self.device.kind != "cpu":
            raise SpecError(
                f"HardwareProfile {self.name!r}: a {self.device.kind} profile carries a host "
                "section; only CPU profiles have host overheads, drop the `host` key"
            )
        for fit in self.communication.fits:
            if fit.placement == "intra" and fit.group_size > self.topology.scale_up_domain:
                raise SpecError(
                    f"HardwareProfile {self.name!r}: intra fit {fit.op} has group_size "
                    f"{fit.group_size} > scale_up_domain {self.topology.scale_up_domain}; "
                    "larger groups span nodes and belong to placement 'inter'"
                )


def _check_dtypes_have_peaks(profile: HardwareProfile) -> None:
    peaks = profile.device.peak_tflops
    used = list(profile.compute.gemm_efficiency) + [c.dtype for c in profile.compute.attention]
    for dtype in used:
        if dtype not in peaks:
            raise SpecError(
                f"HardwareProfile {profile.name!r}: compute has a {dtype} curve but "
                f"device.peak_tflops has no {dtype} entry (has {', '.join(sorted(peaks))}); "
                "add the peak or drop the curve"
            )
