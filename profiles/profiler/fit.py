"""Fits from timings to the profile's curves (their check on held-out points:
`profiles.profiler.fit_validation`).

One time model for every operator, shared by the fits, the validation and (through
`profiles.lookup`) the cost model::

    t = op_overhead_s + work / rate
    GEMM          work 2·m·n·k FLOP      rate = peak(dtype) · gemm_efficiency(m, n, k)
    attention     work causal FLOPs      rate = attention_tflops(direction, s, d) · 1e12
    memory-bound  work bytes moved       rate = hbm_GBps · 1e9 · efficiency at that size
    collective    t = latency_s + size · bus_factor / busbw   (α-β; α holds the overhead)

Rates are therefore net of the per-operator overhead: a timing t gives work / (t - o),
with t - o never taken below `MIN_NET_FRACTION` of t (so a noisy overhead cannot make a
tiny operator look infinitely fast).

Methods
- GEMM efficiency: per dtype, efficiency = work / (net time · peak) per shape; shapes of
  equal work pooled (geometric mean); an isotonic regression (scipy, weighted by the
  pooled count, on log efficiency) makes the curve non-decreasing as the schema demands;
  runs of equal efficiency keep only their ends.
- Misalignment: median over (aligned, misaligned) pairs of the efficiency ratio.
- Attention: causal-counted throughput per (direction, dtype, head dim) at each
  power-of-two sequence length; other lengths are held out.
- Memory: ``hbm_GBps`` is the best measured copy rate (schema); the efficiency is the
  one scalar that minimises the relative squared error of the elementwise-kernel timings
  (`EFFICIENCY_OPS`; closed-form weighted least squares), and the size curve is each
  fitted size's own efficiency (`fit_memory_curve`), which lookups interpolate in
  log(bytes).
- Collectives: α ≥ 0 and 1/busbw > 0 by bounded linear least squares on time against
  size (scipy ``lsq_linear``), each row weighted by 1/t so small and large messages count
  alike (relative error); the fitted sizes' own times are kept as the fit's points
  (`collective_points`), which lookups interpolate between, so that the fit follows a
  library's changes of protocol with size (gloo on loopback: a latency plateau, then
  copies in and out of the caches) that one line cannot.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from scipy.optimize import isotonic_regression, lsq_linear

from profiles.lookup import (
    bus_factor,
    collective_time_s,
)
from profiles.profiler.shapes import holdout
from profiles.profiler.timing import (
    AttentionTiming,
    CollectiveTiming,
    GemmTiming,
    MemoryTiming,
    OverheadTiming,
    typical_s,
)
from profiles.schema_device import AttentionCurve, AttentionPoint, BandwidthPoint, EfficiencyPoint
from profiles.schema_network import CollectiveFit, TimePoint
from specs.errors import SpecError

MIN_NET_FRACTION = 0.5
"""Least share of a timing attributed to work rather than per-operator overhead."""
MIN_EFFICIENCY = 1e-6
"""Floor of fitted efficiencies (the schema needs them > 0)."""
MAX_BUSBW_GBPS = 1e6
"""Ceiling of a fitted bus bandwidth: a sweep whose time does not grow with size."""
EFFICIENCY_OPS = ("add",)
"""Memory-bound kernels `memory_bandwidth_efficiency` describes: one streaming elementwise
kernel that allocates its output (copy sets the peak). The RMSNorm-like and AdamW timings
are chains of such kernels (five for the executor's RMSNorm, about a dozen per tensor for
AdamW), each paying `op_overhead_s`; they are reported, not folded into the scalar."""


def net_time_s(t_s: float, overhead_s: float) -> float:
    """Time spent on work: t - overhead, at least `MIN_NET_FRACTION` of t."""
    return max(t_s - overhead_s, MIN_NET_FRACTION * t_s)


def op_overhead_s(overheads: Sequence[OverheadTiming]) -> float:
    """Median per-call time of the plain tiny operator (``op == 'add'``)."""
    for record in overheads:
        if record.op == "add":
            return statistics.median(record.times_s)
    raise SpecError("op overhead: no 'add' timing among the overhead records")


# ---- GEMM -------------------------------------------------------------------------------


def is_aligned(record: GemmTiming, granule: int) -> bool:
    """True when m, n and k are multiples of ``granule``."""
    return all(d % granule == 0 for d in (record.m, record.n, record.k))


def split_gemms(
    gemms: Sequence[GemmTiming], granule: int
) -> tuple[list[GemmTiming], list[GemmTiming]]:
    """(fit, held out): per dtype, aligned shapes ordered by work with every fourth left
    out (`shapes.holdout`); misaligned shapes are always held out (the curve is aligned)."""
    fit, held = [], []
    by_dtype: dict[str, list[GemmTiming]] = defaultdict(list)
    for record in gemms:
        (by_dtype[record.dtype] if is_aligned(record, granule) else held).append(record)
    for records in by_dtype.values():
        records.sort(key=lambda r: (r.flops, r.quantity))
        for record, out in zip(records, holdout(len(records)), strict=True):
            (held if out else fit).append(record)
    return fit, held


def best_gemm_flops(gemms: Sequence[GemmTiming], overhead_s: float) -> dict[str, float]:
    """Per dtype, the best measured GEMM rate (FLOP/s, net of overhead, median samples)."""
    best: dict[str, float] = {}
    for r in gemms:
        rate = r.flops / net_time_s(typical_s(r), overhead_s)
        best[r.dtype] = max(best.get(r.dtype, 0.0), rate)
    return best


def fit_gemm_curve(
    gemms: Sequence[GemmTiming], peak_flops_s: float, overhead_s: float
) -> tuple[EfficiencyPoint, ...]:
    """Monotone efficiency-against-GFLOP curve of one dtype's GEMMs (module docstring)."""
    if not gemms:
        raise SpecError("GEMM curve: no timings to fit")
    pooled: dict[float, list[float]] = defaultdict(list)
    for r in gemms:
        eff = r.flops / (net_time_s(typical_s(r), overhead_s) * peak_flops_s)
        pooled[float(f"{r.flops / 1e9:.9g}")].append(math.log(eff))
    gflops = sorted(pooled)
    log_eff = np.array([statistics.fmean(pooled[g]) for g in gflops])
    weights = np.array([len(pooled[g]) for g in gflops], dtype=float)
    smooth = isotonic_regression(log_eff, weights=weights, increasing=True).x
    effs = [min(1.0, max(MIN_EFFICIENCY, float(f"{math.exp(v):.6g}"))) for v in smooth]
    keep = [
        i
        for i in range(len(gflops))
        if i in (0, len(gflops) - 1) or not (effs[i - 1] == effs[i] == effs[i + 1])
    ]
    return tuple(EfficiencyPoint(gflop=gflops[i], efficiency=effs[i]) for i in keep)


def fit_misaligned_factor(
    pairs: Sequence[tuple[GemmTiming, GemmTiming]], overhead_s: float
) -> float:
    """Median efficiency ratio misaligned / aligned over the pairs, within (0, 1]."""
    if not pairs:
        return 1.0
    ratios = []
    for aligned, misaligned in pairs:
        eff_a = aligned.flops / net_time_s(typical_s(aligned), overhead_s)
        eff_m = misaligned.flops / net_time_s(typical_s(misaligned), overhead_s)
        ratios.append(eff_m / eff_a)
    return min(1.0, max(0.05, float(f"{statistics.median(ratios):.4g}")))


# ---- attention ----------------------------------------------------------------------------


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def split_attention(
    records: Sequence[AttentionTiming],
) -> tuple[list[AttentionTiming], list[AttentionTiming]]:
    """(fit, held out): power-of-two sequence lengths fit, the others are held out."""
    fit = [r for r in records if _is_power_of_two(r.seq_len)]
    held = [r for r in records if not _is_power_of_two(r.seq_len)]
    return fit, held


def fit_attention_curves(
    records: Sequence[AttentionTiming], overhead_s: float
) -> tuple[AttentionCurve, ...]:
    """One curve per (direction, dtype, head dim): causal TFLOP/s at each sequence
    length (the mean over batch shapes of equal length)."""
    rates: dict[tuple[str, str, int], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in records:
        tflops = r.causal_flops / net_time_s(typical_s(r), overhead_s) / 1e12
        rates[(r.direction, r.dtype, r.head_dim)][r.seq_len].append(tflops)
    curves = []
    for (direction, dtype, head_dim), by_seq in sorted(rates.items()):
        points = tuple(
            AttentionPoint(seq_len=s, tflops=float(f"{statistics.fmean(v):.6g}"))
            for s, v in sorted(by_seq.items())
        )
        curves.append(
            AttentionCurve(direction=direction, dtype=dtype, head_dim=head_dim, points=points)
        )
    return tuple(curves)


# ---- memory-bound -------------------------------------------------------------------------


def split_memory(
    records: Sequence[MemoryTiming],
) -> tuple[list[MemoryTiming], list[MemoryTiming]]:
    """(fit, held out): per operator, ordered by size, every third held out."""
    by_op: dict[str, list[MemoryTiming]] = defaultdict(list)
    for r in records:
        by_op[r.op].append(r)
    fit, held = [], []
    for rs in by_op.values():
        rs.sort(key=lambda r: r.bytes_moved)
        for r, out in zip(rs, holdout(len(rs), every=3), strict=True):
            (held if out else fit).append(r)
    return fit, held


def fit_memory(
    records: Sequence[MemoryTiming], overhead_s: float, peak_GBps: float | None = None
) -> tuple[float, float]:
    """(hbm_GBps, memory_bandwidth_efficiency): the peak is ``peak_GBps`` (a datasheet
    figure) or else the best measured copy rate; the efficiency is relative to it."""
    copies = [r for r in records if r.op == "copy"]
    if peak_GBps is None:
        if not copies:
            raise SpecError("memory fit: no copy timings (the copy sweep sets hbm_GBps)")
        peak_GBps = max(r.bytes_moved / net_time_s(typical_s(r), overhead_s) for r in copies) / 1e9
    peak_Bps = peak_GBps * 1e9
    bound = [r for r in records if r.op in EFFICIENCY_OPS]
    if not bound:
        return float(f"{peak_GBps:.6g}"), 1.0
    # min sum(((o + B*c - t) / t)^2)  =>  c = sum(B (t - o) / t^2) / sum(B^2 / t^2)
    num = sum(r.bytes_moved * (typical_s(r) - overhead_s) / typical_s(r) ** 2 for r in bound)
    den = sum((r.bytes_moved / typical_s(r)) ** 2 for r in bound)
    seconds_per_byte = max(num / den, 1.0 / peak_Bps)
    efficiency = 1.0 / (seconds_per_byte * peak_Bps)
    return float(f"{peak_GBps:.6g}"), min(1.0, max(MIN_EFFICIENCY, float(f"{efficiency:.6g}")))


def fit_memory_curve(
    records: Sequence[MemoryTiming], overhead_s: float, peak_GBps: float
) -> tuple[BandwidthPoint, ...]:
    """`ComputeProfile.memory_bandwidth_curve`: per size of the `EFFICIENCY_OPS` timings,
    bytes / (t - overhead) over the peak (median over records of one size), in increasing
    size. Cache-resident sizes run several times faster than DRAM-bound ones on a CPU; the
    curve follows that where the single efficiency of `fit_memory` averages it away."""
    by_size: dict[float, list[float]] = defaultdict(list)
    for r in records:
        if r.op in EFFICIENCY_OPS:
            rate_Bps = r.bytes_moved / net_time_s(typical_s(r), overhead_s)
            by_size[float(r.bytes_moved)].append(rate_Bps / (peak_GBps * 1e9))
    return tuple(
        BandwidthPoint(
            bytes_moved=size,
            efficiency=min(1.0, max(MIN_EFFICIENCY, float(f"{statistics.median(e):.6g}"))),
        )
        for size, e in sorted(by_size.items())
    )


# ---- collectives --------------------------------------------------------------------------


CollectiveKey = tuple[str, int, str]
"""(op, group size, placement)."""


def split_collectives(
    records: Sequence[CollectiveTiming],
) -> dict[CollectiveKey, tuple[list[CollectiveTiming], list[CollectiveTiming]]]:
    """Per (op, group size, placement): (fit, held out), sizes ordered, every third out."""
    groups: dict[CollectiveKey, list[CollectiveTiming]] = defaultdict(list)
    for r in records:
        groups[(r.op, r.group_size, r.placement)].append(r)
    out = {}
    for key, rs in groups.items():
        rs.sort(key=lambda r: r.size_bytes)
        mask = holdout(len(rs), every=3)
        out[key] = (
            [r for r, h in zip(rs, mask, strict=True) if not h],
            [r for r, h in zip(rs, mask, strict=True) if h],
        )
    return out


def fit_collective(records: Sequence[CollectiveTiming], algorithm: str) -> CollectiveFit:
    """α-β fit of one (op, group size, placement) (module docstring)."""
    first = records[0]
    factor = bus_factor(first.op, first.group_size)
    t = np.array([typical_s(r) for r in records])
    size = np.array([r.size_bytes * factor for r in records], dtype=float)
    a = np.column_stack([1.0 / t, size / t])
    lower = [0.0, 1.0 / (MAX_BUSBW_GBPS * 1e9)]
    solution = lsq_linear(a, np.ones_like(t), bounds=(lower, [np.inf, np.inf]))
    latency_s, seconds_per_byte = (float(v) for v in solution.x)
    line = CollectiveFit(
        op=first.op,
        group_size=first.group_size,
        placement=first.placement,
        latency_s=float(f"{latency_s:.6g}"),
        busbw_GBps=float(f"{1.0 / (seconds_per_byte * 1e9):.6g}"),
        algorithm=algorithm,
    )
    return dataclasses.replace(line, points=collective_points(records, line))


def collective_points(
    records: Sequence[CollectiveTiming], line: CollectiveFit
) -> tuple[TimePoint, ...]:
    """`CollectiveFit.points`: per message size (increasing), the time of ``line`` (an α-β
    fit without points) times the running median over three neighbouring sizes of
    measured / α-β time (the fastest record per size). The median keeps a regime that
    spans several sizes and drops a single size whose every sample a burst of other load
    delayed."""
    best: dict[float, float] = {}
    for r in records:
        size = float(r.size_bytes)
        best[size] = min(best.get(size, math.inf), typical_s(r))
    sizes = sorted(best)
    lines = [collective_time_s(line, size) for size in sizes]  # the α-β line (no points)
    ratios = [best[size] / line for size, line in zip(sizes, lines, strict=True)]
    smoothed = [statistics.median(ratios[max(i - 1, 0) : i + 2]) for i in range(len(ratios))]
    return tuple(
        TimePoint(size_bytes=size, seconds=float(f"{line * r:.6g}"))
        for size, line, r in zip(sizes, lines, smoothed, strict=True)
    )
