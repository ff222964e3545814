"""The check of the profiler's fits (`profiles.profiler.fit`) on points they never saw: the
profile's prediction, through `profiles.lookup` and the same time model as the fits, for
every held-out GEMM, attention pass, memory-bound operator and collective, and a summary of
the relative errors by kind."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from profiles.lookup import (
    attention_tflops,
    collective_fit,
    collective_time_s,
    gemm_efficiency,
    memory_bandwidth_Bps,
    peak_flops,
)
from profiles.profiler.fit import EFFICIENCY_OPS
from profiles.profiler.timing import (
    AttentionTiming,
    CollectiveTiming,
    GemmTiming,
    MemoryTiming,
    typical_s,
)
from profiles.schema import HardwareProfile


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldOutError:
    """A measured point the fits never saw, and what the profile predicts for it."""

    kind: str
    """`gemm`, `attention`, `memory` or `collective`."""
    quantity: str
    """Name of the measurement (as in the provenance spread)."""
    measured_s: float
    """Median measured time."""
    predicted_s: float
    """Time the profile predicts through `profiles.lookup`."""

    @property
    def relative_error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldOut:
    """Points left out of every fit."""

    gemms: tuple[GemmTiming, ...] = ()
    """GEMMs."""
    attention: tuple[AttentionTiming, ...] = ()
    """Attention passes."""
    memory: tuple[MemoryTiming, ...] = ()
    """Memory-bound operators (`EFFICIENCY_OPS` only are checked)."""
    collectives: tuple[CollectiveTiming, ...] = ()
    """Collectives."""


def predict_gemm_s(profile: HardwareProfile, r: GemmTiming) -> float:
    """o + 2mnk / (peak · efficiency), through `profiles.lookup`."""
    rate = peak_flops(profile, r.dtype) * gemm_efficiency(profile, r.m, r.n, r.k, r.dtype)
    return profile.compute.op_overhead_s + r.flops / rate


def predict_attention_s(profile: HardwareProfile, r: AttentionTiming) -> float:
    """o + causal FLOPs / attention throughput."""
    tflops = attention_tflops(profile, r.direction, r.seq_len, r.head_dim, r.dtype)
    return profile.compute.op_overhead_s + r.causal_flops / (tflops * 1e12)


def validate(profile: HardwareProfile, held: HeldOut) -> list[HeldOutError]:
    """The profile's prediction for every held-out point."""
    errors = []
    o = profile.compute.op_overhead_s
    for g in held.gemms:
        errors.append(_error("gemm", g.quantity, typical_s(g), predict_gemm_s(profile, g)))
    for a in held.attention:
        predicted = predict_attention_s(profile, a)
        errors.append(_error("attention", a.quantity, typical_s(a), predicted))
    for m in held.memory:
        if m.op in EFFICIENCY_OPS:
            predicted = o + m.bytes_moved / memory_bandwidth_Bps(profile, m.bytes_moved)
            errors.append(_error("memory", m.quantity, typical_s(m), predicted))
    for c in held.collectives:
        fit = collective_fit(profile, c.op, c.group_size, c.placement)
        errors.append(
            _error("collective", c.quantity, typical_s(c), collective_time_s(fit, c.size_bytes))
        )
    return errors


def _error(kind: str, quantity: str, measured_s: float, predicted_s: float) -> HeldOutError:
    return HeldOutError(
        kind=kind, quantity=quantity, measured_s=measured_s, predicted_s=predicted_s
    )


def error_summary(errors: Sequence[HeldOutError], tolerance: float = 0.15) -> list[str]:
    """One line per kind: count, median and worst |relative error|, share within
    ``tolerance``."""
    lines = []
    by_kind: dict[str, list[float]] = defaultdict(list)
    for e in errors:
        by_kind[e.kind].append(abs(e.relative_error))
    for kind, errs in sorted(by_kind.items()):
        within = sum(e <= tolerance for e in errs)
        lines.append(
            f"held-out {kind}: {len(errs)} points, median |error| {statistics.median(errs):.1%}, "
            f"worst {max(errs):.1%}, {within}/{len(errs)} within {tolerance:.0%}"
        )
    return lines
