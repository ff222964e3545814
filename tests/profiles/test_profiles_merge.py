"""The median of several profiles (`profiles.merge.median_profile`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.lookup import collective_fit, collective_time_s, gemm_efficiency
from profiles.merge import median_profile
from profiles.schema import HardwareProfile
from profiles.schema_device import EfficiencyPoint
from profiles.schema_host import HostTranscendental
from specs.errors import SpecError
from tests.costmodel.cpu_fixture import cpu_profile, spread


def _draw(scale: float, curve: tuple[tuple[float, float], ...] | None = None) -> HardwareProfile:
    """The test profile with every time figure times ``scale`` (rates over it) and, when
    given, its own fp32 GEMM curve."""
    base = cpu_profile(extra=(spread("op_overhead.sync_wait", 5e-4, 4e-4),))
    compute = dataclasses.replace(base.compute, op_overhead_s=base.compute.op_overhead_s * scale)
    if curve is not None:
        points = tuple(EfficiencyPoint(gflop=g, efficiency=e) for g, e in curve)
        compute = dataclasses.replace(
            compute, gemm_efficiency={**compute.gemm_efficiency, "fp32": points}
        )
    fits = tuple(
        dataclasses.replace(f, latency_s=f.latency_s * scale, busbw_GBps=f.busbw_GBps / scale)
        for f in base.communication.fits
    )
    spreads = tuple(
        dataclasses.replace(
            s, mean=s.mean * scale, min=s.min * scale, max=s.max * scale, num_samples=9 + int(scale)
        )
        for s in base.provenance.spread
    )
    return dataclasses.replace(
        base,
        compute=compute,
        communication=dataclasses.replace(base.communication, fits=fits),
        provenance=dataclasses.replace(
            base.provenance, spread=spreads, date=f"2026-12-0{int(scale)}"
        ),
    )


def _spread_mean(profile: HardwareProfile, quantity: str) -> float:
    return next(s.mean for s in profile.provenance.spread if s.quantity == quantity)


def test_every_figure_is_the_median_of_the_draws() -> None:
    draws = [_draw(3.0), _draw(1.0), _draw(2.0)]
    merged = median_profile(draws, command="bench: median of three")
    middle = draws[2]
    assert merged.compute.op_overhead_s == pytest.approx(middle.compute.op_overhead_s)
    assert _spread_mean(merged, "op_overhead.sync_wait") == pytest.approx(1e-3)
    fit = collective_fit(merged, "all_reduce", 2, "intra")
    assert fit.latency_s == pytest.approx(800e-6)
    assert collective_time_s(fit, 1 << 20) == pytest.approx(
        collective_time_s(collective_fit(middle, "all_reduce", 2, "intra"), 1 << 20)
    )
    assert merged.provenance.command == "bench: median of three"
    assert (
        "median of 3 profiles measured 2026-12-01, 2026-12-02, 2026-12-03"
        in (merged.provenance.notes[-1])
    )
    assert merged.provenance.date == draws[0].provenance.date  # the first draw's
    assert merged.name == draws[0].name
    assert median_profile(draws, command="x", name="median").name == "median"
    assert {s.num_samples for s in merged.provenance.spread} == {11}


def test_spreads_pair_by_quantity_and_fits_by_their_keys() -> None:
    a, b, c = _draw(1.0), _draw(2.0), _draw(3.0)
    shuffled = dataclasses.replace(
        c,
        provenance=dataclasses.replace(c.provenance, spread=tuple(reversed(c.provenance.spread))),
        communication=dataclasses.replace(
            c.communication, fits=tuple(reversed(c.communication.fits))
        ),
    )
    merged = median_profile([a, b, shuffled], command="x")
    assert [s.quantity for s in merged.provenance.spread] == [
        s.quantity for s in a.provenance.spread
    ]
    assert _spread_mean(merged, "op_overhead.sync_wait") == pytest.approx(1e-3)
    fit = collective_fit(merged, "reduce_scatter", 4, "intra")
    assert fit.latency_s == pytest.approx(2 * 450e-6)


def _with_medians(profile: HardwareProfile, medians: bool = True) -> HardwareProfile:
    """Every spread of ``profile`` with its median at its minimum (or none)."""
    spreads = tuple(
        dataclasses.replace(s, median=s.min if medians else None) for s in profile.provenance.spread
    )
    return dataclasses.replace(
        profile, provenance=dataclasses.replace(profile.provenance, spread=spreads)
    )


def test_spread_medians_merge_as_the_median_of_the_draws() -> None:
    draws = [_with_medians(_draw(k)) for k in (3.0, 1.0, 2.0)]
    merged = median_profile(draws, command="x")
    wait = next(s for s in merged.provenance.spread if s.quantity == "op_overhead.sync_wait")
    assert wait.median == pytest.approx(0.8e-3)  # the middle draw's (2 x 0.4 ms)
    assert wait.min <= wait.median <= wait.max
    # a draw of an older paraplan, without medians, does not merge with newer ones
    with pytest.raises(SpecError, match="median is a number in one profile only"):
        median_profile([*draws[:2], _with_medians(_draw(2.0), False)], command="x")
    assert median_profile([_draw(1.0), _draw(2.0)], command="x").provenance.spread[0].median is None


def test_gemm_curves_with_other_points_merge_at_the_union() -> None:
    curves = (
        ((0.001, 0.2), (0.01, 0.4), (1.0, 0.8)),
        ((0.001, 0.1), (0.1, 0.5), (1.0, 0.9)),
        ((0.001, 0.3), (1.0, 0.7)),
    )
    draws = [_draw(1.0 + i, curve) for i, curve in enumerate(curves)]
    merged = median_profile(draws, command="x")
    points = merged.compute.gemm_efficiency["fp32"]
    assert [p.gflop for p in points] == [0.001, 0.01, 0.1, 1.0]
    assert points[0].efficiency == pytest.approx(0.2)
    assert points[-1].efficiency == pytest.approx(0.8)
    for m in (16, 64, 200, 512):
        values = sorted(gemm_efficiency(d, m, m, m, "fp32") for d in draws)
        assert values[0] <= gemm_efficiency(merged, m, m, m, "fp32") <= values[-1]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=0.5, max_value=4.0), min_size=2, max_size=5))
def test_medians_keep_every_spread_and_curve_valid(scales: list[float]) -> None:
    merged = median_profile([_draw(s) for s in scales], command="x")  # validates on load
    ordered = sorted(scales)
    n = len(ordered)
    middle = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    assert merged.compute.op_overhead_s == pytest.approx(2e-6 * middle)
    for s in merged.provenance.spread:
        assert s.min <= s.mean <= s.max


def test_profiles_of_other_machines_do_not_merge() -> None:
    a, b = _draw(1.0), _draw(2.0)
    other = dataclasses.replace(b, device=dataclasses.replace(b.device, name="Other CPU"))
    with pytest.raises(SpecError, match=r"\.device\.name differs"):
        median_profile([a, other], command="x")
    fewer = dataclasses.replace(
        b, provenance=dataclasses.replace(b.provenance, spread=b.provenance.spread[1:])
    )
    with pytest.raises(SpecError, match="not in every profile"):
        median_profile([a, fewer], command="x")
    with pytest.raises(SpecError, match="at least two profiles"):
        median_profile([a], command="x")


def test_transcendental_rows_pair_by_kernel_and_size() -> None:
    def with_rows(scale: float, order: slice) -> HardwareProfile:
        base = _draw(scale)
        rows = tuple(
            HostTranscendental(op="silu", elements=n, num_samples=3, mean_s=m, min_s=m, max_s=m)
            for n, m in ((1024, 1e-6 * scale), (4096, 4e-6 * scale))
        )[order]
        return dataclasses.replace(base, host=dataclasses.replace(base.host, transcendental=rows))

    merged = median_profile(
        [
            with_rows(1.0, slice(None)),
            with_rows(2.0, slice(None, None, -1)),
            with_rows(3.0, slice(None)),
        ],
        command="test",
    )
    assert [(r.elements, r.mean_s) for r in merged.host.transcendental] == [
        (1024, pytest.approx(2e-6)),
        (4096, pytest.approx(8e-6)),
    ]
