"""bench/validation_fit.py and bench/row_pricing.py: the FP8 factor and the MoE
host-launch time fitted on synthetic rows, per generation, jointly and leaving one source
out; a fixed launch time, and the rows repriced at one."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import synthetic_outcome

fitting = load_bench("validation_fit")
params = load_bench("validation_fit_params")
pricing = load_bench("row_pricing")


# Synthetic rows for the fits: a row's predicted seconds are max(c + w / f, n * h) at FP8
# factor f and host-launch time h (GPU time with its fp8 GEMM part w slowed by 1 / f, and a
# host floor of n launches), published seconds those of known (f, h): the fit must recover
# them. A grid holds them exactly.
GRID = params.FitGrid(
    fp8_factors=tuple(round(1.0 - 0.05 * i, 2) for i in range(13)),
    host_launch_s=tuple(round(5e-6 * i, 6) for i in range(13)),
)


def _shape(c, w, n=0.0):
    return lambda f, h: max(c + w / (1.0 if f is None else f), n * h)


def _predictor(shapes, calls=None):
    # These rows have no 16-bit GEMM part: the sustained factor does not move them.
    def predict(row_id, factor, host_s, sustained=None, token_s=None, expert_s=None):
        if calls is not None:
            calls.append(row_id)
        return shapes[row_id](factor, host_s)

    return predict


def _row(row_id, source, shape, truth, *, generation="H100/H800", kind="dense", fp8=True):
    return dataclasses.replace(
        synthetic_outcome(row_id, source, shape(*truth), 1.0, generation=generation),
        precision="fp8" if fp8 else "bf16",
        kind=kind,
    )


def test_fit_recovers_a_known_fp8_factor_on_dense_fp8_rows():
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(0.5, 3.0), "3": _shape(2.0, 1.0)}
    rows = [_row(r, "A-1", s, (0.6, 0.0)) for r, s in shapes.items()]
    bf16 = synthetic_outcome("4", "A-1", 1.0, 1.5)
    shapes["4"] = _shape(1.5, 0.0)
    model = fitting.fit_model([*rows, bf16], _predictor(shapes), GRID)
    assert model.fp8_factor == 0.6 and model.fitted_on == ("1", "2", "3")
    assert model.moe_host_launch_s == 0.0 and model.host_fitted_on == ()
    applied = fitting.apply_model([*rows, bf16], _predictor(shapes), model)
    assert [o.error for o in applied[:3]] == pytest.approx([0.0] * 3)
    assert applied[3].predicted_s == 1.5
    assert fitting.fit_model([bf16], _predictor(shapes), GRID).fp8_factor is None


def test_per_generation_fit_recovers_each_generation_and_shares_one_for_the_rest():
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(0.5, 3.0), "3": _shape(1.0, 2.0)}
    hopper = [_row(r, "A-1", shapes[r], (0.7, 0.0)) for r in ("1", "2")]
    blackwell = _row("3", "B-1", shapes["3"], (0.55, 0.0), generation="Blackwell")
    predict = _predictor(shapes)
    model = fitting.fit_model([*hopper, blackwell], predict, GRID, per_generation=True)
    assert model.fp8_factors == {"H100/H800": 0.7, "Blackwell": 0.55}
    assert model.fp8_fitted_on == {"H100/H800": ("1", "2"), "Blackwell": ("3",)}
    assert model.factor("A100") == model.fp8_factor in (0.7, 0.55)
    single = fitting.fit_model([*hopper, blackwell], predict, GRID)
    assert single.fp8_factors == {} and single.factor("Blackwell") == single.fp8_factor


def test_fp8_factor_and_host_launch_time_are_fitted_jointly_on_moe_rows():
    # No dense row: the factor and the launch time are both set by the MoE rows, one bound
    # by its GPU time (wants 0.5), one by its host floor (wants 40 us at that factor).
    truth = (0.5, 40e-6)
    shapes = {"1": _shape(1.0, 1.0), "2": _shape(1.0, 1.0, n=1e5), "3": _shape(1.0, 1.0)}
    moe = [_row(r, "A-1", shapes[r], truth, kind="moe") for r in ("1", "2")]
    dense_bf16 = _row("3", "A-1", shapes["3"], truth, fp8=False)
    model = fitting.fit_model([*moe, dense_bf16], _predictor(shapes), GRID)
    assert (model.fp8_factor, model.moe_host_launch_s) == truth
    assert model.fitted_on == ("1", "2") and model.host_fitted_on == ("1", "2")


def _two_families():
    """Shapes and rows of two source families: A, an H100 dense FP8 row (wants 0.7) and a
    host-bound MoE bf16 row (wants 40 us; no fp8 GEMM part: w = 0); B, a Blackwell dense FP8
    row (wants 0.55)."""
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(1.1, 0.0, n=1e5), "3": _shape(1.0, 2.0)}
    dense_a = _row("1", "A-1", shapes["1"], (0.7, 40e-6))
    moe_a = _row("2", "A-2", shapes["2"], (0.7, 40e-6), kind="moe", fp8=False)
    dense_b = _row("3", "B-1", shapes["3"], (0.55, 0.0), generation="Blackwell")
    return shapes, [dense_a, moe_a, dense_b]


def test_leave_one_source_out_refits_every_parameter_without_the_left_out_rows():
    # Family A: an H100 dense FP8 row (wants 0.7) and a host-bound MoE row (wants 40 us);
    # family B: a Blackwell dense FP8 row (wants 0.55). Left out, each family is predicted
    # with what the other alone gives: A with 0.55 and no host floor, B with 0.7.
    # (a bf16 row has no fp8 GEMM part: w = 0)
    shapes, outcomes = _two_families()
    for per_generation in (False, True):
        calls: list[str] = []
        predicted, models = fitting.leave_one_source_out(
            outcomes, _predictor(shapes, calls), GRID, per_generation=per_generation
        )
        assert models["A"].fitted_on == ("3",) and models["A"].host_fitted_on == ()
        assert models["A"].factor("H100/H800") == 0.55 and models["A"].moe_host_launch_s == 0.0
        assert models["B"].fitted_on == ("1",) and models["B"].host_fitted_on == ("2",)
        assert models["B"].factor("Blackwell") == 0.7
        assert models["B"].moe_host_launch_s == 40e-6
        by_row = {o.row_id: o.predicted_s for o in predicted}
        assert by_row == {
            "1": shapes["1"](0.55, 0.0),
            "2": shapes["2"](None, 0.0),
            "3": shapes["3"](0.7, 40e-6),
        }
        assert set(calls) == {"1", "2", "3"}


def test_a_fixed_host_launch_time_is_an_input_of_every_fit_not_fitted():
    # The rows of the test above with the launch time fixed at 25 us, away from the 40 us
    # the MoE row wants: no fit moves it, and family A, left without MoE rows to fit it,
    # still prices its MoE row with it (a fitted launch time would be 0 there).
    shapes, outcomes = _two_families()
    fixed = dataclasses.replace(GRID, host_launch_s=(25e-6,))
    assert fixed.host_launch_fixed and not GRID.host_launch_fixed
    model = fitting.fit_model(outcomes, _predictor(shapes), fixed)
    assert model.moe_host_launch_s == 25e-6 and model.host_fitted_on == ()
    predicted, models = fitting.leave_one_source_out(outcomes, _predictor(shapes), fixed)
    assert {f: m.moe_host_launch_s for f, m in models.items()} == {"A": 25e-6, "B": 25e-6}
    assert models["B"].factor("Blackwell") == 0.7
    by_row = {o.row_id: o.predicted_s for o in predicted}
    assert by_row["2"] == shapes["2"](None, 25e-6) == pytest.approx(2.5)


def test_fit_grid_fixes_only_the_host_launch_time():
    assert pricing.fit_grid() is pricing.FIT_GRID and not pricing.FIT_GRID.host_launch_fixed
    grid = pricing.fit_grid(12e-6)
    assert grid.host_launch_s == (12e-6,) and grid.host_launch_fixed
    assert (grid.fp8_factors, grid.sustained_factors) == (
        pricing.FIT_GRID.fp8_factors,
        pricing.FIT_GRID.sustained_factors,
    )


def test_no_fit_host_launch_time_reprices_only_the_moe_rows():
    shapes = {"1": _shape(1.0, 0.0, n=1e5), "2": _shape(1.0, 0.0, n=1e5)}
    moe = _row("1", "A-1", shapes["1"], (None, 40e-6), kind="moe", fp8=False)
    dense = _row("2", "A-1", shapes["2"], (None, 40e-6), fp8=False)
    calls: list[str] = []
    repriced = pricing.at_host_launch([moe, dense], _predictor(shapes, calls), 30e-6)
    assert calls == ["1"]
    assert [o.predicted_s for o in repriced] == pytest.approx([3.0, dense.predicted_s])
    assert repriced[0].error == pytest.approx(3.0 / 4.0 - 1.0)
