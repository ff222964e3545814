"""The profiler's fits and their held-out check on synthetic data with known answers (no
ranks); its timing and sweep plans: `test_profiler_sweeps.py`; its world and devices:
`test_profiler_world.py`."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.lookup import bus_factor, collective_time_s
from profiles.profiler.fit import (
    fit_attention_curves,
    fit_collective,
    fit_gemm_curve,
    fit_memory,
    fit_memory_curve,
    fit_misaligned_factor,
    split_collectives,
    split_gemms,
    split_memory,
)
from profiles.profiler.fit_validation import HeldOut, validate
from profiles.profiler.timing import (
    AttentionTiming,
    CollectiveTiming,
    GemmTiming,
    MemoryTiming,
)
from profiles.schema import HardwareProfile
from profiles.schema_device import ComputeProfile, DeviceSpec
from profiles.schema_network import CommunicationProfile, Topology
from profiles.schema_provenance import Provenance

OVERHEAD_S = 3e-6
PEAK_FLOPS = 80e9


def gemm(m: int, n: int, k: int, efficiency: float, dtype: str = "fp32") -> GemmTiming:
    """A GEMM timed exactly as the time model says: o + 2mnk / (peak · efficiency)."""
    t = OVERHEAD_S + 2.0 * m * n * k / (PEAK_FLOPS * efficiency)
    return GemmTiming(dtype=dtype, m=m, n=n, k=k, pattern="linear", times_s=(t, t * 1.01, t))


def collective(
    op: str, size: int, alpha_s: float, busbw_GBps: float, g: int = 2
) -> CollectiveTiming:
    t = alpha_s + size * bus_factor(op, g) / (busbw_GBps * 1e9)
    return CollectiveTiming(
        op=op,
        group_size=g,
        placement="intra",
        size_bytes=size,
        concurrent_groups=1,
        times_s=(t * 1.3, t, t * 1.1),
    )


def synthetic_profile(compute: ComputeProfile, fits: tuple) -> HardwareProfile:
    return HardwareProfile(
        name="synthetic",
        device=DeviceSpec(
            name="test CPU",
            vendor="test",
            kind="cpu",
            peak_tflops={"fp32": PEAK_FLOPS / 1e12},
            memory_gib=1.0,
            hbm_GBps=50.0,
        ),
        compute=compute,
        communication=CommunicationProfile(backend="gloo", fits=fits),
        topology=Topology(
            gpus_per_node=2, scale_up_domain=2, scale_up_fabric="host_memory", nics_per_node=0
        ),
        provenance=Provenance(method="measured", date="2026-11-29", command="test"),
    )


# ---- collectives ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_collective_fit_recovers_known_latency_and_bandwidth(op: str, group_size: int) -> None:
    # Fastest sample of each point lies exactly on t = 350 µs + S·f / 1.2 GB/s.
    records = [collective(op, 2**e, 350e-6, 1.2, group_size) for e in range(10, 25)]
    fit = fit_collective(records, "gloo")
    assert fit.latency_s == pytest.approx(350e-6, rel=1e-3)
    assert fit.busbw_GBps == pytest.approx(1.2, rel=1e-3)
    assert (fit.op, fit.group_size, fit.algorithm) == (op, group_size, "gloo")


def test_collective_points_drop_a_lone_delayed_size_and_keep_a_regime() -> None:
    alpha_s, busbw = 2e-4, 1.5
    sizes = [2**e for e in range(10, 20)]
    slow = {2**13: 4.0}  # one size whose every sample a burst of load delayed
    regime = {2**17: 1.6, 2**18: 1.6, 2**19: 1.6}  # a protocol change from 128 KiB on
    records = [
        dataclasses.replace(
            collective("all_reduce", s, alpha_s, busbw),
            times_s=tuple(
                t * slow.get(s, 1.0) * regime.get(s, 1.0)
                for t in collective("all_reduce", s, alpha_s, busbw).times_s
            ),
        )
        for s in sizes
    ]
    fit = fit_collective(records, "gloo")
    points = {int(p.size_bytes): p.seconds for p in fit.points}
    assert sorted(points) == sizes

    def line_s(size: int) -> float:
        return fit.latency_s + size * bus_factor("all_reduce", 2) / (fit.busbw_GBps * 1e9)

    assert points[2**13] / line_s(2**13) < 1.5  # the lone delayed size is smoothed away
    for s in (2**18, 2**19):  # the regime keeps its level (within the line's drift)
        measured = min(records[sizes.index(s)].times_s)
        assert points[s] == pytest.approx(measured, rel=0.1)


def test_collective_fit_stays_nonnegative_on_data_that_shrinks_with_size() -> None:
    # Unconstrained least squares would give a negative slope (infinite bandwidth).
    records = [
        CollectiveTiming(
            op="all_reduce",
            group_size=2,
            placement="intra",
            size_bytes=s,
            concurrent_groups=1,
            times_s=(t,),
        )
        for s, t in ((1024, 4e-4), (65536, 3.9e-4), (2**20, 3.8e-4))
    ]
    fit = fit_collective(records, "gloo")
    assert fit.latency_s >= 0
    assert 0 < fit.busbw_GBps <= 1e6


def test_collective_split_holds_out_interior_sizes_only() -> None:
    records = [collective("all_reduce", 2**e, 1e-4, 1.0) for e in range(10, 25)]
    ((fit_points, held),) = split_collectives(records).values()
    sizes = sorted(r.size_bytes for r in fit_points)
    assert min(sizes) == 1024 and max(sizes) == 2**24
    assert len(held) == 5 and all(1024 < r.size_bytes < 2**24 for r in held)


# ---- GEMM curve ---------------------------------------------------------------------------


def test_gemm_curve_reproduces_a_monotone_truth() -> None:
    truth = {64: 0.3, 128: 0.5, 256: 0.7, 512: 0.8, 1024: 0.9}
    curve = fit_gemm_curve([gemm(s, s, s, e) for s, e in truth.items()], PEAK_FLOPS, OVERHEAD_S)
    assert [p.efficiency for p in curve] == pytest.approx(list(truth.values()), rel=1e-3)
    assert [p.gflop for p in curve] == pytest.approx([2 * s**3 / 1e9 for s in truth], rel=1e-6)


def test_gemm_curve_is_isotonic_where_measurements_dip() -> None:
    # 0.8 then 0.6: the best monotone fit pools them at their (geometric) mean.
    effs = [0.4, 0.8, 0.6, 0.9]
    curve = fit_gemm_curve(
        [gemm(s, s, s, e) for s, e in zip((64, 128, 256, 512), effs, strict=True)],
        PEAK_FLOPS,
        OVERHEAD_S,
    )
    values = [p.efficiency for p in curve]
    assert values == sorted(values)
    assert values[1] == pytest.approx(values[2]) == pytest.approx(math.sqrt(0.8 * 0.6), rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.05, 1.0), min_size=2, max_size=12))
def test_any_gemm_curve_passes_the_schema_monotonicity_check(effs: list[float]) -> None:
    records = [gemm(32 * (i + 1), 64, 64, e) for i, e in enumerate(effs)]
    curve = fit_gemm_curve(records, PEAK_FLOPS, OVERHEAD_S)
    ComputeProfile(  # raises SpecError if the curve is not monotone
        gemm_efficiency={"fp32": curve},
        gemm_alignment_elements=8,
        gemm_misaligned_factor=1.0,
        memory_bandwidth_efficiency=1.0,
    )


def test_misaligned_factor_is_the_median_efficiency_ratio() -> None:
    pairs = [
        (gemm(s, s, s, 0.8), gemm(s, s + 5, s, 0.8 * r))
        for s, r in ((128, 0.5), (256, 0.7), (512, 0.9))
    ]
    assert fit_misaligned_factor(pairs, OVERHEAD_S) == pytest.approx(0.7, rel=1e-3)
    faster = [(gemm(128, 128, 128, 0.5), gemm(128, 133, 128, 0.9))]
    assert fit_misaligned_factor(faster, OVERHEAD_S) == 1.0  # never above 1 (schema)


def test_gemm_split_keeps_ends_and_holds_out_misaligned_shapes() -> None:
    aligned = [gemm(8 * (i + 1), 64, 64, 0.5) for i in range(9)]
    odd = gemm(60, 61, 64, 0.5)
    fit_points, held = split_gemms([*aligned, odd], granule=8)
    assert odd in held and odd not in fit_points
    assert aligned[0] in fit_points and aligned[-1] in fit_points
    assert len(held) == 3


# ---- attention, memory, validation --------------------------------------------------------


def attention(direction: str, seq: int, tflops: float, d: int = 64) -> AttentionTiming:
    flops = 2.0 * 2 * 4 * seq * seq * d * (2.5 if direction == "backward" else 1.0)
    t = OVERHEAD_S + flops / (tflops * 1e12)
    return AttentionTiming(
        dtype="fp32", direction=direction, batch=2, heads=4, seq_len=seq, head_dim=d, times_s=(t,)
    )


def test_attention_curves_recover_throughput_per_pass_and_head_dim() -> None:
    records = [attention("forward", s, 0.01 * i) for i, s in enumerate((64, 128, 256), 1)]
    records += [attention("backward", 128, 0.05), attention("forward", 128, 0.02, d=32)]
    curves = {(c.direction, c.head_dim): c for c in fit_attention_curves(records, OVERHEAD_S)}
    assert [p.tflops for p in curves[("forward", 64)].points] == pytest.approx([0.01, 0.02, 0.03])
    assert curves[("backward", 64)].points[0].tflops == pytest.approx(0.05)
    assert curves[("forward", 32)].points[0].seq_len == 128


def memory(op: str, nbytes: int, GBps: float) -> MemoryTiming:
    t = OVERHEAD_S + nbytes / (GBps * 1e9)
    return MemoryTiming(op=op, dtype="fp32", bytes_moved=nbytes, times_s=(t,))


def test_memory_fit_takes_the_best_copy_as_peak_and_recovers_the_efficiency() -> None:
    records = [memory("copy", 2**e, 40.0) for e in range(18, 24)] + [memory("copy", 2**24, 50.0)]
    records += [memory(op, 2**e, 30.0) for op in ("add", "rmsnorm", "adamw") for e in range(18, 24)]
    peak, efficiency = fit_memory(records, OVERHEAD_S)
    assert peak == pytest.approx(50.0, rel=1e-4)
    assert efficiency == pytest.approx(30.0 / 50.0, rel=1e-4)
    peak, efficiency = fit_memory(records, OVERHEAD_S, peak_GBps=100.0)  # a datasheet peak
    assert (peak, efficiency) == (100.0, pytest.approx(0.3, rel=1e-4))


def test_memory_curve_follows_a_cache_to_dram_transition() -> None:
    # Cache-resident sizes at 60 GB/s, DRAM-bound ones at 20 GB/s, on a 100 GB/s copy peak;
    # every third size held out, as `split_memory` does.
    def rate(nbytes: int) -> float:
        return 60.0 if nbytes <= 2**23 else 20.0

    sizes = [2**e for e in range(18, 28)]
    records = [memory("copy", 2**24, 100.0)] + [memory("add", n, rate(n)) for n in sizes]
    fit, held = split_memory(records)
    curve = fit_memory_curve(fit, OVERHEAD_S, 100.0)
    assert [p.bytes_moved for p in curve] == sorted(r.bytes_moved for r in fit if r.op == "add")
    for p in curve:  # each fitted size keeps its own rate
        assert p.efficiency == pytest.approx(rate(int(p.bytes_moved)) / 100.0, rel=1e-4)
    _, flat = fit_memory(fit, OVERHEAD_S, 100.0)
    compute = ComputeProfile(
        gemm_efficiency={"fp32": fit_gemm_curve([gemm(64, 64, 64, 0.5)], PEAK_FLOPS, OVERHEAD_S)},
        gemm_alignment_elements=8,
        gemm_misaligned_factor=1.0,
        memory_bandwidth_efficiency=flat,
        memory_bandwidth_curve=curve,
        op_overhead_s=OVERHEAD_S,
    )

    def on_peak(c: ComputeProfile) -> HardwareProfile:
        p = synthetic_profile(c, ())
        return dataclasses.replace(p, device=dataclasses.replace(p.device, hbm_GBps=100.0))

    held_add = HeldOut(memory=tuple(r for r in held if r.op == "add"))
    with_curve = sorted(abs(e.relative_error) for e in validate(on_peak(compute), held_add))
    flat_only = on_peak(dataclasses.replace(compute, memory_bandwidth_curve=()))
    without = validate(flat_only, held_add)
    # The held-out sizes (2^19, 2^22, 2^25 bytes) have fitted neighbours on their own
    # side of the step: exact with the curve; the flat efficiency misses them all.
    assert len(with_curve) == 3 and with_curve[-1] < 1e-3
    assert min(abs(e.relative_error) for e in without) > 0.1


def test_validation_of_exact_synthetic_data_has_no_error() -> None:
    truth = {64: 0.3, 128: 0.5, 256: 0.7, 512: 0.8, 1024: 0.9}
    fitted = [gemm(s, s, s, e) for s, e in truth.items()]
    attn = [attention("forward", s, 0.02) for s in (64, 256)]
    comm = [collective("all_reduce", 2**e, 2e-4, 1.5) for e in (10, 16, 22)]
    compute = ComputeProfile(
        gemm_efficiency={"fp32": fit_gemm_curve(fitted, PEAK_FLOPS, OVERHEAD_S)},
        gemm_alignment_elements=8,
        gemm_misaligned_factor=1.0,
        attention=fit_attention_curves(attn, OVERHEAD_S),
        memory_bandwidth_efficiency=0.6,
        op_overhead_s=OVERHEAD_S,
    )
    profile = synthetic_profile(compute, (fit_collective(comm, "gloo"),))
    held = HeldOut(
        gemms=(gemm(256, 256, 256, 0.7), gemm(1024, 1024, 1024, 0.9)),
        attention=(attention("forward", 128, 0.02),),
        memory=(memory("add", 2**20, 30.0),),
        collectives=(collective("all_reduce", 2**19, 2e-4, 1.5),),
    )
    errors = validate(profile, held)
    assert {e.kind for e in errors} == {"gemm", "attention", "memory", "collective"}
    assert max(abs(e.relative_error) for e in errors) < 1e-3
    # A collective prediction goes through profiles.lookup, as the cost model's does.
    assert collective_time_s(profile.communication.fits[0], 2**19) == pytest.approx(
        2e-4 + 2**19 / 1.5e9, rel=1e-3
    )
