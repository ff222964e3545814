"""bench/validation_report.py: the JSON rows' reason a row does not fit, and the rows that
do not fit reported apart from the as-run fit fraction."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import synthetic_outcome

stats = load_bench("validation_stats")
report_mod = load_bench("validation_report")


def test_json_rows_carry_a_not_fit_reason_only_when_one_is_known():
    plain = synthetic_outcome("1", "MBRIDGE-26.02.01", 1.0, 1.0)
    assert "not_fit_reason" not in report_mod.outcome_row(plain, 0.0)
    flagged = dataclasses.replace(plain, fits=False, not_fit_reason="printed unlike the recipe")
    row = report_mod.outcome_row(flagged, 0.0)
    assert row["not_fit_reason"] == "printed unlike the recipe" and row["fits"] is False


def test_not_fitting_rows_are_reported_apart_with_their_reason():
    fits = synthetic_outcome("1", "MBRIDGE-26.02", 1.0, 1.0)
    printed = dataclasses.replace(
        synthetic_outcome("2", "MBRIDGE-26.02.01", 1.0, 1.0),
        fits=False,
        not_fit_reason="printed pp4",
    )
    over = dataclasses.replace(synthetic_outcome("3", "NEMO-LONGSEQ", 1.0, 1.0), fits=False)
    report = report_mod.not_fitting_report([fits, printed, over])
    listed = {r["row_id"]: r["printed_not_recipe"] for r in report["not_fitting"]}
    assert listed == {"2": "printed pp4", "3": ""}
    # the row printed unlike its recipe is left out of the as-run fraction, the other counts
    assert report["fit_fraction_as_run"] == pytest.approx(1 / 2)
    assert stats.summary([fits, printed, over])["fit_fraction"] == pytest.approx(1 / 3)
