"""The device and compute sections of a `profiles.schema.HardwareProfile`: the datasheet
figures of one accelerator (`DeviceSpec`) and how close real kernels come to them as a
function of shape (`ComputeProfile`: GEMM efficiency, fused attention throughput,
memory-bound bandwidth, host launch overhead). Units and counting conventions are those of
`profiles.schema`."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from profiles.schema_checks import (
    ATTENTION_DTYPES,
    require_dtype,
    require_fraction,
    require_positive_float,
)
from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_positive

GENERATIONS: tuple[str, ...] = ("ampere", "hopper", "blackwell", "blackwell_ultra", "cdna3")
"""Valid `DeviceSpec.generation` names: NVIDIA Ampere (A100), Hopper (H100, H200, H800),
Blackwell (B200, GB200; compute capability sm_100), Blackwell Ultra (B300, GB300; sm_103, a
distinct chip: its own key in the cost model's fitted per-generation tables) and AMD CDNA 3
(MI300X)."""

DeviceKind = Literal["gpu", "cpu"]
Direction = Literal["forward", "backward"]


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
            require_dtype(f"{owner}.peak_tflops", dtype)
            require_positive_float(owner, f"peak_tflops[{dtype}]", tflops)
        require_positive_float(owner, "memory_gib", self.memory_gib)
        require_positive_float(owner, "hbm_GBps", self.hbm_GBps)
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
        require_positive_float("EfficiencyPoint", "gflop", self.gflop)
        require_fraction("EfficiencyPoint", "efficiency", self.efficiency)


@dataclass(frozen=True, kw_only=True, slots=True)
class BandwidthPoint:
    """Memory-bound bandwidth at one size of operator."""

    bytes_moved: float
    """Bytes one operator moves (``x + y`` over n elements of e bytes: 3·n·e)."""
    efficiency: float
    """Achieved bytes/s over `DeviceSpec.hbm_GBps`, in (0, 1]."""

    def __post_init__(self) -> None:
        require_positive_float("BandwidthPoint", "bytes_moved", self.bytes_moved)
        require_fraction("BandwidthPoint", "efficiency", self.efficiency)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionPoint:
    """Attention throughput at one sequence length."""

    seq_len: int
    """Sequence length (tokens per sequence) of the benchmark."""
    tflops: float
    """Causal-counted TFLOP/s (see the module docstring)."""

    def __post_init__(self) -> None:
        require_positive(self, "seq_len")
        require_positive_float("AttentionPoint", "tflops", self.tflops)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionCurve:
    """Fused attention throughput against sequence length for one pass, dtype, head dim."""

    direction: Direction
    """`forward` or `backward` pass."""
    dtype: str
    """Input dtype of the attention kernel (`profiles.schema_checks.ATTENTION_DTYPES`)."""
    head_dim: int
    """Head dimension of the benchmark; lookups use the nearest stored head dim."""
    points: tuple[AttentionPoint, ...]
    """Points in strictly increasing seq_len; interpolated linearly in log2(seq_len)."""

    def __post_init__(self) -> None:
        require_choice(self, "direction", Direction)
        require_dtype("AttentionCurve", self.dtype, ATTENTION_DTYPES)
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
    require_dtype(owner, dtype)
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
        require_fraction("ComputeProfile", "gemm_misaligned_factor", self.gemm_misaligned_factor)
        require_fraction(
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
