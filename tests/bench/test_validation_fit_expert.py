"""bench/validation_fit.py: the host time of a launch Transformer Engine issues per local expert
(`ExecutionOptions.moe_expert_launch_s`) fitted jointly with the Python-level launch time, fixed
by a one-value grid, refitted without the left-out family, and in the bench's JSON."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import synthetic_outcome

fitting = load_bench("validation_fit")
params = load_bench("validation_fit_params")
pricing = load_bench("row_pricing")

GRID = params.FitGrid(
    fp8_factors=(1.0,),
    host_launch_s=tuple(round(5e-6 * i, 6) for i in range(13)),
    expert_launch_s=(0.0, 2e-6, 5e-6, 10e-6, 20e-6, 30e-6, 50e-6),
)

# Synthetic host-bound MoE rows: predicted seconds max(c, p * h + x * e) at Python-level launch
# time h and per-expert launch time e (a GPU part c, p Python-level launches and x per-expert
# launches per pass); published seconds those of a known (h, e) on the grid. Rows with
# different ratios x / p make the two times separable.


def _shape(c, p, x):
    def seconds(h, e):
        return max(c, p * h + x * (0.0 if e is None else e))

    return seconds


SHAPES = {
    "fused": _shape(0.01, 4e4, 0.0),  # fused grouped MLP: no per-expert launch
    "few": _shape(0.01, 3e4, 6e4),  # 16 local experts
    "many": _shape(0.01, 3e4, 4e5),  # 64 local experts
    "gpu": _shape(50.0, 3e4, 6e4),  # GPU-bound: the floor does not bind
}


def _predictor(seen=None):
    def predict(row_id, factor, host_s, sustained, token_s, expert_s=None):
        if seen is not None:
            seen.append((row_id, host_s, expert_s))
        return SHAPES[row_id](host_s, expert_s)

    return predict


def _moe(row_id, source, truth):
    return dataclasses.replace(
        synthetic_outcome(row_id, source, SHAPES[row_id](*truth), 1.0, generation="Blackwell"),
        kind="moe",
    )


def _rows(truth):
    return [
        _moe("fused", "MBRIDGE-26.02", truth),
        _moe("few", "MOEZOO-X", truth),
        _moe("many", "MBRIDGE-25.09", truth),
        _moe("gpu", "MOEZOO-X", truth),
    ]


def test_fit_recovers_both_launch_times():
    truth = (40e-6, 5e-6)
    model = fitting.fit_model(_rows(truth), _predictor(), GRID)
    assert model.moe_host_launch_s == pytest.approx(40e-6)
    assert model.moe_expert_launch_s == pytest.approx(5e-6)
    assert model.expert_fitted_on == ("fused", "few", "many", "gpu")
    applied = fitting.apply_model(_rows(truth), _predictor(), model)
    assert [o.predicted_s for o in applied] == pytest.approx([o.published_s for o in applied])


def test_a_one_value_grid_fixes_the_expert_launch_time():
    grid = dataclasses.replace(GRID, expert_launch_s=(20e-6,))
    assert grid.expert_launch_fixed and not GRID.expert_launch_fixed
    seen = []
    model = fitting.fit_model(_rows((40e-6, 5e-6)), _predictor(seen), grid)
    assert model.moe_expert_launch_s == 20e-6 and model.expert_fitted_on == ()
    assert {e for _, _, e in seen} == {20e-6}
    # Without MoE rows a fitted time is 0, a fixed one stays.
    assert fitting.fit_model([], _predictor(), GRID).moe_expert_launch_s == 0.0
    assert fitting.fit_model([], _predictor(), grid).moe_expert_launch_s == 20e-6


def test_leave_one_source_out_refits_the_expert_launch_time():
    # Family MBRIDGE holds the fused and the 64-expert rows, MOEZOO the 16-expert and the
    # GPU-bound ones: each is predicted with the times the other family's rows fit.
    truth = (40e-6, 10e-6)
    predicted, models = fitting.leave_one_source_out(_rows(truth), _predictor(), GRID)
    assert set(models) == {"MBRIDGE", "MOEZOO"}
    for family, model in models.items():
        others = [o for o in _rows(truth) if not o.source_id.startswith(family)]
        refit = fitting.fit_model(others, _predictor(), GRID)
        assert model.moe_expert_launch_s == refit.moe_expert_launch_s
    by_row = {o.row_id: o.predicted_s for o in predicted}
    bridge = models["MBRIDGE"]
    expected = SHAPES["many"](bridge.moe_host_launch_s, bridge.moe_expert_launch_s)
    assert by_row["many"] == pytest.approx(expected)


def test_a_model_without_an_expert_launch_time_keeps_each_row_s_own():
    seen = []
    model = params.FittedModel(fp8_factor=None, fitted_on=(), moe_host_launch_s=30e-6)
    fitting.apply_model(_rows((40e-6, 5e-6))[:1], _predictor(seen), model)
    assert seen == [("fused", 30e-6, None)]


def test_fit_grid_fixes_either_launch_time():
    assert pricing.fit_grid() == pricing.FIT_GRID
    assert pricing.FIT_GRID.expert_launch_s == (0.0, 2e-6, 5e-6, 10e-6, 20e-6, 30e-6, 50e-6)
    both = pricing.fit_grid(50e-6, 10e-6)
    assert (both.host_launch_s, both.expert_launch_s) == ((50e-6,), (10e-6,))
    expert_only = pricing.fit_grid(expert_launch_s=5e-6)
    assert expert_only.host_launch_s == pricing.FIT_GRID.host_launch_s
    assert expert_only.expert_launch_s == (5e-6,)


def test_bench_json_lists_the_expert_launch_time_in_sample_and_per_left_out_family():
    report_mod = load_bench("validation_report")
    truth = (40e-6, 5e-6)
    rows = [
        report_mod.Outcome(**{f: getattr(o, f) for f in o.__dataclass_fields__})
        for o in _rows(truth)
    ]
    result = report_mod.report(rows, [], _predictor(), GRID)
    assert result["fitted"]["moe_expert_launch_s"] == pytest.approx(5e-6)
    assert result["fitted"]["moe_expert_fitted_on"] == ["fused", "few", "many", "gpu"]
    by_family = result["loso"]["moe_expert_launch_s_by_left_out_source"]
    assert set(by_family) == {"MBRIDGE", "MOEZOO"}
    assert result["per_generation"]["moe_expert_launch_s"] == pytest.approx(5e-6)


def test_a_tied_grid_fits_one_launch_time_for_both_kinds():
    truth = (30e-6, 30e-6)
    tied = dataclasses.replace(GRID, expert_launch_tied=True)
    seen: list = []
    model = fitting.fit_model(_rows(truth), _predictor(seen), tied)
    assert model.moe_host_launch_s == model.moe_expert_launch_s == pytest.approx(30e-6)
    assert model.expert_fitted_on == ("fused", "few", "many", "gpu")
    assert all(host == expert for _, host, expert in seen)
    fixed_host = dataclasses.replace(tied, host_launch_s=(20e-6,))
    fixed = fitting.fit_model(_rows(truth), _predictor(), fixed_host)
    assert fixed.moe_expert_launch_s == pytest.approx(20e-6) and fixed.expert_fitted_on == ()


def test_the_shipped_grid_ties_the_launch_times_and_fixing_one_unties_them():
    assert pricing.FIT_GRID.expert_launch_tied and not pricing.FIT_GRID.expert_launch_fixed
    fixed = pricing.fit_grid(None, 10e-6)
    assert not fixed.expert_launch_tied and fixed.expert_launch_s == (10e-6,)
