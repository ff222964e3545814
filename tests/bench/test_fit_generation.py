"""bench/validation_fit.py: per-generation FP8 factors keyed by the profile's generation
(`Outcome.fit_generation`), apart from the reporting generation."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import factor_predictor, factor_row

stats = load_bench("validation_stats")
fitting = load_bench("validation_fit")
params = load_bench("validation_fit_params")

GRID = params.FitGrid(
    fp8_factors=tuple(round(1.0 - 0.05 * i, 2) for i in range(13)),
    host_launch_s=(0.0,),
)

# Synthetic dense FP8 rows: predicted seconds c + w / f at FP8 factor f; published seconds
# those of a known f on the grid, one per profile generation: the fit must recover each.
SHAPES = {"b1": (1.0, 2.0), "b2": (0.5, 3.0), "u1": (1.0, 2.0), "u2": (2.0, 1.0)}
TRUTH = {"blackwell": 0.6, "blackwell_ultra": 0.8}


_predict = factor_predictor(SHAPES)


def _row(row_id, source, fit_generation, published_factor=None):
    """A dense FP8 row of ``fit_generation``, published at its generation's `TRUTH` factor
    or at ``published_factor``."""
    factor = TRUTH[fit_generation] if published_factor is None else published_factor
    return factor_row(
        SHAPES, row_id, source, factor, precision="fp8", fit_generation=fit_generation
    )


def _rows():
    return [
        _row("b1", "MBRIDGE-25.09", "blackwell"),
        _row("b2", "MOEZOO-1", "blackwell"),
        _row("u1", "MBRIDGE-25.09", "blackwell_ultra"),
        _row("u2", "MBRIDGE-26.02", "blackwell_ultra"),
    ]


def test_fit_key_is_the_profile_generation_else_the_reporting_one():
    row = _row("b1", "S-1", "blackwell_ultra")
    assert row.fit_key == "blackwell_ultra" and row.generation == "Blackwell"
    bare = stats.Outcome(
        **{f: getattr(row, f) for f in row.__dataclass_fields__ if f != "fit_generation"}
    )
    assert bare.fit_key == "Blackwell"


def test_per_generation_fit_recovers_two_factors_within_one_reporting_generation():
    model = fitting.fit_model(_rows(), _predict, GRID, per_generation=True)
    assert model.fp8_factors == TRUTH
    assert model.fp8_fitted_on == {"blackwell": ("b1", "b2"), "blackwell_ultra": ("u1", "u2")}
    applied = fitting.apply_model(_rows(), _predict, model)
    assert [o.error for o in applied] == pytest.approx([0.0] * 4)
    assert model.factor("hopper") == model.fp8_factor in (0.6, 0.65, 0.7, 0.75, 0.8)


def test_one_factor_for_all_cannot_fit_both():
    model = fitting.fit_model(_rows(), _predict, GRID)
    assert model.fp8_factors == {}
    applied = fitting.apply_model(_rows(), _predict, model)
    assert max(abs(o.error) for o in applied) > 0.05


def test_leave_one_source_out_leaves_a_generation_without_rows_to_the_shared_factor():
    rows = _rows()
    rows[1] = _row("b2", "MBRIDGE-26.02", "blackwell")
    rows[0] = _row("b1", "MOEZOO-1", "blackwell")
    rows[3] = _row("u2", "MBRIDGE-26.02", "blackwell_ultra")
    _, models = fitting.leave_one_source_out(rows, _predict, GRID, per_generation=True)
    without_zoo = models["MOEZOO"]
    assert without_zoo.fp8_factors["blackwell_ultra"] == TRUTH["blackwell_ultra"]
    without_bridge = models["MBRIDGE"]
    assert set(without_bridge.fp8_factors) == {"blackwell"}
    assert without_bridge.factor("blackwell_ultra") == without_bridge.fp8_factor


def test_bench_json_lists_the_per_generation_factors_and_their_rows():
    report_mod = load_bench("validation_report")
    assert report_mod.PER_GENERATION
    rows = [
        report_mod.Outcome(**{f: getattr(o, f) for f in o.__dataclass_fields__}) for o in _rows()
    ]
    result = report_mod.report(rows, [], _predict)
    fitted = result["fitted"]
    assert fitted["fp8_gemm_rate_factor_by_generation"] == TRUTH
    assert fitted["fp8_fitted_on_by_generation"] == {
        "blackwell": ["b1", "b2"],
        "blackwell_ultra": ["u1", "u2"],
    }
    assert fitted["median_abs_error"] == pytest.approx(0.0)
    assert list(result["by_generation"]) == ["Blackwell"]
    assert {r["fit_generation"] for r in result["rows"]} == set(TRUTH)
    assert result["per_generation"]["per_generation"] is False


def test_a_generation_with_only_moe_fp8_rows_takes_the_shared_dense_factor():
    # m1's published time implies factor 0.4 on its own; with no dense FP8 row of its
    # generation it takes the factor the dense FP8 rows fit together (b1, b2: 0.6).
    SHAPES["m1"] = (1.0, 2.0)
    moe = dataclasses.replace(
        _row("m1", "MOEZOO-1", "blackwell_ultra", published_factor=0.4), kind="moe", plan="plan b1"
    )
    rows = [_row("b1", "MBRIDGE-25.09", "blackwell"), _row("b2", "MBRIDGE-26.02", "blackwell")]
    model = fitting.fit_model([*rows, moe], _predict, GRID, per_generation=True)
    assert model.fp8_factor == TRUTH["blackwell"]
    assert model.fp8_factors == {"blackwell": 0.6, "blackwell_ultra": 0.6}
    assert model.fp8_fitted_on["blackwell_ultra"] == ("b1", "b2")
    single = fitting.fit_model([*rows, moe], _predict, GRID)
    assert single.fitted_on == ("b1", "b2", "m1")  # one factor for all: every FP8 row
