"""A synthetic CPU profile for the executor-model tests, with round numbers.

Rates (so tests can compute expected seconds by hand): fp32 GEMMs at 0.1 TFLOP/s x the
curve (0.5 below 1 MFLOP... see ``gemm_efficiency``), memory 50 GB/s (100 GB/s x 0.5),
dispatch 2 µs; host timings: autograd forward 5 µs per operator, backward 8 µs per node and
100 µs per call, DTensor 40/40/100/20/250/600 µs, FSDP2 gather 400 µs and reduce 300 µs
per module, 700 µs per DTensor AdamW tensor, checkpoints 15 µs per saved tensor and 50 µs
per call, AdamW points on a line of 80 µs per tensor
(16 tensors each) plus 10 GB/s. No RMSNorm points: element-wise kernels cost one dispatch
and stream at 50 GB/s. Host figures are written as the profiler's spreads (names of
`profiles.profiler.timing`) and carried into the typed host section by
`profiles.legacy.host_from_spread`; the spreads stay in the provenance as its record.
"""

from __future__ import annotations

from profiles.legacy import host_from_spread
from profiles.lookup import collective_time_s
from profiles.schema import HardwareProfile
from profiles.schema_device import (
    AttentionCurve,
    AttentionPoint,
    ComputeProfile,
    DeviceSpec,
    EfficiencyPoint,
)
from profiles.schema_network import CollectiveFit, CommunicationProfile, Topology
from profiles.schema_provenance import MeasurementSpread, Provenance

OVERHEADS_S = {
    "autograd_forward": 5e-6,
    "autograd_backward": 14e-6,
    "autograd_backward_node": 8e-6,
    "autograd_backward_call": 100e-6,
    "dtensor_forward": 40e-6,
    "dtensor_backward": 40e-6,
    "dtensor_from_local": 100e-6,
    "dtensor_to_local": 20e-6,
    "dtensor_linear_forward": 250e-6,
    "dtensor_linear_backward": 600e-6,
    "checkpoint_tensor": 15e-6,
    "checkpoint_call": 50e-6,
    "fsdp_gather": 400e-6,
    "fsdp_reduce": 300e-6,
    "fsdp_gather_tensor": 30e-6,
    "fsdp_reduce_tensor": 20e-6,
    "dtensor_adamw": 700e-6,
}
"""Host timings (mean seconds) by probe name in `cpu_profile`."""
ADAMW_TENSOR_S = 80e-6
ADAMW_BPS = 10e9


def _spread(quantity: str, mean: float) -> MeasurementSpread:
    return MeasurementSpread(
        quantity=quantity, unit="s", num_samples=10, mean=mean, stdev=0.0, min=mean, max=mean
    )


def _spreads(overheads: dict[str, float], adamw: bool) -> tuple[MeasurementSpread, ...]:
    out = [_spread(f"op_overhead.{k}", v) for k, v in overheads.items()]
    if adamw:
        for nbytes in (1_835_008, 7_340_032, 29_360_128):
            out.append(
                _spread(f"memory.adamw.fp32.{nbytes}B", 16 * ADAMW_TENSOR_S + nbytes / ADAMW_BPS)
            )
    return tuple(out)


def _fits() -> tuple[CollectiveFit, ...]:
    fits = []
    for n in (2, 4):
        for op, lat, bw in (
            ("all_reduce", 400e-6, 1.5),
            ("all_gather", 350e-6, 0.8),
            ("reduce_scatter", 450e-6, 0.4),
            ("all_to_all", 300e-6, 1.0),
        ):
            fits.append(
                CollectiveFit(
                    op=op,
                    group_size=n,
                    placement="intra",
                    latency_s=lat,
                    busbw_GBps=bw,
                    algorithm="gloo",
                )
            )
    fits.append(
        CollectiveFit(
            op="send_recv",
            group_size=2,
            placement="intra",
            latency_s=120e-6,
            busbw_GBps=1.8,
            algorithm="gloo",
        )
    )
    return tuple(fits)


def _attention() -> tuple[AttentionCurve, ...]:
    curves = []
    for direction, tflops in (("forward", 0.02), ("backward", 0.02)):
        for dtype in ("fp32", "bf16"):
            rate = tflops if dtype == "fp32" else tflops / 5
            curves.append(
                AttentionCurve(
                    direction=direction,
                    dtype=dtype,
                    head_dim=32,
                    points=(
                        AttentionPoint(seq_len=64, tflops=rate),
                        AttentionPoint(seq_len=1024, tflops=rate),
                    ),
                )
            )
    return tuple(curves)


def spread(quantity: str, mean: float, minimum: float | None = None) -> MeasurementSpread:
    """A spread entry of ``mean`` seconds (and ``minimum``, default the mean)."""
    low = mean if minimum is None else minimum
    return MeasurementSpread(
        quantity=quantity, unit="s", num_samples=10, mean=mean, stdev=0.0, min=low, max=mean
    )


def spread_over_fit(op: str, size_bytes: int, excess_s: float, group: int = 2):
    """A collective's spread whose mean lies ``excess_s`` above the fixture's intra-node fit
    at that size (what `costmodel.runtimes.torch.host_rates` reads as the call's excess)."""
    fit = next(f for f in _fits() if f.op == op and f.group_size == group)
    mean = collective_time_s(fit, size_bytes) + excess_s
    return spread(f"{op}.intra.{group}.{size_bytes}B", mean, minimum=mean / 4)


def cpu_profile(
    *,
    overheads: dict[str, float] | None = None,
    adamw: bool = True,
    extra: tuple[MeasurementSpread, ...] = (),
    name: str = "cpu-test",
) -> HardwareProfile:
    """A measured-looking 4-process gloo CPU profile (rates in the module doc), with
    ``extra`` spread entries appended (and in the host section)."""
    spreads = _spreads(OVERHEADS_S if overheads is None else overheads, adamw) + extra
    flat = (
        EfficiencyPoint(gflop=0.001, efficiency=0.5),
        EfficiencyPoint(gflop=1.0, efficiency=0.5),
    )
    return HardwareProfile(
        name=name,
        device=DeviceSpec(
            name="Test CPU",
            vendor="AMD",
            kind="cpu",
            peak_tflops={"fp32": 0.1, "bf16": 0.01},
            memory_gib=16.0,
            hbm_GBps=100.0,
        ),
        compute=ComputeProfile(
            gemm_efficiency={"fp32": flat, "bf16": flat},
            gemm_alignment_elements=8,
            gemm_misaligned_factor=1.0,
            attention=_attention(),
            attention_kernel="torch sdpa (test)",
            memory_bandwidth_efficiency=0.5,
            op_overhead_s=2e-6,
        ),
        communication=CommunicationProfile(backend="gloo", fits=_fits()),
        topology=Topology(
            gpus_per_node=4, scale_up_domain=4, scale_up_fabric="host_memory", nics_per_node=0
        ),
        provenance=Provenance(
            method="measured",
            date="2026-11-29",
            command="paraplan profile --quick --nproc 4",
            spread=spreads,
        ),
        host=host_from_spread(spreads),
    )


def in_context_spreads(
    extra: str, layer: str, levels: dict[str, tuple[tuple[float, float], ...]]
) -> tuple[MeasurementSpread, ...]:
    """Spreads of an in-context probe (`costmodel.runtimes.torch.in_context_rates`): per pass,
    (host, extra) at each level in turn, as ``op_overhead.<layer>_<pass>_w<level>`` and
    ``op_overhead.<extra>_<pass>_w<level>``."""
    out = []
    for p, points in levels.items():
        for level, (host, value) in enumerate(points):
            out.append(spread(f"op_overhead.{layer}_{p}_w{level}", host))
            out.append(spread(f"op_overhead.{extra}_{p}_w{level}", value))
    return tuple(out)
