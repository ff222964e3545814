"""The profile readings behind `costmodel.runtimes.torch.host_rates.base_host_rates`: the
fallback constants, each host timing's figure relative to the profile's dispatch, and the
least-squares lines through the host section's streams (AdamW, RMSNorm, transposes, the
streaming ``x + y``) and collective calls. Sources and fallbacks of every figure are in
the `costmodel.runtimes.torch.host_rates` module doc.
"""

from __future__ import annotations

import statistics

from profiles.lookup import collective_time_s, memory_bandwidth_Bps
from profiles.schema import HardwareProfile
from profiles.schema_host import HostOverheads

ADAMW_SWEEP_TENSORS = 16
"""Parameter tensors of each AdamW point of the profile (`profiles.profiler.compute`'s
``ADAMW_TENSORS``)."""
ADAMW_BYTES_PER_PARAM = 28
"""AdamW bytes per fp32 parameter: read parameter, gradient, m and v, write parameter, m, v."""
ADAMW_OPS_PER_TENSOR = 9
"""Operators `torch.optim.AdamW`'s single-tensor path runs per parameter without weight
decay (torch 2.13 ``_single_tensor_adamw``): step += 1, m.lerp_, v.mul_, v.addcmul_,
step.item, v.sqrt, div, add_(eps), param.addcdiv_."""
FSDP_FALLBACK_DISPATCHES = 8
"""Dispatches of one FSDP2 gather or reduce when the profile has no FSDP2 point
(copy-in, the collective, its wait, copy-out, stream and state handling)."""
P2P_POST_FALLBACK_DISPATCHES = 3
"""Dispatches of one pipelining P2P post when the profile has no ``p2p_post`` point (the
``P2POp``, its isend or irecv, and the batch's bookkeeping)."""
FSDP_PROBE_BYTES = 8 * 8 * 4
"""Bytes of the module the profiler's FSDP2 figures gather and reduce (one 8 x 8 fp32
weight, `profiles.profiler.framework.FSDP_PROBE_BYTES`): their collective is already in
``fsdp_gather_s`` and ``fsdp_reduce_s``."""
FUNCTIONAL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collectives whose functional form (``torch.distributed._functional_collectives``) the
profiler times against the plain call (`profiles.profiler.collective_forms`)."""
REDISTRIBUTION_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
"""Collectives the profiler times as DTensor redistributions against the functional call
(`profiles.profiler.collective_forms`)."""
PAIRED_TIMINGS = ("functional_", "redistribute_", "autograd_all_to_all")
"""Host timings (by name prefix) of paired differences
(`profiles.profiler.compute.Runner.paired`), read by their median (`host_rates` module doc)."""
DTENSOR_ADAMW_OPS = 7
"""AdamW operators per DTensor parameter that go through DTensor dispatch (all but the step
counter and its ``item``), for the fallback."""
RMSNORM_KERNELS = 6
"""Kernels of `executor.model.RMSNorm` (pow, mean, add, rsqrt, two products)."""
RMSNORM_BYTES_RATIO = 7 / 2
"""Bytes the cost model counts for an RMSNorm (7·N·e) over the profile's nominal 2·N·e."""
RMSNORM_FIT_MAX_BYTES = 4 * 2**20
"""Largest RMSNorm point of the fit: the executor's small models touch activations of
64 KiB to a few MiB; beyond the caches the time per byte grows."""
DTENSOR_FALLBACK_RATIOS = {
    "dtensor_forward": 8.0,
    "dtensor_backward": 15.0,
    "dtensor_from_local": 20.0,
    "dtensor_to_local": 5.0,
    "dtensor_linear_forward": 45.0,
    "dtensor_linear_backward": 150.0,
}
"""DTensor costs over the autograd forward per-operator cost, as
`profiles.profiler.framework` measures them on a CPU host (round numbers of its medians);
the fallback for a host section without the ``dtensor_*`` timings."""


def host_values(host: HostOverheads) -> dict[str, float]:
    """Every host timing's figure by name, seconds: the median for `PAIRED_TIMINGS` where
    recorded, else the mean (`host_rates` module doc)."""
    values = {}
    for t in host.timings:
        paired = t.median_s is not None and t.name.startswith(PAIRED_TIMINGS)
        values[t.name] = t.median_s if paired and t.median_s is not None else t.mean_s
    return values


def adamw_fit(
    profile: HardwareProfile, host: HostOverheads, dispatch_s: float
) -> tuple[float, float]:
    """(seconds per tensor, bytes per second) of the AdamW points (`host_rates` module doc)."""
    fit = _line(_sized_points(host, "adamw", float("inf")))
    if fit is None:
        return ADAMW_OPS_PER_TENSOR * dispatch_s, memory_bandwidth_Bps(profile)
    intercept, slope = fit
    return intercept / ADAMW_SWEEP_TENSORS, 1.0 / slope


def _line(
    points: list[tuple[float, float]], *, positive_intercept: bool = True
) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) through (x, y) points; None when degenerate (fewer
    than two points, a non-positive slope, or with ``positive_intercept`` a non-positive
    intercept)."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    intercept = my - slope * mx
    if slope <= 0 or (positive_intercept and intercept <= 0):
        return None
    return intercept, slope


def _sized_points(host: HostOverheads, op: str, max_bytes: float) -> list[tuple[float, float]]:
    """(bytes, mean seconds) of the host section's fp32 ``op`` streams up to ``max_bytes``."""
    return [
        (float(s.bytes_moved), s.mean_s)
        for s in host.streams
        if s.op == op and s.dtype == "fp32" and s.bytes_moved <= max_bytes
    ]


def byte_rate_scale(profile: HardwareProfile, host: HostOverheads, dispatch_s: float) -> float:
    """The profile's memory-bound bandwidth over the streaming rate of its own ``x + y``
    points (1 without them): carries a calibrated bandwidth to the other byte rates. The
    rate is the profiler's own estimator (`profiles.profiler.fit.fit_memory`: relative least
    squares of t = overhead + bytes·c) on the streams' means."""
    points = _sized_points(host, "add", float("inf"))
    num = sum(b * (t - dispatch_s) / t**2 for b, t in points)
    den = sum((b / t) ** 2 for b, t in points)
    if not points or num <= 0:
        return 1.0
    return memory_bandwidth_Bps(profile) * num / den


def elementwise_fit(
    profile: HardwareProfile, host: HostOverheads, scale: float, rate: float
) -> tuple[float, float]:
    """(seconds per kernel, bytes per second) of the RMSNorm fit (`host_rates` module doc). A
    line with a negative intercept (points convex over the fit's range: the time per byte
    grows past the per-core cache) keeps its slope, the mean cost per byte over the
    executor's sizes, and no cost per kernel (the caller prices a kernel at one dispatch at
    least)."""
    fit = _line(_sized_points(host, "rmsnorm", RMSNORM_FIT_MAX_BYTES), positive_intercept=False)
    if fit is None:
        return profile.compute.op_overhead_s, memory_bandwidth_Bps(profile)
    intercept, slope = fit
    return max(intercept, 0.0) * scale / RMSNORM_KERNELS, rate * RMSNORM_BYTES_RATIO / slope


def transpose_rate(host: HostOverheads, rate: float, fallback_Bps: float) -> float:
    """Bytes per second of the transposing copies (`host_rates` module doc)."""
    fit = _line(_sized_points(host, "transpose", float("inf")), positive_intercept=False)
    return rate / fit[1] if fit is not None else fallback_Bps


def collective_excess_by_size(
    profile: HardwareProfile, host: HostOverheads
) -> tuple[tuple[str, int, float], ...]:
    """Per (op, group size), the median over the host section's message sizes of the mean
    less the profile's fit at that size (`host_rates` module doc)."""
    fits = {(f.op, f.group_size): f for f in profile.communication.fits if f.placement == "intra"}
    excess: dict[tuple[str, int], list[float]] = {}
    for call in host.collective_calls:
        key = (call.op, call.group_size)
        fit = fits.get(key)
        base = collective_time_s(fit, call.size_bytes) if fit else call.min_s
        excess.setdefault(key, []).append(max(call.mean_s - base, 0.0))
    return tuple((op, n, statistics.median(v)) for (op, n), v in sorted(excess.items()))


def host_figures(host: HostOverheads, dispatch_s: float) -> tuple[dict[str, float], float]:
    """(host timings' figures by name, the factor that brings them to the profile's
    dispatch cost: ``dispatch_s`` over the plain ``add`` timing, 1 without it)."""
    values = host_values(host)
    plain = values.get("add")
    return values, dispatch_s / plain if plain else 1.0


def redistribute_extra_by_op(
    means: dict[str, float], scale: float, counted_s: float
) -> tuple[tuple[str, float], ...]:
    """Per op, the measured redistribution extra (relative to the dispatch, as DTensor's
    other host costs) less ``counted_s`` (`host_rates` module doc); ops the profile did not
    time are left out."""
    return tuple(
        (op, max(means[f"redistribute_{op}"] * scale - counted_s, 0.0))
        for op in REDISTRIBUTION_COLLECTIVES
        if f"redistribute_{op}" in means
    )
