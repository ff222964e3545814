"""Pure accessors that turn a `HardwareProfile` into the rates the cost model needs.

Interpolation rules (each documented where it is applied):
- GEMM efficiency: linear in log(GFLOP) between curve points; below the first point the
  time is held at the first point's, so efficiency falls in proportion to work; above the
  last point it stays at the last point's. A misaligned dimension multiplies the result
  by `gemm_misaligned_factor` once. A GEMM shallower than its generation's reference depth
  runs below the curve by `gemm_depth_factor` (applied by the cost model's GEMM times).
- Attention: the curve of the nearest stored head dim (distance in log2), then linear in
  log2(seq_len) between points, held constant outside the measured range.
- Collectives: an exact (op, group size, placement) fit if stored; between two stored
  group sizes, latency and bus bandwidth are interpolated linearly in log2(group size);
  outside the stored range the nearest end's values are used.

Units are in the names: `_flops` FLOP/s, `_tflops` TFLOP/s, `_Bps` bytes/s, `_s` seconds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from profiles.schema import HardwareProfile
from profiles.schema_device import AttentionCurve, AttentionPoint, EfficiencyPoint
from profiles.schema_network import CollectiveFit
from specs.errors import SpecError


def peak_flops(profile: HardwareProfile, dtype: str) -> float:
    """Dense peak FLOP/s of the device for ``dtype`` (datasheet TFLOP/s · 1e12).

    Raises `SpecError` naming the dtypes the device has when it has no ``dtype`` peak
    (e.g. fp8 on an A100, which has no fp8 tensor cores).
    """
    peaks = profile.device.peak_tflops
    if dtype not in peaks:
        raise SpecError(
            f"profile {profile.name!r} ({profile.device.name}) has no {dtype} peak; it has "
            f"{', '.join(sorted(peaks))}; choose one of those precisions or another profile"
        )
    return peaks[dtype] * 1e12


def curve_efficiency(points: Sequence[EfficiencyPoint], gflop: float) -> float:
    """A GEMM efficiency curve at ``gflop``: linear in log(gflop) between its points, held
    at the last, and proportional to the work below the first."""
    first, last = points[0], points[-1]
    if gflop <= first.gflop:
        # Launch- and latency-bound region: time stops shrinking with work.
        return first.efficiency * gflop / first.gflop
    if gflop >= last.gflop:
        return last.efficiency
    i = bisect.bisect_right([p.gflop for p in points], gflop)
    a, b = points[i - 1], points[i]
    t = math.log(gflop / a.gflop) / math.log(b.gflop / a.gflop)
    return a.efficiency + t * (b.efficiency - a.efficiency)


def gemm_efficiency(profile: HardwareProfile, m: int, n: int, k: int, dtype: str) -> float:
    """Achieved fraction of ``dtype`` peak, in (0, 1], for an (m x k) @ (k x n) GEMM.

    Work is 2·m·n·k FLOP looked up on the profile's curve (rule in the module docstring),
    times `gemm_misaligned_factor` when any dimension is not a multiple of
    `gemm_alignment_elements` (basis: the H100 SwiGLU d_ff example of hardware.md §2a).
    """
    for label, dim in (("m", m), ("n", n), ("k", k)):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise SpecError(f"gemm_efficiency: {label} must be a positive integer, got {dim!r}")
    curves = profile.compute.gemm_efficiency
    if dtype not in curves:
        raise SpecError(
            f"profile {profile.name!r} has no {dtype} GEMM efficiency curve; it has "
            f"{', '.join(sorted(curves))}; choose one of those precisions"
        )
    efficiency = curve_efficiency(curves[dtype], 2.0 * m * n * k / 1e9)
    granule = profile.compute.gemm_alignment_elements
    if any(dim % granule for dim in (m, n, k)):
        efficiency *= profile.compute.gemm_misaligned_factor
    return efficiency


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmDepth:
    """Short-K cost of the GEMM kernels of one GPU generation (`gemm_depth_factor`)."""

    fill_k: float
    """K0: the per-output-tile work that does not shrink with K (pipeline fill and drain,
    epilogue), in elements of the K loop; a GEMM of depth K runs at K / (K + K0) of its
    long-K rate."""
    reference_k: int
    """Depth of the shape at which the generation's efficiency curves top out (the MAMF best
    shape of hardware.md §2a [S1]); the curves are read as the rate at this depth."""


GEMM_DEPTH: dict[str, GemmDepth] = {
    "hopper": GemmDepth(fill_k=130.0, reference_k=13312),
    "blackwell": GemmDepth(fill_k=140.0, reference_k=3072),
    "blackwell_ultra": GemmDepth(fill_k=140.0, reference_k=3072),
}
"""`GemmDepth` by `DeviceSpec.generation`. K0 is fitted, one value per generation, to
cuBLAS GEMM rates at equal FLOPs and different K (OpenXLA's default matmul performance
table, openxla/xla ``xla/service/gpu/model/matmul_interpolator_data.h``,
``kDefaultMatmulPTable``; `tests/costmodel/test_gemm_depth.py` lists the points):
hopper to the ``sm_90`` bf16 entries (K 256-4096, b·m·n up to 4·4096·4096; 130, rms 0.6%),
blackwell to the ``sm_100_B200`` bf16 and fp8 (e4m3 x e4m3 -> bf16) entries with
m = 4096, N >= 512 (140, rms 2.6%; narrower N is slower still and not covered). One K0
fits both dtypes: the fixed part scales with the tensor-core rate, not with the bytes of
the output. Blackwell Ultra has no table of its own and takes Blackwell's values. The
reference depth is the K of the MAMF best shape of the generation's sourced device
(H100 SXM bf16 2048x2048x13312; B200 bf16 1792x16128x3072). Generations without a
table (Ampere, CDNA 3) and CPU profiles keep the FLOP-only curve."""


def gemm_depth_factor(profile: HardwareProfile, k: int) -> float:
    """Multiplier, in (0, 1], on ``profile``'s GEMM efficiency for a GEMM of depth ``k``
    (the reduction dimension): (k / (k + K0)) / (K_ref / (K_ref + K0)), at most 1, with the
    `GEMM_DEPTH` values of the profile's generation; 1 for a CPU profile or a generation
    without values. Every output tile pays about K0 elements' worth of loop time
    (`GemmDepth.fill_k`) besides its k, so a shallow GEMM (an expert FC2 over a narrow
    expert width, a row-parallel GEMM at high TP) runs below the FLOP-only curve."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SpecError(f"gemm_depth_factor: k must be a positive integer, got {k!r}")
    depth = GEMM_DEPTH.get(profile.device.generation) if profile.device.kind == "gpu" else None
    if depth is None:
        return 1.0
    k0 = depth.fill_k
    return min(1.0, k / (k + k0) * (1.0 + k0 / depth.reference_k))


def _nearest_head_dim_curve(curves: list[AttentionCurve], head_dim: int) -> AttentionCurve:
    # Ties (impossible between integer dims and powers of two) go to the smaller head dim.
    return min(curves, key=lambda c: (abs(math.log2(c.head_dim / head_dim)), c.head_dim))


def _seq_interpolate(points: Sequence[AttentionPoint], seq_len: int) -> float:
    if seq_len <= points[0].seq_len:
        return points[0].tflops
    if seq_len >= points[-1].seq_len:
        return points[-1].tflops
    i = bisect.bisect_right([p.seq_len for p in points], seq_len)
    a, b = points[i - 1], points[i]
    t = math.log2(seq_len / a.seq_len) / math.log2(b.seq_len / a.seq_len)
    return a.tflops + t * (b.tflops - a.tflops)


def attention_tflops(
    profile: HardwareProfile, direction: str, seq_len: int, head_dim: int, dtype: str
) -> float:
    """Causal-counted fused-attention TFLOP/s for one pass (FlashAttention convention).

    Divide the causal attention FLOPs of the pass (forward 2·b·h·s²·d, backward 2.5 times
    that) by this rate to get its time. Raises `SpecError` when the profile has no curve
    for (direction, dtype), naming the pairs it has.
    """
    if direction not in ("forward", "backward"):
        raise SpecError(f"attention direction must be 'forward' or 'backward', got {direction!r}")
    if seq_len < 1 or head_dim < 1:
        raise SpecError(
            f"attention_tflops: seq_len ({seq_len}) and head_dim ({head_dim}) must be >= 1"
        )
    curves = [c for c in profile.compute.attention if c.direction == direction and c.dtype == dtype]
    if not curves:
        have = sorted({f"{c.direction}/{c.dtype}" for c in profile.compute.attention})
        raise SpecError(
            f"profile {profile.name!r} has no {direction}/{dtype} attention curve; it has "
            f"{', '.join(have) or 'none'}; Megatron-LM runs attention in bf16 under fp8 "
            "training unless fp8 attention is enabled, so look up bf16 there"
        )
    return _seq_interpolate(_nearest_head_dim_curve(curves, head_dim).points, seq_len)


def memory_bandwidth_Bps(profile: HardwareProfile, bytes_moved: float | None = None) -> float:
    """Achievable memory-bound bandwidth, bytes/s: peak times an efficiency.

    The efficiency is `ComputeProfile.memory_bandwidth_efficiency` without ``bytes_moved``
    or without a `ComputeProfile.memory_bandwidth_curve`; else the curve's, linear in
    log(bytes) between its points and held at its ends.
    """
    compute = profile.compute
    efficiency = compute.memory_bandwidth_efficiency
    points = compute.memory_bandwidth_curve
    if bytes_moved is not None and points:
        efficiency = _log_interpolate(
            [p.bytes_moved for p in points], [p.efficiency for p in points], bytes_moved
        )
    return profile.device.hbm_GBps * 1e9 * efficiency


def _log_interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """ys at x, linear in log(x) between the xs (increasing), held at the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    t = math.log(x / xs[i - 1]) / math.log(xs[i] / xs[i - 1])
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


def gpus_per_node(profile: HardwareProfile) -> int:
    """Devices per node (processes per host on a CPU profile)."""
    return profile.topology.gpus_per_node


def bus_factor(op: str, group_size: int) -> float:
    """nccl-tests busbw/algbw factor (hardware.md §2c [S29]).

    all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; send_recv 1.
    """
    n = group_size
    if n < 2:
        raise SpecError(f"bus_factor: group_size must be >= 2, got {n}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise SpecError(
        f"unknown collective {op!r}; valid: all_reduce, all_gather, reduce_scatter, "
        "all_to_all, send_recv"
    )


def collective_time_s(fit: CollectiveFit, size_bytes: float) -> float:
    """Time of one collective: latency_s + size_bytes · factor / busbw (α-β), times, for a
    fit with measured `CollectiveFit.points`, the ratio of measured to α-β time at those
    points, interpolated linearly in log size and held beyond the end points (so the
    measured points are reproduced and exact α-β data keeps the line).

    ``size_bytes`` follows nccl-tests: the full array per rank for all_reduce, the total
    (per-rank part times group size) for all_gather / reduce_scatter / all_to_all, the
    message for send_recv (hardware.md §2c [S29]).
    """
    if size_bytes < 0:
        raise SpecError(f"collective_time_s: size_bytes must be >= 0, got {size_bytes}")
    factor = bus_factor(fit.op, fit.group_size)

    def line_s(size: float) -> float:
        return fit.latency_s + size * factor / (fit.busbw_GBps * 1e9)

    points = fit.points
    if not points or size_bytes <= 0:
        return line_s(size_bytes)
    sizes = [p.size_bytes for p in points]
    ratios = [p.seconds / line_s(p.size_bytes) for p in points]
    return line_s(size_bytes) * _log_interpolate(sizes, ratios, size_bytes)


def _interpolate_fits(a: CollectiveFit, b: CollectiveFit, group_size: int) -> CollectiveFit:
    t = math.log2(group_size / a.group_size) / math.log2(b.group_size / a.group_size)
    algorithm = a.algorithm if a.algorithm == b.algorithm else f"{a.algorithm}/{b.algorithm}"
    return CollectiveFit(
        op=a.op,
        group_size=group_size,
        placement=a.placement,
        latency_s=a.latency_s + t * (b.latency_s - a.latency_s),
        busbw_GBps=a.busbw_GBps + t * (b.busbw_GBps - a.busbw_GBps),
        algorithm=algorithm,
    )


def collective_fit(
    profile: HardwareProfile, op: str, group_size: int, placement: str
) -> CollectiveFit:
    """The α-β fit for ``op`` over ``group_size`` ranks placed ``intra`` or ``inter`` node.

    Rule: exact fit if stored; else interpolate latency and busbw linearly in
    log2(group_size) between the neighbouring stored sizes; outside the stored range use
    the nearest end's latency and busbw. The returned fit carries the requested size.
    """
    bus_factor(op, group_size)  # validates op and size
    if placement not in ("intra", "inter"):
        raise SpecError(f"placement must be 'intra' or 'inter', got {placement!r}")
    if op == "send_recv" and group_size != 2:
        raise SpecError(f"send_recv is between 2 ranks, got group_size {group_size}")
    domain = profile.topology.scale_up_domain
    if placement == "intra" and group_size > domain:
        raise SpecError(
            f"profile {profile.name!r}: an intra group of {group_size} ranks does not fit in "
            f"one scale-up domain of {domain}; use placement 'inter' for the part that spans "
            "nodes"
        )
    fits = sorted(
        (f for f in profile.communication.fits if f.op == op and f.placement == placement),
        key=lambda f: f.group_size,
    )
    if not fits:
        have = sorted({f"{f.op}/{f.placement}" for f in profile.communication.fits})
        raise SpecError(
            f"profile {profile.name!r} has no {op} fit for placement {placement!r}; it has "
            f"{', '.join(have) or 'none'} (a single-node profile has no inter fits)"
            + (
                f": the plan spans more than the {domain} ranks this profile measured "
                "together; profile as many ranks as the plan has on this machine (paraplan "
                "profile --nproc N), or plan for at most that many"
                if placement == "inter"
                else ""
            )
        )
    sizes = [f.group_size for f in fits]
    i = bisect.bisect_left(sizes, group_size)
    if i < len(fits) and sizes[i] == group_size:
        return fits[i]
    if i == 0 or i == len(fits):
        end = fits[0] if i == 0 else fits[-1]
        return CollectiveFit(
            op=end.op,
            group_size=group_size,
            placement=end.placement,
            latency_s=end.latency_s,
            busbw_GBps=end.busbw_GBps,
            algorithm=end.algorithm,
        )
    return _interpolate_fits(fits[i - 1], fits[i], group_size)


HOST_PROBE_TIMING = "host_probe"
"""Host-section timing of the profiler's host probe (`profiles.host_probe`)."""


def host_probe_s(profile: HardwareProfile) -> float | None:
    """Mean seconds of one call of the host probe while the profile was measured (every
    rank at once); None when the profile has no host section or did not time it."""
    found = profile.host.timing(HOST_PROBE_TIMING) if profile.host is not None else None
    return found.mean_s if found is not None and found.mean_s > 0 else None
