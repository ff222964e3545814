"""The fitted parameters of the published-runs validation (`bench/validate_published.py`).

- `fit_model` / `apply_model`: the fitted parameters of the Megatron runtime, fitted jointly
  by grid coordinate descent on one objective over the rows' predictions (`Predict`): the
  FP8 GEMM rate factor (`ExecutionOptions.fp8_gemm_rate_factor`), one value per GPU
  generation with FP8 rows and one shared value for the generations without; the NVFP4
  GEMM rate factor (`ExecutionOptions.fp4_gemm_rate_factor`), one value per generation with
  NVFP4 rows (a generation without takes its FP8 factor, as the cost model's unfitted
  default does: `costmodel.fitted_rates.FP4_GEMM_RATE_FACTORS`); the sustained
  16-bit GEMM rate factor (`ExecutionOptions.sustained_gemm_rate_factor`), one value per
  generation with dense 16-bit rows and one shared value for the others; and the MoE
  host-launch time of a Python-level launch (`ExecutionOptions.moe_host_launch_s`), the host
  time of a launch Transformer Engine issues per local expert
  (`ExecutionOptions.moe_expert_launch_s`) and the MoE device time per token
  (`ExecutionOptions.moe_token_device_s`), one value each for all generations;
- `leave_one_source_out`: for each source family, the model fitted on every other
  family, applied to that family's rows; the errors of those rows are out of sample.

The fits key their per-generation factors by `Outcome.fit_generation` (the profile's
`profiles.schema_device.DeviceSpec.generation`, the key of the cost model's tables), not by the
reporting `Outcome.generation`: Blackwell Ultra rows (B300, GB300) report as Blackwell and
fit their own factors. The records and their error statistics are `bench/validation_stats.py`;
the grid of candidate values (`FitGrid`) and the fitted parameters (`FittedModel`) are
`bench/validation_fit_params.py`; what one descent fits and holds, and the assembly of the
`FittedModel`, `bench/validation_fit_keys.py`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

from validation_fit_keys import (
    FP8,
    SUSTAINED,
    FitRows,
    MoeTerms,
    Point,
    descent_keys,
    fitted_model,
)
from validation_fit_params import FitGrid, FittedModel, is_fp4_key
from validation_stats import Outcome, grouped

Predict = Callable[[str, float | None, float, float | None, float | None, float | None], float]
"""(row id, low-precision GEMM rate factor, moe_host_launch_s, sustained_gemm_rate_factor,
moe_token_device_s, moe_expert_launch_s) -> predicted seconds per iteration of that row under
those options; a factor, device time per token or expert launch time None: the row's own.
The low-precision factor is ``fp8_gemm_rate_factor`` for an FP8 row and
``fp4_gemm_rate_factor`` for an NVFP4 row. A row ignores an option that does not apply to it
(a bf16 row the low-precision factor, a dense row the launch times and the device time per
token, a row without 16-bit GEMMs the sustained factor)."""

Progress = Callable[[str], None]
"""Receives one line per step of a long fit (`leave_one_source_out`); `no_progress` drops
them."""


def no_progress(_line: str) -> None:
    """A `Progress` that reports nothing."""


LOW_PRECISION = ("fp8", "nvfp4")
"""Job precisions whose linear-layer GEMMs take a low-precision rate factor."""


def _log_error(predicted_s: float, outcome: Outcome) -> float:
    return abs(math.log(predicted_s / outcome.published_s))


def _row_error(o: Outcome, predict: Predict, point: Point, moe: MoeTerms) -> float:
    g = o.fit_key
    host, expert, token = moe
    return _log_error(
        predict(o.row_id, point.get((FP8, g)), host, point.get((SUSTAINED, g)), token, expert), o
    )


def _objective(rows: FitRows, predict: Predict, point: Point, moe: MoeTerms) -> float:
    """Sum over generations of the median |log(predicted / published)| of the generation's
    dense FP8 rows and of its dense 16-bit rows, plus the mean |log(predicted / published)|
    of the MoE rows."""
    total = sum(
        statistics.median(_row_error(o, predict, point, moe) for o in members)
        for by_generation in (rows.fp8, rows.sixteen)
        for members in by_generation.values()
    )
    if rows.moe:
        total += statistics.fmean(_row_error(o, predict, point, moe) for o in rows.moe)
    return total


def _coordinate_descent(
    rows: FitRows,
    predict: Predict,
    grid: FitGrid,
    keys: dict[tuple[str, str], str],
    fixed: Point | None = None,
) -> tuple[Point, MoeTerms]:
    """Grid coordinate descent on `_objective` from the bare rates (factors 1), no host
    floor (both launch times at their grid's least, 0 on the shipped grids) and no MoE
    device time per token: each factor, then the Python-level launch time, then the
    per-expert launch time, then the device time per token, over its whole grid, until a
    round changes nothing. ``keys`` maps each (kind, generation) to the fitted value it uses
    (several generations share one value when they map to one key); ``fixed`` holds (kind,
    generation) values that are not fitted. Ties: the larger factor, the smaller launch
    and device times."""
    candidates = {FP8: grid.fp8_factors, SUSTAINED: grid.sustained_factors}
    values = {(kind, k): max(candidates[kind]) for (kind, _), k in keys.items()}
    host = min(grid.host_launch_s) if rows.moe else 0.0
    tied = grid.expert_launch_tied
    expert = host if tied else (min(grid.expert_launch_s) if rows.moe else 0.0)
    token = min(grid.token_device_s) if rows.moe else 0.0

    def point(trial: dict[tuple[str, str], float]) -> Point:
        return (fixed or {}) | {(kind, g): trial[kind, k] for (kind, g), k in keys.items()}

    rounds = sum(map(len, candidates.values())) + len(grid.host_launch_s)
    for _ in range(rounds + len(grid.expert_launch_s) + len(grid.token_device_s)):
        before = (dict(values), host, expert, token)
        for key in sorted(values):
            values[key] = min(
                sorted(candidates[key[0]], reverse=True),
                key=lambda f, key=key: _objective(
                    rows, predict, point(values | {key: f}), (host, expert, token)
                ),
            )
        if rows.moe:
            host = min(
                sorted(grid.host_launch_s),
                key=lambda h: _objective(
                    rows, predict, point(values), (h, h if tied else expert, token)
                ),
            )
            expert = (
                host
                if tied
                else min(
                    sorted(grid.expert_launch_s),
                    key=lambda e: _objective(rows, predict, point(values), (host, e, token)),
                )
            )
            token = min(
                sorted(grid.token_device_s),
                key=lambda t: _objective(rows, predict, point(values), (host, expert, t)),
            )
        if (values, host, expert, token) == before:
            break
    return point(values), (host, expert, token)


def _fit_rows(outcomes: list[Outcome]) -> FitRows:
    dense = [o for o in outcomes if o.kind == "dense"]
    return FitRows(
        fp8=grouped((o for o in dense if o.precision in LOW_PRECISION), lambda o: o.fit_key),
        sixteen=grouped(
            (o for o in dense if o.precision in SIXTEEN_BIT and not o.sustained_fixed),
            lambda o: o.fit_key,
        ),
        moe=[o for o in outcomes if o.kind == "moe"],
    )


SIXTEEN_BIT = ("bf16", "fp16")
"""Job precisions whose GEMMs run on the 16-bit curves the sustained factor scales."""


def fit_model(
    outcomes: list[Outcome], predict: Predict, grid: FitGrid, *, per_generation: bool = False
) -> FittedModel:
    """The FP8 and NVFP4 GEMM rate factors, the sustained 16-bit GEMM rate factors, the MoE
    host-launch times (Python-level and per expert) and the MoE device time per token
    fitted jointly on ``outcomes`` by
    grid coordinate descent (`_coordinate_descent`) on one objective: per generation the
    median |log(predicted / published)| of its dense FP8 rows, that of its dense NVFP4 rows
    and that of its dense 16-bit rows (robust to the rows' other residuals), plus the mean
    |log(predicted / published)| of all MoE rows (the host floor binds on the few rows with
    little GPU work per layer; a median would follow the majority it does not touch). MoE
    rows inform the factors of their generation only through that mean; the dense rows
    carry the medians.

    The sustained factor of a generation without dense 16-bit rows is the shared one,
    fitted first on every dense 16-bit row together (`_shared_sustained`; MoE rows do not
    move it: their residuals are the MoE layer's); which factors one descent then fits and
    which it holds is `validation_fit_keys.descent_keys`, with ``per_generation`` as there.
    No MoE row: all three MoE values 0 (no floor, no added time). A one-value
    ``grid.host_launch_s`` fixes the Python-level launch time (`FitGrid.host_launch_fixed`),
    a one-value ``grid.expert_launch_s`` the per-expert one (`FitGrid.expert_launch_fixed`;
    with `FitGrid.expert_launch_tied` it follows the Python-level one), a one-value
    ``grid.token_device_s`` the device time per token (`FitGrid.token_device_fixed`)."""
    rows = _fit_rows(outcomes)
    low_rows = [o for o in outcomes if o.precision in LOW_PRECISION]
    shared = _shared_sustained(rows, predict, grid)
    shared_fp8 = _shared_fp8(rows, predict, grid)
    keys = descent_keys(outcomes, low_rows, rows, shared, shared_fp8, per_generation)
    point, moe = _coordinate_descent(rows, predict, grid, keys.free, keys.fixed)
    fp8_factor = point[FP8, keys.fp8_gens[0]] if keys.fp8_gens else None
    if per_generation and shared_fp8 is not None:
        fp8_factor = shared_fp8
    elif per_generation and keys.fp8_gens:
        all_keys = {(FP8, g): "all" for g in keys.fp8_gens}
        free = all_keys | keys.fp4 | keys.sixteen
        fp8_factor = _coordinate_descent(rows, predict, grid, free, keys.fixed)[0][
            FP8, keys.fp8_gens[0]
        ]
    return fitted_model(
        rows,
        low_rows,
        grid,
        keys,
        point,
        moe,
        fp8_factor=fp8_factor,
        shared=shared,
        shared_fp8=shared_fp8,
        per_generation=per_generation,
    )


def _shared_fp8(rows: FitRows, predict: Predict, grid: FitGrid) -> float | None:
    """One FP8 factor for every generation, fitted on the dense FP8 rows alone (`_objective`
    over them, each generation's rows a median term; NVFP4 rows apart); None without such
    rows."""
    fp8 = {g: members for g, members in rows.fp8.items() if not is_fp4_key(g)}
    if not fp8:
        return None
    dense = FitRows(fp8=fp8, sixteen={}, moe=[])
    keys = {(FP8, g): "all" for g in fp8}
    point, _ = _coordinate_descent(dense, predict, grid, keys)
    return point[FP8, min(fp8)]


def _shared_sustained(rows: FitRows, predict: Predict, grid: FitGrid) -> float | None:
    """One sustained factor for every generation, fitted on the dense 16-bit rows alone
    (`_objective` over them); None without such rows."""
    if not rows.sixteen:
        return None
    sixteen = FitRows(fp8={}, sixteen=rows.sixteen, moe=[])
    keys = {(SUSTAINED, g): "all" for g in rows.sixteen}
    point, _ = _coordinate_descent(sixteen, predict, grid, keys)
    return point[SUSTAINED, min(rows.sixteen)]


def apply_model(outcomes: list[Outcome], predict: Predict, model: FittedModel) -> list[Outcome]:
    """Every row re-predicted with the model's FP8 and sustained factors of its generation
    and its MoE launch times and device time per token (a row ignores what does not apply to
    it); a factor, device time per token or per-expert launch time the model did not fit
    (None) keeps the row's own."""
    result = []
    for o in outcomes:
        factor, sustained = model.factor(o.fit_key), model.sustained(o.fit_key)
        host = model.moe_host_launch_s if model.moe_host_launch_s is not None else 0.0
        token, expert = model.moe_token_device_s, model.moe_expert_launch_s
        predicted = predict(o.row_id, factor, host, sustained, token, expert)
        result.append(dataclasses.replace(o, predicted_s=predicted))
    return result


def leave_one_source_out(
    outcomes: list[Outcome],
    predict: Predict,
    grid: FitGrid,
    *,
    per_generation: bool = False,
    progress: Progress = no_progress,
) -> tuple[list[Outcome], dict[str, FittedModel]]:
    """Every outcome predicted with the model fitted (`fit_model`) on the other source
    families, and per family the model used: every fitted parameter is refitted without
    the family's rows. A generation left without FP8 (dense 16-bit) rows takes the FP8
    (sustained) factor fitted on all remaining such rows together, one without NVFP4 rows
    its FP8 factor (`FittedModel.factor`); without remaining MoE
    rows the launch times and the device time per token are 0, unless the grid fixes them
    (`FitGrid.host_launch_fixed`, `FitGrid.expert_launch_fixed`,
    `FitGrid.token_device_fixed`). ``progress`` gets one line
    per family before its refit."""
    predicted: list[Outcome] = []
    models: dict[str, FittedModel] = {}
    families = grouped(outcomes, lambda o: o.source_family)
    for index, (family, rows) in enumerate(families.items(), start=1):
        progress(f"refit without {family} ({len(rows)} rows; {index} of {len(families)})")
        others = [o for o in outcomes if o.source_family != family]
        models[family] = fit_model(others, predict, grid, per_generation=per_generation)
        predicted.extend(apply_model(rows, predict, models[family]))
    order = {o.row_id: i for i, o in enumerate(outcomes)}
    return sorted(predicted, key=lambda o: order[o.row_id]), models
