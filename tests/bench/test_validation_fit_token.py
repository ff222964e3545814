"""bench/validation_fit.py: the MoE device time per token (`ExecutionOptions.moe_token_device_s`)
fitted jointly with the host-launch time, and refitted without the left-out family."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import synthetic_outcome

fitting = load_bench("validation_fit")
params = load_bench("validation_fit_params")

GRID = params.FitGrid(
    fp8_factors=(1.0,),
    host_launch_s=tuple(round(5e-6 * i, 6) for i in range(13)),
    token_device_s=tuple(round(25e-9 * i, 12) for i in range(13)),
)

# Synthetic MoE rows: predicted seconds max(c + k * t, n * h) at device time per token t and
# launch time h (a GPU part c, k tokens, a host floor of n launches); published seconds
# those of a known (h, t) on the grid.


def _shape(c, k, n):
    def seconds(h, t):
        return max(c + k * (0.0 if t is None else t), n * h)

    return seconds


def _predictor(shapes, seen=None):
    def predict(row_id, factor, host_s, sustained, token_s, expert_s=None):
        if seen is not None:
            seen.append((row_id, token_s))
        return shapes[row_id](host_s, token_s)

    return predict


def _moe(row_id, source, shape, truth):
    return dataclasses.replace(
        synthetic_outcome(row_id, source, shape(*truth), 1.0, generation="Blackwell"),
        kind="moe",
    )


SHAPES = {
    # GPU-bound rows of different token counts: they set the device time per token.
    "g1": _shape(1.0, 2e6, 0.0),
    "g2": _shape(0.5, 8e6, 0.0),
    # Host-bound rows: they set the launch time.
    "h1": _shape(0.2, 1e5, 1e5),
    "h2": _shape(0.1, 1e5, 2e5),
}


def test_fit_recovers_the_device_time_per_token_and_the_launch_time():
    truth = (40e-6, 150e-9)
    rows = [
        _moe("g1", "MBRIDGE-26.02", SHAPES["g1"], truth),
        _moe("g2", "MOEZOO-X", SHAPES["g2"], truth),
        _moe("h1", "MBRIDGE-25.09", SHAPES["h1"], truth),
        _moe("h2", "MOEZOO-X", SHAPES["h2"], truth),
    ]
    model = fitting.fit_model(rows, _predictor(SHAPES), GRID)
    assert model.moe_host_launch_s == pytest.approx(40e-6)
    assert model.moe_token_device_s == pytest.approx(150e-9)
    applied = fitting.apply_model(rows, _predictor(SHAPES), model)
    assert [o.predicted_s for o in applied] == pytest.approx([o.published_s for o in rows])


def test_leave_one_source_out_refits_the_device_time_per_token():
    # Family MBRIDGE wants 100 ns per token, family MOEZOO 250: each is predicted with the
    # other's value, and a family left with no MoE row to fit falls back to 0.
    rows = [
        _moe("g1", "MBRIDGE-26.02", SHAPES["g1"], (0.0, 100e-9)),
        _moe("g2", "MOEZOO-X", SHAPES["g2"], (0.0, 250e-9)),
    ]
    seen = []
    predicted, models = fitting.leave_one_source_out(rows, _predictor(SHAPES, seen), GRID)
    assert models["MBRIDGE"].moe_token_device_s == pytest.approx(250e-9)
    assert models["MOEZOO"].moe_token_device_s == pytest.approx(100e-9)
    by_row = {o.row_id: o.predicted_s for o in predicted}
    assert by_row["g1"] == pytest.approx(SHAPES["g1"](0.0, 250e-9))
    assert by_row["g2"] == pytest.approx(SHAPES["g2"](0.0, 100e-9))
    alone = fitting.fit_model([], _predictor(SHAPES), GRID)
    assert alone.moe_token_device_s == 0.0


def test_a_model_without_a_fitted_device_time_keeps_each_row_s_own():
    seen = []
    model = params.FittedModel(fp8_factor=None, fitted_on=(), moe_host_launch_s=0.0)
    row = _moe("g1", "MBRIDGE-26.02", SHAPES["g1"], (0.0, 100e-9))
    fitting.apply_model([row], _predictor(SHAPES, seen), model)
    assert seen == [("g1", None)]
