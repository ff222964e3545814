"""bench/validation_fit.py: the sustained 16-bit GEMM rate factor in the joint fit and in
leave-one-source-out."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench

stats = load_bench("validation_stats")
fitting = load_bench("validation_fit")
params = load_bench("validation_fit_params")

GRID = params.FitGrid(
    fp8_factors=tuple(round(1.0 - 0.05 * i, 2) for i in range(13)),
    host_launch_s=tuple(round(5e-6 * i, 6) for i in range(13)),
    sustained_factors=tuple(round(1.0 - 0.05 * i, 2) for i in range(9)),
)

# Synthetic rows: predicted seconds max(c + w / f + v / s, n * h) at FP8 factor f, sustained
# factor s and host-launch time h (an fp8 GEMM part w, a 16-bit GEMM part v, a host floor of
# n launches); published seconds those of known (f, s, h), all on the grid: the fits must
# recover them.


def _shape(c, w=0.0, v=0.0, n=0.0):
    def seconds(f, h, s):
        return max(c + w / (1.0 if f is None else f) + v / (1.0 if s is None else s), n * h)

    return seconds


def _predictor(shapes):
    return lambda row_id, f, h, s, t, e=None: shapes[row_id](f, h, s)


def _row(row_id, source, shape, truth, generation, precision="bf16", kind="dense"):
    f, s, h = truth
    return stats.Outcome(
        row_id=row_id,
        source_id=source,
        model="m",
        plan=f"plan {row_id}",
        generation=generation,
        precision=precision,
        kind=kind,
        gpu_type="x",
        num_gpus=8,
        seq_length=4096,
        published_s=shape(f, h, s),
        predicted_s=shape(None, 0.0, None),
        peak_memory_gib=1.0,
        device_memory_gib=80.0,
        fits=True,
    )


SHAPES = {
    "a1": _shape(1.0, v=2.0),
    "a2": _shape(0.5, v=3.0),
    "h1": _shape(1.0, v=2.0),
    "h2": _shape(2.0, v=1.0),
    "b1": _shape(1.0, w=2.0),
    "b2": _shape(0.3, v=1.0, n=1e5),
}


def _rows():
    return [
        _row("a1", "SC21-T1", SHAPES["a1"], (None, 0.85, 0.0), "A100"),
        _row("a2", "MEGASCALE-T2", SHAPES["a2"], (None, 0.85, 0.0), "A100"),
        _row("h1", "MLM-README", SHAPES["h1"], (None, 0.75, 0.0), "H100/H800"),
        _row("h2", "NEMOTRON4-15B", SHAPES["h2"], (None, 0.75, 0.0), "H100/H800"),
        _row("b1", "MBRIDGE-25.09", SHAPES["b1"], (0.65, None, 0.0), "Blackwell", "fp8"),
        # A host-bound Blackwell bf16 MoE row: it sets the launch time, not a factor.
        _row("b2", "MOEZOO", SHAPES["b2"], (None, None, 20e-6), "Blackwell", kind="moe"),
    ]


def test_fit_recovers_each_generation_sustained_factor_and_shares_one_for_the_rest():
    model = fitting.fit_model(_rows(), _predictor(SHAPES), GRID)
    assert model.sustained_factors == {"A100": 0.85, "H100/H800": 0.75}
    assert model.sustained_fitted_on["A100"] == ("a1", "a2")
    assert model.sustained_fitted_on["shared"] == ("a1", "a2", "h1", "h2")
    # One value for both generations' rows: between the two, and Blackwell's.
    assert 0.75 <= model.sustained_factor <= 0.85
    assert model.sustained("Blackwell") == model.sustained_factor
    # The FP8 factor and the launch time are fitted alongside, untouched by the 16-bit rows.
    assert model.fp8_factor == 0.65 and model.fitted_on == ("b1",)
    assert model.moe_host_launch_s == 20e-6
    applied = fitting.apply_model(_rows(), _predictor(SHAPES), model)
    assert [o.error for o in applied] == pytest.approx([0.0] * len(applied))


def test_no_16bit_dense_row_leaves_the_sustained_factor_unfitted():
    rows = [o for o in _rows() if o.generation == "Blackwell"]
    model = fitting.fit_model(rows, _predictor(SHAPES), GRID)
    assert model.sustained_factor is None and model.sustained_factors == {}
    assert model.sustained("A100") is None


def test_leave_one_source_out_refits_the_sustained_factor_without_the_left_out_rows():
    rows = _rows()
    predicted, models = fitting.leave_one_source_out(rows, _predictor(SHAPES), GRID)
    # SC21 out: A100 keeps MegaScale's row; MEGASCALE out: SC21's. Both still 0.85.
    assert models["SC21"].sustained_factors["A100"] == 0.85
    assert models["SC21"].sustained_fitted_on["A100"] == ("a2",)
    # Both A100 families out in turn: an A100 family is predicted with the other's value.
    left = fitting.leave_one_source_out(
        [o for o in rows if o.source_family != "MEGASCALE"], _predictor(SHAPES), GRID
    )[1]
    assert "A100" not in left["SC21"].sustained_factors
    assert left["SC21"].sustained("A100") == left["SC21"].sustained_factor == 0.75
    by_row = {o.row_id: o.predicted_s for o in predicted}
    assert by_row["h1"] == SHAPES["h1"](None, 20e-6, models["MLM"].sustained("H100/H800"))
    assert models["MLM"].sustained_fitted_on["H100/H800"] == ("h2",)


def test_leave_one_source_out_reports_each_family_before_its_refit():
    rows = _rows()
    lines: list[str] = []
    fitting.leave_one_source_out(rows, _predictor(SHAPES), GRID, progress=lines.append)
    families = sorted({o.source_family for o in rows})
    assert len(lines) == len(families)
    for index, line in enumerate(lines, start=1):
        assert line.endswith(f"; {index} of {len(families)})")
    named = sorted(line.split()[2] for line in lines)
    assert named == families
    sizes = {line.split()[2]: int(line.split("(")[1].split()[0]) for line in lines}
    assert sizes == {f: sum(o.source_family == f for o in rows) for f in families}


def test_rows_whose_options_fix_the_factor_neither_fit_nor_move():
    # A 2021-option A100 row (the factor fixed by its options) beside a current-stack one:
    # the A100 factor is the current row's alone, and the fixed row is predicted as before.
    fixed = dataclasses.replace(
        _row("a1", "SC21-T1", SHAPES["a1"], (None, 1.0, 0.0), "A100"), sustained_fixed=True
    )
    current = _row("a2", "MEGASCALE-T2", SHAPES["a2"], (None, 0.7, 0.0), "A100")
    shapes = dict(SHAPES, a1=lambda f, h, s: SHAPES["a1"](f, h, None))
    model = fitting.fit_model([fixed, current], _predictor(shapes), GRID)
    assert model.sustained_factors == {"A100": 0.7}
    assert model.sustained_fitted_on["A100"] == ("a2",)
    applied = fitting.apply_model([fixed, current], _predictor(shapes), model)
    assert [o.error for o in applied] == pytest.approx([0.0, 0.0])
