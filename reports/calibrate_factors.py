"""Calibration factors applied to a `HardwareProfile` (`reports.calibrate`): the stage-2
`Factors` of the Megatron-LM model's fit, and the executor model's one time scale
(`time_scaled`, `reports.calibrate_time`).

Scales that would push an efficiency above 1 move the excess into the device peak
(`peak_tflops` or `hbm_GBps`), keeping peak x efficiency, and thus every predicted time,
the fitted one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from profiles.schema import HardwareProfile
from profiles.schema_device import AttentionPoint, EfficiencyPoint
from profiles.schema_network import CollectiveFit
from specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class Factors:
    """Stage-2 factors relative to the base profile (1.0 = unchanged)."""

    gemm_scale: float = 1.0
    """Multiplier on the GEMM efficiency curve of the runs' GEMM dtypes."""
    attention_scale: float = 1.0
    """Multiplier on the attention throughput curves of the runs' activation dtypes."""
    memory_bandwidth_scale: float = 1.0
    """Multiplier on `memory_bandwidth_efficiency`."""
    op_overhead_s: float
    """The op overhead, seconds (absolute, not a scale)."""
    p2p_time_scale: float = 1.0
    """Multiplier on the time of every ``send_recv`` fit (latency x k, busbw / k)."""


def _scaled_gemm(
    curves: dict[str, tuple[EfficiencyPoint, ...]],
    peaks: dict[str, float],
    dtype: str,
    scale: float,
) -> None:
    """Scale ``dtype``'s GEMM curve in place, moving efficiency above 1 into its peak."""
    if dtype not in curves or dtype not in peaks:
        return
    shift = max(max(p.efficiency for p in curves[dtype]) * scale, 1.0)
    curves[dtype] = tuple(
        EfficiencyPoint(gflop=p.gflop, efficiency=min(1.0, p.efficiency * scale / shift))
        for p in curves[dtype]
    )
    peaks[dtype] *= shift


def apply_factors(
    profile: HardwareProfile,
    factors: Factors,
    *,
    gemm_dtypes: Iterable[str],
    attention_dtypes: Iterable[str],
) -> HardwareProfile:
    """``profile`` with ``factors`` applied (module docstring for the peak rule)."""
    compute, device = profile.compute, profile.device
    curves, peaks = dict(compute.gemm_efficiency), dict(device.peak_tflops)
    for dtype in set(gemm_dtypes):
        _scaled_gemm(curves, peaks, dtype, factors.gemm_scale)
    att_dtypes = set(attention_dtypes)
    attention = tuple(
        dataclasses.replace(
            c,
            points=tuple(
                AttentionPoint(seq_len=p.seq_len, tflops=p.tflops * factors.attention_scale)
                for p in c.points
            ),
        )
        if c.dtype in att_dtypes
        else c
        for c in compute.attention
    )
    scale = factors.memory_bandwidth_scale
    efficiencies = [
        compute.memory_bandwidth_efficiency,
        *(p.efficiency for p in compute.memory_bandwidth_curve),
    ]
    hbm_gain = max([1.0, *(e * scale for e in efficiencies)])
    fits = tuple(
        _slower_fit(f, factors.p2p_time_scale) if f.op == "send_recv" else f
        for f in profile.communication.fits
    )
    return dataclasses.replace(
        profile,
        device=dataclasses.replace(device, peak_tflops=peaks, hbm_GBps=device.hbm_GBps * hbm_gain),
        compute=dataclasses.replace(
            compute,
            gemm_efficiency=curves,
            attention=attention,
            memory_bandwidth_efficiency=compute.memory_bandwidth_efficiency * scale / hbm_gain,
            memory_bandwidth_curve=tuple(
                dataclasses.replace(p, efficiency=p.efficiency * scale / hbm_gain)
                for p in compute.memory_bandwidth_curve
            ),
            op_overhead_s=factors.op_overhead_s,
        ),
        communication=dataclasses.replace(profile.communication, fits=fits),
    )


def _with_host(profile: HardwareProfile, field: str, scale: float) -> HardwareProfile:
    if profile.host is None:
        raise SpecError(
            f"profile {profile.name!r} has no host section, so its {field} cannot be set; "
            "only CPU profiles carry one: calibrate the torch runtime on a CPU profile"
        )
    host = dataclasses.replace(profile.host, **{field: scale})
    return dataclasses.replace(profile, host=host)


def with_backward_scale(profile: HardwareProfile, scale: float) -> HardwareProfile:
    """``profile`` with the host section's `HostOverheads.backward_scale` set to ``scale``;
    `SpecError` for a profile without a host section (a GPU's)."""
    return _with_host(profile, "backward_scale", scale)


def with_layer_collective_scale(profile: HardwareProfile, scale: float) -> HardwareProfile:
    """``profile`` with the host section's `HostOverheads.layer_collective_scale` set to
    ``scale``; `SpecError` for a profile without a host section (a GPU's)."""
    return _with_host(profile, "layer_collective_scale", scale)


def time_scaled(profile: HardwareProfile, k: float) -> HardwareProfile:
    """``profile`` with every compute time multiplied by ``k`` (`reports.calibrate_time`):
    the factors of `apply_factors` for every dtype (GEMM and attention rates and
    memory-bound bandwidth over k, the op overhead and with it every host rate of
    `costmodel.runtimes.torch.host_rates` times k, DTensor's redistribution extra among them). The
    collectives keep their measured costs: the α-β fits, the typical excess of a waited-for
    call and the functional calls' extra."""
    compute = profile.compute
    return apply_factors(
        profile,
        time_factors(profile, k),
        gemm_dtypes=compute.gemm_efficiency,
        attention_dtypes={c.dtype for c in compute.attention},
    )


def time_factors(profile: HardwareProfile, k: float) -> Factors:
    """The `Factors` of `time_scaled`."""
    return Factors(
        gemm_scale=1 / k,
        attention_scale=1 / k,
        memory_bandwidth_scale=1 / k,
        op_overhead_s=profile.compute.op_overhead_s * k,
    )


def _slower_fit(fit: CollectiveFit, k: float) -> CollectiveFit:
    """``fit`` k times slower: latency and measured points x k, bus bandwidth / k."""
    return dataclasses.replace(
        fit,
        latency_s=fit.latency_s * k,
        busbw_GBps=fit.busbw_GBps / k,
        points=tuple(dataclasses.replace(p, seconds=p.seconds * k) for p in fit.points),
    )
