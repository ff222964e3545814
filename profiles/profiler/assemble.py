"""Turn a profiling world's merged records into a `HardwareProfile` with provenance.

Device ceilings: a GPU that matches a stored profile's device (`datasheet_match`) keeps
that profile's datasheet peaks and HBM bandwidth, and its measured efficiencies are
relative to them; any other device (every CPU) gets the best measured GEMM rate per dtype
as its "peak" and the best measured copy rate as ``hbm_GBps``, as the schema prescribes
for measured CPU profiles. The provenance says which, and carries the spread of every
measurement and the held-out errors of every fit (`profiles.profiler.fit`), as a record.

A CPU profile also carries the host section (`HardwareProfile.host`, `host_section`): the
host-cost probes, the memory-bound operators by size, the transcendental element-wise
kernels by size and the collectives within the host by size, each with the statistics of
its samples, which the torch runtime reads; a GPU profile has none (its host runs ahead of
the kernels).
"""

from __future__ import annotations

import datetime
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from profiles.profiler.compute import ComputeResults
from profiles.profiler.device import (
    DeviceInfo,
    collective_library_version,
    infiniband_nics,
    scale_up_GBps,
)
from profiles.profiler.fit import (
    best_gemm_flops,
    fit_attention_curves,
    fit_collective,
    fit_gemm_curve,
    fit_memory,
    fit_memory_curve,
    fit_misaligned_factor,
    op_overhead_s,
    split_attention,
    split_collectives,
    split_gemms,
    split_memory,
)
from profiles.profiler.fit_validation import HeldOut, HeldOutError, error_summary, validate
from profiles.profiler.shapes import SweepPlan
from profiles.profiler.timing import CollectiveTiming, spread, typical_s
from profiles.schema import HardwareProfile
from profiles.schema_device import ComputeProfile, DeviceSpec
from profiles.schema_host import (
    HostCollective,
    HostOverheads,
    HostStream,
    HostTiming,
    HostTranscendental,
)
from profiles.schema_network import CommunicationProfile, Topology
from profiles.schema_provenance import MeasurementSpread, Provenance
from profiles.store import load_profile, stored_profile_names
from specs.model import ModelSpec
from specs.version import paraplan_version

_MODEL_TOKEN = re.compile(r"\b(?:[A-Z]{1,3}\d{2,4}[A-Z]?)\b")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecords:
    """Everything a profiling world measured, merged over the ranks."""

    plan: SweepPlan
    """The points that were planned."""
    compute: ComputeResults
    """Compute timings, samples of every rank pooled."""
    collectives: tuple[CollectiveTiming, ...]
    """Collective timings (each sample the slowest rank's)."""
    device: DeviceInfo
    """Rank 0's device."""
    backend: str
    """``gloo`` or ``nccl``."""
    world_size: int
    """Ranks."""
    local_world_size: int
    """Ranks per node."""
    num_threads: int
    """Intra-op threads per rank."""
    compute_clock: str
    """`wall` or `thread` (CPU time of the rank's thread, `timing.clock_for`)."""


def datasheet_match(device_name: str) -> HardwareProfile | None:
    """The stored profile of the same GPU model (H100, A100, MI300X, ...), if any.

    Match: the first model token of ``device_name`` (letters then digits, e.g. ``H200``)
    appears among the stored device name's tokens, and PCIe parts never match SXM ones
    (their peaks differ). Returns None for CPUs and unknown devices.
    """
    upper = device_name.upper()
    tokens = _MODEL_TOKEN.findall(upper)
    if not tokens:
        return None
    for name in stored_profile_names():
        stored = load_profile(name)
        stored_upper = stored.device.name.upper()
        if tokens[0] in _MODEL_TOKEN.findall(stored_upper) and (
            ("PCIE" in upper) == ("PCIE" in stored_upper)
        ):
            return stored
    return None


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def _profile_name(info: DeviceInfo, world: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", info.name.lower()).strip("-")
    return f"measured-{slug}-{world}x" if info.kind == "cpu" else f"measured-{slug}"


@dataclass(frozen=True, kw_only=True, slots=True)
class _Compute:
    compute: ComputeProfile
    peaks_tflops: dict[str, float]
    hbm_GBps: float
    held: HeldOut
    datasheet: HardwareProfile | None


def _fit_compute(records: RunRecords) -> _Compute:
    c, plan = records.compute, records.plan
    o = op_overhead_s(c.overhead)
    datasheet = datasheet_match(records.device.name) if records.device.kind == "gpu" else None
    measured = best_gemm_flops(c.gemms, o)
    peaks = {d: _sig(f / 1e12) for d, f in measured.items()}
    if datasheet is not None:
        peaks = {d: v for d, v in datasheet.device.peak_tflops.items() if d in measured}
    fit_g, held_g = split_gemms(c.gemms, plan.alignment_elements)
    by_dtype = defaultdict(list)
    for g in fit_g:
        by_dtype[g.dtype].append(g)
    curves = {
        d: fit_gemm_curve(gs, peaks[d] * 1e12, o)
        for d, gs in sorted(by_dtype.items())
        if d in peaks
    }
    fit_a, held_a = split_attention(c.attention)
    attention = tuple(a for a in fit_attention_curves(fit_a, o) if a.dtype in peaks)
    fit_m, held_m = split_memory(c.memory)
    hbm, efficiency = fit_memory(fit_m, o, datasheet.device.hbm_GBps if datasheet else None)
    compute = ComputeProfile(
        gemm_efficiency=curves,
        gemm_alignment_elements=plan.alignment_elements,
        gemm_misaligned_factor=fit_misaligned_factor(c.misaligned, o),
        attention=attention,
        attention_kernel=f"torch {torch.__version__} scaled_dot_product_attention (causal)",
        memory_bandwidth_efficiency=efficiency,
        memory_bandwidth_curve=fit_memory_curve(fit_m, o, hbm),
        op_overhead_s=_sig(o),
    )
    held = HeldOut(
        gemms=tuple(h for h in held_g if h.dtype in curves),
        attention=tuple(a for a in held_a if a.dtype in peaks),
        memory=tuple(held_m),
    )
    return _Compute(
        compute=compute, peaks_tflops=peaks, hbm_GBps=hbm, held=held, datasheet=datasheet
    )


def _fit_communication(records: RunRecords) -> tuple[CommunicationProfile, list]:
    fits, held = [], []
    for _, (fit_points, held_points) in sorted(split_collectives(records.collectives).items()):
        fits.append(fit_collective(fit_points, records.backend))
        held.extend(held_points)
    return CommunicationProfile(backend=records.backend, fits=tuple(fits)), held


def _device_spec(records: RunRecords, fitted: _Compute) -> DeviceSpec:
    info = records.device
    per_device = info.memory_bytes / (records.local_world_size if info.kind == "cpu" else 1)
    return DeviceSpec(
        name=info.name,
        vendor=info.vendor,
        kind="cpu" if info.kind == "cpu" else "gpu",
        peak_tflops=fitted.peaks_tflops,
        memory_gib=_sig(per_device / 2**30, 4),
        hbm_GBps=fitted.hbm_GBps,
        generation=fitted.datasheet.device.generation if fitted.datasheet else "",
    )


def _topology(records: RunRecords) -> Topology:
    """One node of ``local_world_size`` devices sharing one scale-up domain: host memory
    for CPU ranks; for GPUs NVSwitch when NVML reports active NVLinks (the HGX boards
    this targets), else PCIe. NICs from sysfs."""
    info, local = records.device, records.local_world_size
    nics, nic_total_GBps = infiniband_nics()
    fabric = "host_memory"
    if info.kind == "gpu":
        fabric = "nvswitch" if info.nvlink_links else "pcie"
    return Topology(
        gpus_per_node=local,
        scale_up_domain=local,
        scale_up_fabric=fabric,
        scale_up_GBps_per_gpu=scale_up_GBps(info),
        nics_per_node=nics,
        nic_GBps_per_gpu=_sig(nic_total_GBps / local) if nic_total_GBps else None,
    )


def _spreads(records: RunRecords) -> tuple[MeasurementSpread, ...]:
    c = records.compute
    items = [*c.overhead, *c.gemms, *(g for pair in c.misaligned for g in pair)]
    items += [*c.attention, *c.memory, *c.transcendental, *records.collectives]
    seen: dict[str, MeasurementSpread] = {}
    for r in items:
        seen.setdefault(r.quantity, spread(r.quantity, r.times_s))
    return tuple(seen.values())


def _stats(record: Any) -> dict[str, Any]:
    """The statistics of a record's host row: those of its provenance spread
    (`MeasurementSpread.host_stats`)."""
    return spread(record.quantity, record.times_s).host_stats()


def host_section(records: RunRecords) -> HostOverheads:
    """The host section of a CPU profile from its records (module docstring): every
    host-cost probe by name, every memory-bound operator by (op, dtype, bytes), every
    transcendental kernel by (op, elements) and every collective within one host by (op,
    group size, bytes); a point recorded twice keeps its first record, as the provenance
    does (`_spreads`)."""
    c = records.compute
    timings: dict[str, HostTiming] = {}
    for r in c.overhead:
        timings.setdefault(r.op, HostTiming(name=r.op, **_stats(r)))
    streams: dict[tuple[str, str, int], HostStream] = {}
    for m in c.memory:
        row = HostStream(op=m.op, dtype=m.dtype, bytes_moved=m.bytes_moved, **_stats(m))
        streams.setdefault((m.op, m.dtype, m.bytes_moved), row)
    kernels: dict[tuple[str, int], HostTranscendental] = {}
    for k in c.transcendental:
        kernels.setdefault(
            (k.op, k.elements), HostTranscendental(op=k.op, elements=k.elements, **_stats(k))
        )
    calls: dict[tuple[str, int, int], HostCollective] = {}
    for t in records.collectives:
        if t.placement == "intra":
            row = HostCollective(
                op=t.op, group_size=t.group_size, size_bytes=t.size_bytes, **_stats(t)
            )
            calls.setdefault((t.op, t.group_size, t.size_bytes), row)
    return HostOverheads(
        timings=tuple(timings.values()),
        streams=tuple(streams.values()),
        collective_calls=tuple(calls.values()),
        transcendental=tuple(kernels.values()),
    )


def _notes(
    records: RunRecords, fitted: _Compute, model: ModelSpec | None, summary: list[str]
) -> tuple[str, ...]:
    c, info = records.compute, records.device
    overheads = {r.op: sorted(r.times_s)[len(r.times_s) // 2] for r in c.overhead}
    notes = [
        f"{records.world_size} ranks ({records.backend}, {records.local_world_size} per node), "
        f"{records.num_threads} intra-op threads each; every rank timed every compute point "
        "at the same time, as training ranks compute, and samples were pooled over ranks; "
        + (
            "compute timings are CPU time of each rank's thread (one core per rank), so "
            "other processes on the host did not inflate them; collectives are wall time."
            if records.compute_clock == "thread"
            else "all timings are wall time."
        ),
        "Time model of the fits: t = op_overhead_s + work / rate for GEMMs (2mnk / (peak x "
        "gemm_efficiency)), attention (causal FLOPs / attention throughput) and memory-bound "
        "operators (bytes / (hbm_GBps x the efficiency of memory_bandwidth_curve at that size)); "
        "collectives t = "
        "latency_s + size x bus_factor / busbw_GBps.",
        "op_overhead_s is the dispatch of a tiny x + y"
        + (
            f"; under autograd an operator costs {overheads['autograd_forward']:.3g} s in "
            f"forward and {overheads['autograd_backward']:.3g} s per operator in backward; "
            "the host section holds every host-cost probe the torch runtime reads."
            if "autograd_forward" in overheads and "autograd_backward" in overheads
            else "; host-cost probes run on CPU ranks only (no host section)."
        ),
        "Collectives: every disjoint group of a size ran at once (as all TP or DP groups of "
        "a step do); each sample is the slowest rank's; send_recv is half a ping-pong.",
        *summary,
    ]
    notes += _composite_notes(c, fitted)
    if fitted.datasheet is not None:
        notes.append(
            f"peak_tflops and hbm_GBps are the datasheet figures of stored profile "
            f"{fitted.datasheet.name!r}; efficiencies are measured against them."
        )
    else:
        notes.append(
            "peak_tflops is the best measured GEMM rate per dtype (median samples, net of "
            "op_overhead_s), not a datasheet figure; gemm_efficiency is relative to it. "
            "hbm_GBps is the best measured copy rate (dst.copy_(src))."
        )
    if info.kind == "cpu" and "bf16" in fitted.peaks_tflops:
        notes.append(
            "bf16 is real bf16 math on this CPU; the executor runs CPU jobs in fp32, so "
            "predict CPU runs with the fp32 curves."
        )
    if model is not None:
        notes.append(f"GEMM sweep includes the per-rank GEMMs of model {model.name!r}.")
    if c.skipped:
        notes.append(f"{len(c.skipped)} points skipped: " + "; ".join(c.skipped[:8]))
    notes += [f"{k}: {v}" for k, v in sorted(info.facts.items())]
    return tuple(notes)


def _composite_notes(c: ComputeResults, fitted: _Compute) -> list[str]:
    """How far the RMSNorm-like and AdamW chains are from one streaming kernel."""
    o = fitted.compute.op_overhead_s
    bandwidth_Bps = fitted.hbm_GBps * 1e9 * fitted.compute.memory_bandwidth_efficiency
    notes = [
        "memory_bandwidth_efficiency describes one streaming elementwise kernel (x + y) "
        "against the best copy; multi-kernel operators cost more:"
    ]
    for op in ("rmsnorm", "adamw"):
        records = [r for r in c.memory if r.op == op]
        if not records:
            continue
        r = max(records, key=lambda r: r.bytes_moved)
        t = typical_s(r)
        notes.append(
            f"{op}: {r.bytes_moved / t / 1e9:.3g} GB/s of nominal bytes at {r.bytes_moved} B, "
            f"{t / (o + r.bytes_moved / bandwidth_Bps):.3g}x one streaming kernel of those bytes"
        )
    return notes if len(notes) > 1 else []


def fit_profile(
    records: RunRecords, *, model: ModelSpec | None, name: str | None, command: str
) -> tuple[HardwareProfile, list[HeldOutError]]:
    """Fit every curve, predict every held-out point through `profiles.lookup`, and
    build the profile (the held-out summary goes into its provenance notes)."""
    fitted = _fit_compute(records)
    communication, held_collectives = _fit_communication(records)
    draft = HardwareProfile(
        name=name or _profile_name(records.device, records.world_size),
        device=_device_spec(records, fitted),
        compute=fitted.compute,
        communication=communication,
        topology=_topology(records),
        provenance=Provenance(method="measured", date="2000-01-01", command=command),
    )
    held = HeldOut(
        gemms=fitted.held.gemms,
        attention=fitted.held.attention,
        memory=fitted.held.memory,
        collectives=tuple(held_collectives),
    )
    errors = validate(draft, held)
    summary = error_summary(errors)
    info = records.device
    provenance = Provenance(
        method="measured",
        date=datetime.date.today().isoformat(),
        command=command,
        tool_version=paraplan_version(),
        torch_version=torch.__version__,
        collective_library_version=collective_library_version(records.backend),
        driver_version=info.driver_version,
        host=f"{info.host} ({info.name}, {info.num_cpus} cores)",
        notes=_notes(records, fitted, model, summary),
        spread=_spreads(records),
    )
    profile = HardwareProfile(
        name=draft.name,
        device=draft.device,
        compute=draft.compute,
        communication=draft.communication,
        topology=draft.topology,
        provenance=provenance,
        host=host_section(records) if draft.device.kind == "cpu" else None,
    )
    return profile, errors
