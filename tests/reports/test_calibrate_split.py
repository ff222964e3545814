"""The executor model's calibration of the forward/backward split
(`reports.calibrate_time.backward_factor`, `fit_backward_scale`) and the cost model's use of
the fitted `HostOverheads.backward_scale` of the host section."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from costmodel.estimate import simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from reports.calibrate import calibrate, time_scaled
from reports.calibrate_factors import with_backward_scale
from reports.calibrate_time import (
    BACKWARD_SCALE_BOUNDS,
    SCALE_BOUNDS,
    backward_factor,
    fit_backward_scale,
    scale_at_bound,
)
from specs.errors import SpecError
from specs.plan import ParallelPlan
from tests.reports.calibrate_runs import synthetic_run, tiny_bundle


def test_a_measured_profile_has_a_backward_scale_of_one_in_its_host_section(base) -> None:
    assert base.host is not None and base.host.backward_scale == 1.0
    for bad in (0.0, -1.0):
        with pytest.raises(SpecError, match="backward_scale must be > 0"):
            dataclasses.replace(base.host, backward_scale=bad)
    gpu = load_profile("h100-sxm-80gb")
    with pytest.raises(SpecError, match="has no host section"):
        with_backward_scale(gpu, 0.9)


def test_the_backward_factor_keeps_the_rerun_at_the_forward_price() -> None:
    # measured: backward (rerun inside) 3 forwards; predicted: F 2, B 4, R 1 -> 4·β + 1 = 6
    measured = {"forward": 1.0, "backward": 3.0}
    predicted = {"forward": 2.0, "backward": 4.0, "recompute": 1.0}
    assert backward_factor(measured, predicted) == pytest.approx(1.25)
    # a measured recompute phase counts with the backward
    split = {"forward": 1.0, "backward": 2.0, "recompute": 1.0}
    assert backward_factor(split, predicted) == pytest.approx(1.25)
    assert math.isnan(backward_factor({"forward": 0.0, "backward": 1.0}, predicted))


def test_the_fitted_scale_is_the_geometric_mean_within_bounds() -> None:
    assert fit_backward_scale(1.0, {"a": 0.5, "b": 2.0}) == pytest.approx(1.0)
    assert fit_backward_scale(0.8, {"a": 0.9}) == pytest.approx(0.72)
    with pytest.raises(SpecError, match=r"runs \['a'\] give no positive backward factor"):
        fit_backward_scale(1.0, {"a": float("nan"), "b": 1.0})
    low, high = BACKWARD_SCALE_BOUNDS
    with pytest.raises(SpecError, match="outside"):
        fit_backward_scale(1.0, {"a": high * 1.5})
    with pytest.raises(SpecError, match="outside"):
        fit_backward_scale(1.0, {"a": low / 1.5})


def test_the_backward_scale_prices_the_backward_alone(base) -> None:
    bundle = tiny_bundle(ParallelPlan(dp=2, recompute="full"))
    b = bundle

    def breakdown(profile: HardwareProfile):
        estimate, _ = simulate_plan(
            b.model, b.cluster, b.job, b.plan, profile, options=TORCH_OPTIONS, timeline=False
        )
        return estimate.breakdown

    one, half = breakdown(base), breakdown(with_backward_scale(base, 0.5))
    assert half.compute_backward_s == pytest.approx(0.5 * one.compute_backward_s)
    assert half.compute_forward_s == pytest.approx(one.compute_forward_s)
    assert half.compute_recompute_s == pytest.approx(one.compute_recompute_s)


def test_executor_calibration_recovers_the_split_and_the_time_scale(base, tmp_path: Path) -> None:
    # A host 1.3 times slower whose backwards run at 0.8 of the profile's split.
    truth = time_scaled(with_backward_scale(base, 0.8), 1.3)
    plans = [
        ParallelPlan(dp=2),
        ParallelPlan(dp=2, recompute="full"),
        ParallelPlan(pp=2, micro_batch_size=2),
        ParallelPlan(tp=2),  # its passes hold collectives: fitted for k, not for the split
    ]
    runs = [
        synthetic_run(tmp_path / str(i), tiny_bundle(p), base, truth, TORCH_OPTIONS)
        for i, p in enumerate(plans)
    ]
    result = calibrate(base, runs, options=TORCH_OPTIONS)
    assert result.profile.host.backward_scale == pytest.approx(0.8, rel=1e-3)
    assert result.profile.compute.op_overhead_s == pytest.approx(
        1.3 * base.compute.op_overhead_s, rel=1e-3
    )
    for e in result.runs:
        assert abs(e.error_after) < 0.01 < abs(e.error_before), e
    notes = result.profile.provenance.notes
    assert any(n.startswith("backward scale 1 -> 0.8") and "of 3 run(s)" in n for n in notes), notes


def test_without_a_run_to_read_the_split_from_the_scale_is_kept(base, tmp_path: Path) -> None:
    truth = time_scaled(base, 1.2)
    run = synthetic_run(
        tmp_path / "tp", tiny_bundle(ParallelPlan(tp=2)), base, truth, TORCH_OPTIONS
    )
    result = calibrate(with_backward_scale(base, 0.9), [run], options=TORCH_OPTIONS)
    assert result.profile.host.backward_scale == 0.9
    assert any("backward scale kept at 0.9" in n for n in result.profile.provenance.notes)


def test_a_time_scale_stopped_at_its_bound_is_said(base, tmp_path: Path) -> None:
    # a host 8 times slower than its profile: k stops at 5 and the fit once said nothing
    truth = time_scaled(base, 8.0)
    run = synthetic_run(
        tmp_path / "dp", tiny_bundle(ParallelPlan(dp=2)), base, truth, TORCH_OPTIONS
    )
    result = calibrate(base, [run], options=TORCH_OPTIONS)
    assert len(result.warnings) == 1 and "stopped at its bound x5" in result.warnings[0]
    assert result.warnings[0] in result.profile.provenance.notes
    inside = synthetic_run(
        tmp_path / "ok",
        tiny_bundle(ParallelPlan(dp=2)),
        base,
        time_scaled(base, 1.5),
        TORCH_OPTIONS,
    )
    assert calibrate(base, [inside], options=TORCH_OPTIONS).warnings == ()
    assert scale_at_bound(SCALE_BOUNDS[0]) is not None and scale_at_bound(1.0) is None
