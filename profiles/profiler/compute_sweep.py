"""The compute sweep of one rank: every point of a `SweepPlan`, timed in several passes.

A point's samples are taken in `COMPUTE_PASSES` separate visits, each with a share of the
point's budget (`timing.per_pass`), and pooled; the fit reads their median. A burst of
other load on a shared host (another process's copies evicting the caches, a scheduler
storm) then lands on a few samples of many points instead of on every sample of the
points that happened to run during it, where it would bend the fitted curve.

The first pass decides which points are measured at all: GEMMs and attention predicted
(from the fastest rate seen so far, agreed over the ranks) to exceed `SweepPlan.max_call_s`
and tensors beyond the rank's memory limit are skipped; later passes revisit the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from profiles.profiler.compute import (
    ComputeResults,
    Runner,
    Tick,
    time_adamw,
    time_attention,
    time_gemm,
    time_memory_ops,
    time_overheads,
)
from profiles.profiler.shapes import SweepPlan
from profiles.profiler.timing import (
    AttentionTiming,
    GemmTiming,
    MemoryTiming,
    TranscendentalTiming,
    per_pass,
)
from profiles.profiler.transcendental import TRANSCENDENTAL_ELEMENTS, time_transcendental

COMPUTE_PASSES = 3
"""Visits per compute point (module doc)."""

Record = GemmTiming | AttentionTiming | MemoryTiming | TranscendentalTiming


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One planned point: what it times and where its records go."""

    label: str
    """Progress label."""
    kind: str
    """`gemm`, `misaligned`, `attention`, `memory` or `transcendental`: the
    `ComputeResults` list."""
    time: Callable[[Runner], tuple[Record, ...]]
    """Times the point once, returning its records in a fixed order."""
    dtype: str = "fp32"
    """dtype key of the point's tensors."""
    work_flops: float = 0.0
    """Work of the slowest call (GEMMs, attention backward), for the time limit."""
    memory_bytes: int = 0
    """Bytes of tensors the point allocates, for the memory limit."""


def plan_points(plan: SweepPlan, *, host_probes: bool = True) -> list[Point]:
    """Every compute point of ``plan`` in sweep order; the transcendental kernels
    (`profiles.profiler.transcendental`) only with ``host_probes`` (CPU ranks)."""
    points = [
        Point(
            label=f"gemm {d} {m}x{n}x{k}",
            kind="gemm",
            dtype=d,
            time=lambda run, s=(d, m, n, k, p): (time_gemm(run, s),),
            work_flops=2.0 * m * n * k,
        )
        for d, m, n, k, p in plan.gemms
    ]
    points += [
        Point(
            label="gemm alignment",
            kind="misaligned",
            time=lambda run, a=aligned, b=mis: (time_gemm(run, a), time_gemm(run, b)),
        )
        for aligned, mis in plan.misaligned_gemms
    ]
    points += [
        Point(
            label=f"attention {d} s{s} d{hd}",
            kind="attention",
            dtype=d,
            time=lambda run, shape=(d, b, h, s, hd): time_attention(run, shape),
            work_flops=5.0 * b * h * s * s * hd,
        )
        for d, b, h, s, hd in plan.attention
    ]
    points += [
        Point(
            label=f"memory {n * 4 >> 10} KiB",
            kind="memory",
            time=lambda run, n=n: time_memory_ops(run, n, "fp32"),
            # x, y and dst, and the cold RMSNorm's inputs and held outputs (one set each
            # at sizes beyond the cold pool)
            memory_bytes=5 * n * 4,
        )
        for n in plan.memory_elements
    ]
    points += [
        Point(
            label=f"adamw {n} params",
            kind="memory",
            time=lambda run, n=n: (time_adamw(run, n),),
            memory_bytes=5 * n * 4,
        )
        for n in plan.adamw_params
    ]
    if host_probes:
        points += [
            Point(
                label=f"transcendental {n} elements",
                kind="transcendental",
                time=lambda run, n=n: time_transcendental(run, n),
                # two input sets and the held outputs (one set each beyond the cold pool)
                memory_bytes=3 * n * 4,
            )
            for n in TRANSCENDENTAL_ELEMENTS
        ]
    return points


def compute_point_count(
    plan: SweepPlan, passes: int = COMPUTE_PASSES, *, host_probes: bool = True
) -> int:
    """Progress units of `run_compute_sweep` for ``plan``: the overhead chain, then every
    point once per pass (skipped points included)."""
    return 1 + passes * len(plan_points(plan, host_probes=host_probes))


def run_compute_sweep(
    plan: SweepPlan,
    run: Runner,
    tick: Tick,
    *,
    memory_limit_bytes: int,
    passes: int = COMPUTE_PASSES,
    host_probes: bool = True,
) -> ComputeResults:
    """Time every compute point of ``plan`` in ``passes`` passes (module doc); the
    autograd chain's host costs and the transcendental kernels only with ``host_probes``
    (CPU ranks)."""
    results = ComputeResults()
    results.overhead.extend(time_overheads(run, autograd=host_probes))
    tick("op overhead")
    visit = replace(run, budget=per_pass(run.budget, passes))
    points = plan_points(plan, host_probes=host_probes)
    kept: list[tuple[Point, tuple[Record, ...]]] = []
    best: dict[str, float] = {}
    for point in points:
        skip = _skip_reason(plan, visit, point, best, memory_limit_bytes)
        if skip:
            results.skipped.append(f"{point.label} ({skip})")
        else:
            records = point.time(visit)
            _note_rate(point, records, best)
            kept.append((point, records))
        tick(point.label)
    for index in range(1, passes):
        kept = [(point, pooled(records, point.time(visit))) for point, records in kept]
        for point in points:
            tick(f"{point.label} (pass {index + 1}/{passes})")
    for point, records in kept:
        _store(results, point.kind, records)
    return results


def pooled(first: Sequence[Record], again: Sequence[Record]) -> tuple[Record, ...]:
    """``first`` with the samples of ``again`` (the same point timed once more) appended."""
    if [r.quantity for r in first] != [r.quantity for r in again]:
        raise ValueError(
            f"a compute point returned different records on a second pass: "
            f"{[r.quantity for r in first]} then {[r.quantity for r in again]}"
        )
    return tuple(
        replace(a, times_s=a.times_s + b.times_s) for a, b in zip(first, again, strict=True)
    )


def _skip_reason(
    plan: SweepPlan, run: Runner, point: Point, best: dict[str, float], limit_bytes: int
) -> str:
    if point.memory_bytes > limit_bytes:
        return "memory"
    if point.work_flops:
        rate = best.get(f"{point.kind}.{point.dtype}")
        predicted_s = point.work_flops / rate if rate else 0.0
        if run.agree(predicted_s) > plan.max_call_s:
            return f"over {plan.max_call_s} s per call"
    return ""


def _note_rate(point: Point, records: Sequence[Record], best: dict[str, float]) -> None:
    """Keep the fastest rate (FLOP/s, agreed by taking each record's fastest sample) of
    each (kind, dtype), which predicts the next point's call time."""
    if not point.work_flops:
        return
    for record in records:
        work = record.flops if isinstance(record, GemmTiming) else record.causal_flops
        key = f"{point.kind}.{point.dtype}"
        best[key] = max(best.get(key, 0.0), work / min(record.times_s))


def _store(results: ComputeResults, kind: str, records: tuple[Record, ...]) -> None:
    if kind == "gemm":
        results.gemms.extend(records)  # type: ignore[arg-type]
    elif kind == "misaligned":
        results.misaligned.append(records)  # type: ignore[arg-type]
    elif kind == "attention":
        results.attention.extend(records)  # type: ignore[arg-type]
    elif kind == "transcendental":
        results.transcendental.extend(records)  # type: ignore[arg-type]
    else:
        results.memory.extend(records)  # type: ignore[arg-type]
