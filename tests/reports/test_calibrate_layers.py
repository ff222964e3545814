"""The executor model's layer-collective scale (`HostOverheads.layer_collective_scale`,
`reports.calibrate_layers`): what it multiplies, and its fit after the compute time scale."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from costmodel.estimate import simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from profiles.schema import HardwareProfile
from profiles.store import load_profile, save_profile
from reports.calibrate import calibrate, time_scaled
from reports.calibrate_factors import with_layer_collective_scale
from reports.calibrate_layers import has_layer_collectives
from specs.errors import SpecError
from specs.plan import ParallelPlan
from tests.reports.calibrate_runs import synthetic_run, tiny_bundle


def _breakdown(profile: HardwareProfile, plan: ParallelPlan):
    b = tiny_bundle(plan)
    estimate, _ = simulate_plan(
        b.model, b.cluster, b.job, b.plan, profile, options=TORCH_OPTIONS, timeline=False
    )
    return estimate.breakdown


def test_a_stored_profile_has_a_scale_of_one_and_a_saved_one_keeps_its_own(
    base, tmp_path: Path
) -> None:
    assert base.host is not None and base.host.layer_collective_scale == 1.0
    for bad in (0.0, -0.5):
        with pytest.raises(SpecError, match="layer_collective_scale must be > 0"):
            dataclasses.replace(base.host, layer_collective_scale=bad)
    path = save_profile(with_layer_collective_scale(base, 0.625), tmp_path / "p.json")
    assert load_profile(str(path)).host.layer_collective_scale == 0.625


@pytest.mark.parametrize(
    ("plan", "lane"),
    [
        (ParallelPlan(tp=2), "tp_exposed_s"),
        (ParallelPlan(tp=2, sequence_parallel=True), "tp_exposed_s"),
        (ParallelPlan(cp=2), "cp_exposed_s"),
    ],
)
def test_the_scale_multiplies_the_layer_collectives_alone(base, plan, lane) -> None:
    one = _breakdown(base, plan)
    half = _breakdown(with_layer_collective_scale(base, 0.5), plan)
    assert getattr(one, lane) > 0
    assert getattr(half, lane) == pytest.approx(0.5 * getattr(one, lane))
    for kept in ("compute_forward_s", "compute_backward_s", "optimizer_s", "dp_exposed_s"):
        assert getattr(half, kept) == pytest.approx(getattr(one, kept)), kept


def test_plans_without_layer_collectives_do_not_move(base) -> None:
    for plan in (
        ParallelPlan(dp=2),
        ParallelPlan(pp=2),
        ParallelPlan(dp=2, ddp_bucket_size=100_000),
    ):
        one = _breakdown(base, plan)
        assert _breakdown(with_layer_collective_scale(base, 3.0), plan) == one


def _runs(tmp_path: Path, base, truth, plans) -> list:
    return [
        synthetic_run(tmp_path / f"run{i}", tiny_bundle(p), base, truth, TORCH_OPTIONS)
        for i, p in enumerate(plans)
    ]


def test_calibration_recovers_the_compute_and_the_layer_scale(base, tmp_path: Path) -> None:
    # A host 1.3 times slower whose layer collectives cost 0.6 of what the profile says.
    truth = with_layer_collective_scale(time_scaled(base, 1.3), 0.6)
    compute = [ParallelPlan(dp=2, micro_batch_size=2), ParallelPlan(pp=2, micro_batch_size=2)]
    layered = [
        ParallelPlan(tp=2, micro_batch_size=2),
        ParallelPlan(tp=2, micro_batch_size=2, sequence_parallel=True),
    ]
    runs = _runs(tmp_path, base, truth, [*compute, *layered])
    held = _runs(tmp_path / "held", base, truth, [ParallelPlan(tp=2), ParallelPlan(cp=2)])
    result = calibrate(base, runs, held_out=held, options=TORCH_OPTIONS)
    fitted = result.profile
    assert fitted.compute.op_overhead_s == pytest.approx(1.3 * base.compute.op_overhead_s, 1e-3)
    assert fitted.host.layer_collective_scale == pytest.approx(0.6, rel=1e-3)
    for e in result.runs:
        assert abs(e.error_after) < 0.005, e
    assert any(abs(e.error_before) > 0.1 for e in result.runs if not e.fitted)
    notes = fitted.provenance.notes
    assert any("fitted on 2 run(s)" in n and "x1.3" in n for n in notes), notes
    assert any(n.startswith("layer collectives x1 -> x0.6") for n in notes), notes


def test_runs_of_one_kind_keep_the_layer_scale(base, tmp_path: Path) -> None:
    truth = with_layer_collective_scale(time_scaled(base, 1.2), 0.5)
    start = with_layer_collective_scale(base, 0.8)
    cases = {
        "without": [ParallelPlan(dp=2), ParallelPlan(pp=2)],
        "with": [ParallelPlan(tp=2)],
    }
    for missing, plans in (("with", cases["without"]), ("without", cases["with"])):
        result = calibrate(
            start, _runs(tmp_path / missing, base, truth, plans), options=TORCH_OPTIONS
        )
        assert result.profile.host.layer_collective_scale == 0.8
        note = f"layer collectives kept at x0.8: no run {missing} tensor-"
        assert any(n.startswith(note) for n in result.profile.provenance.notes), missing


def test_which_runs_have_layer_collectives() -> None:
    plans = {
        ParallelPlan(tp=2): True,
        ParallelPlan(cp=2): True,
        ParallelPlan(dp=2, ep=2): True,
        ParallelPlan(dp=2): False,
        ParallelPlan(pp=2, micro_batch_size=2): False,
    }
    for plan, expected in plans.items():
        run = SimpleNamespace(bundle=SimpleNamespace(plan=plan))
        assert has_layer_collectives(run) is expected, plan
