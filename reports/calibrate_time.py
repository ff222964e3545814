"""Calibration of the executor model: one host time scale (`reports.calibrate` for it).

On a CPU every part of a step the executor model prices (operator dispatch, autograd and
DTensor bookkeeping, kernels, copies, gloo calls) runs on the rank's own core, so when the
host runs slower or faster than when it was profiled (a shared virtual machine drifts by
tens of percent within an hour; two ranks on two cores also wait for each other's gloo
threads) every part changes together. The executor model's calibration therefore fits one
factor k on the runs' median iteration times, not the five separate factors of the
Megatron-LM model: those are not identifiable from a few small runs, and the measured
phases of a profiled CPU step carry the profiler's own per-operator cost.

`time_scaled` multiplies every time of a profile by k: the op overhead (every host rate of
`costmodel.host_rates` is read relative to it), GEMM and attention rates and memory-bound
bandwidth (over k, a fitted efficiency above 1 moving its excess into the peak as in
`reports.calibrate.apply_factors`), and every collective fit (latency and measured points
times k, bus bandwidth over k). `fit_time_scale` minimises the sum of squared log-ratios
of predicted to measured iteration time over the runs (scipy ``minimize_scalar``, bounded
to `SCALE_BOUNDS`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from scipy.optimize import minimize_scalar

from profiles.schema import (
    AttentionPoint,
    BandwidthPoint,
    CollectiveFit,
    EfficiencyPoint,
    HardwareProfile,
    TimePoint,
)

SCALE_BOUNDS = (0.2, 5.0)
"""Range of the fitted time scale."""


def _scaled_fit(fit: CollectiveFit, k: float) -> CollectiveFit:
    return dataclasses.replace(
        fit,
        latency_s=fit.latency_s * k,
        busbw_GBps=fit.busbw_GBps / k,
        points=tuple(TimePoint(size_bytes=p.size_bytes, seconds=p.seconds * k) for p in fit.points),
    )


def _gain(efficiencies: Sequence[float], k: float) -> float:
    """The peak multiplier that keeps every efficiency / k within 1."""
    return max([1.0, *(e / k for e in efficiencies)])


def time_scaled(profile: HardwareProfile, k: float) -> HardwareProfile:
    """``profile`` with every time multiplied by ``k`` (module doc); the typical excess of
    waited-for collectives (read from the spreads, `costmodel.host_rates`) stays."""
    compute, device = profile.compute, profile.device
    gemm_gain = _gain([p.efficiency for pts in compute.gemm_efficiency.values() for p in pts], k)
    curves = {
        dtype: tuple(
            EfficiencyPoint(gflop=p.gflop, efficiency=p.efficiency / k / gemm_gain) for p in pts
        )
        for dtype, pts in compute.gemm_efficiency.items()
    }
    attention = tuple(
        dataclasses.replace(
            c,
            points=tuple(AttentionPoint(seq_len=p.seq_len, tflops=p.tflops / k) for p in c.points),
        )
        for c in compute.attention
    )
    flat = compute.memory_bandwidth_efficiency
    hbm_gain = _gain([flat, *(p.efficiency for p in compute.memory_bandwidth_curve)], k)
    curve = tuple(
        BandwidthPoint(bytes_moved=p.bytes_moved, efficiency=p.efficiency / k / hbm_gain)
        for p in compute.memory_bandwidth_curve
    )
    return dataclasses.replace(
        profile,
        device=dataclasses.replace(
            device,
            peak_tflops={d: t * gemm_gain for d, t in device.peak_tflops.items()},
            hbm_GBps=device.hbm_GBps * hbm_gain,
        ),
        compute=dataclasses.replace(
            compute,
            gemm_efficiency=curves,
            attention=attention,
            memory_bandwidth_efficiency=flat / k / hbm_gain,
            memory_bandwidth_curve=curve,
            op_overhead_s=compute.op_overhead_s * k,
        ),
        communication=dataclasses.replace(
            profile.communication,
            fits=tuple(_scaled_fit(f, k) for f in profile.communication.fits),
        ),
    )


def fit_time_scale(
    profile: HardwareProfile,
    measured_s: Sequence[float],
    predict_s: Callable[[HardwareProfile], Sequence[float]],
) -> float:
    """The k that best maps ``predict_s(time_scaled(profile, k))`` onto ``measured_s``
    (least squares of log-ratios)."""

    def loss(log_k: float) -> float:
        predicted = predict_s(time_scaled(profile, math.exp(log_k)))
        return sum(math.log(p / m) ** 2 for p, m in zip(predicted, measured_s, strict=True))

    bounds = (math.log(SCALE_BOUNDS[0]), math.log(SCALE_BOUNDS[1]))
    result = minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": 1e-4})
    return float(math.exp(result.x))
