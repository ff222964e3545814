"""bench/validation_fit.py: the host time per merged step of the all-to-all overlap
(`ExecutionOptions.moe_a2a_overlap_host_s`) fitted jointly with the launch time and the
device time per token, refitted without the left-out family, and priced only on the rows
whose host drives merged steps (bench/row_pricing.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import synthetic_outcome

fitting = load_bench("validation_fit")

GRID = fitting.FitGrid(
    fp8_factors=(1.0,),
    host_launch_s=tuple(round(5e-6 * i, 6) for i in range(13)),
    token_device_s=tuple(round(25e-9 * i, 12) for i in range(13)),
    overlap_host_s=tuple(round(0.25e-3 * i, 9) for i in range(13)),
)

# Synthetic MoE rows: predicted seconds max(c + k * t, n * h) + m * o at device time per
# token t, launch time h and merged-step time o (m merged steps; 0 for a row without the
# overlap); published seconds those of a known (h, t, o) on the grid.


def _shape(c, k, n, m):
    def seconds(h, t, o):
        return max(c + k * (t or 0.0), n * h) + m * (o or 0.0)

    return seconds


SHAPES = {
    "g1": _shape(1.0, 2e6, 0.0, 0.0),
    "g2": _shape(0.5, 8e6, 0.0, 0.0),
    "h1": _shape(0.2, 1e5, 1e5, 0.0),
    "o1": _shape(1.0, 2e6, 0.0, 400.0),
    "o2": _shape(0.3, 1e6, 5e4, 900.0),
}


def _predictor(shapes):
    def predict(row_id, factor, host_s, sustained, token_s, overlap_s):
        return shapes[row_id](host_s, token_s, overlap_s)

    return predict


def _moe(row_id, source, truth):
    published = SHAPES[row_id](*truth)
    return dataclasses.replace(
        synthetic_outcome(row_id, source, published, 1.0, generation="Blackwell"), kind="moe"
    )


def test_fit_recovers_the_merged_step_time_with_the_other_moe_terms():
    truth = (40e-6, 150e-9, 1.25e-3)
    sources = {"g1": "MBRIDGE-26.02", "g2": "MOEZOO-X", "h1": "MBRIDGE-25.09"}
    rows = [_moe(r, sources.get(r, "MBRIDGE-26.04"), truth) for r in SHAPES]
    model = fitting.fit_model(rows, _predictor(SHAPES), GRID)
    assert model.moe_host_launch_s == pytest.approx(40e-6)
    assert model.moe_token_device_s == pytest.approx(150e-9)
    assert model.moe_a2a_overlap_host_s == pytest.approx(1.25e-3)
    applied = fitting.apply_model(rows, _predictor(SHAPES), model)
    assert [o.predicted_s for o in applied] == pytest.approx([o.published_s for o in rows])


def test_leave_one_source_out_refits_it_and_a_fixed_grid_value_is_an_input():
    # Each family holds rows that pin the launch time and the device time per token at 0
    # (g*, h1) beside its overlapped row; MBRIDGE wants 0.5 ms per merged step, MOEZOO 2 ms.
    rows = [
        _moe("o1", "MBRIDGE-26.02", (0.0, 0.0, 0.5e-3)),
        _moe("g1", "MBRIDGE-26.02", (0.0, 0.0, 0.0)),
        _moe("o2", "MOEZOO-X", (0.0, 0.0, 2e-3)),
        _moe("g2", "MOEZOO-X", (0.0, 0.0, 0.0)),
        _moe("h1", "MOEZOO-X", (0.0, 0.0, 0.0)),
    ]
    predicted, models = fitting.leave_one_source_out(rows, _predictor(SHAPES), GRID)
    assert models["MBRIDGE"].moe_a2a_overlap_host_s == pytest.approx(2e-3)
    assert models["MOEZOO"].moe_a2a_overlap_host_s == pytest.approx(0.5e-3)
    by_row = {o.row_id: o.predicted_s for o in predicted}
    assert by_row["o1"] == pytest.approx(SHAPES["o1"](0.0, 0.0, 2e-3))
    fixed = dataclasses.replace(GRID, overlap_host_s=(1e-3,))
    assert fixed.overlap_host_fixed
    assert fitting.fit_model([], _predictor(SHAPES), fixed).moe_a2a_overlap_host_s == 1e-3
    assert fitting.fit_model([], _predictor(SHAPES), GRID).moe_a2a_overlap_host_s == 0.0
