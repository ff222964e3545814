"""`paraplan calibrate` of the torch runtime writes what it fits about the host into the
host section (`HostOverheads.backward_scale`, `HostOverheads.layer_collective_scale`), keeps
the provenance spreads as the base profile's record, and fits a profile without a host
section (a GPU's, priced kernel-bound) by its time scale alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.execution_presets import TORCH_OPTIONS
from profiles.store import load_profile, save_profile
from reports.calibrate import NO_HOST_NOTE, calibrate, time_scaled
from reports.calibrate_factors import with_backward_scale, with_layer_collective_scale
from specs.plan import ParallelPlan
from tests.reports.calibrate_runs import PROFILE, synthetic_run, tiny_bundle


def test_the_fitted_scales_land_in_the_saved_host_section(tmp_path: Path) -> None:
    base = load_profile(str(PROFILE))
    truth = with_layer_collective_scale(time_scaled(with_backward_scale(base, 0.8), 1.2), 0.7)
    plans = [ParallelPlan(dp=2), ParallelPlan(pp=2, micro_batch_size=2), ParallelPlan(tp=2)]
    runs = [
        synthetic_run(tmp_path / str(i), tiny_bundle(p), base, truth, TORCH_OPTIONS)
        for i, p in enumerate(plans)
    ]
    result = calibrate(base, runs, options=TORCH_OPTIONS)
    saved = json.loads(save_profile(result.profile, tmp_path / "cal.json").read_text())
    assert saved["host"]["backward_scale"] == pytest.approx(0.8, rel=1e-3)
    assert saved["host"]["layer_collective_scale"] == pytest.approx(0.7, rel=1e-3)
    assert "backward_scale" not in saved["compute"]
    assert "layer_collective_scale" not in saved["communication"]
    # The measured rows and the record of the measurement are the base profile's.
    assert result.profile.host.timings == base.host.timings
    assert result.profile.provenance.spread == base.provenance.spread
    assert load_profile(str(tmp_path / "cal.json")) == result.profile


def test_a_profile_without_a_host_section_is_fitted_by_its_time_scale(tmp_path: Path) -> None:
    gpu = load_profile("h100-sxm-80gb")
    truth = time_scaled(gpu, 1.25)
    plans = [ParallelPlan(dp=2), ParallelPlan(tp=2)]
    runs = [
        synthetic_run(tmp_path / str(i), tiny_bundle(p), gpu, truth, TORCH_OPTIONS)
        for i, p in enumerate(plans)
    ]
    result = calibrate(gpu, runs, options=TORCH_OPTIONS)
    assert result.profile.host is None
    assert NO_HOST_NOTE in result.profile.provenance.notes
    for e in result.runs:
        assert abs(e.error_after) < 0.01, e
