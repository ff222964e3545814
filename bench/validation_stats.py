"""Error statistics of the published-runs validation (`bench/validate_published.py`).

Pure functions over `Outcome` records (one per expressible published run):
- `summary`: median |error|, signed median, p90 |error|, fit fraction, row count;
- `kendall_tau`: rank agreement of predicted and published throughput inside strategy
  groups (same model, GPU, sequence length: several published strategies), pooled over the
  groups' pairs (Kendall 1938, tau-a per group, concordant minus discordant over pairs);
- `fit_model` / `apply_model`: one global FP8 GEMM rate factor
  (`ExecutionOptions.fp8_gemm_rate_factor`), chosen from the predictions on a grid of
  factors to minimise the median |log(predicted / published)| of the dense FP8 rows. One
  value for every GPU generation: the dense FP8 rows of each generation come from a single
  source family, so a per-generation value could never be checked out of sample;
- the same fit picks one global MoE host-launch time (`ExecutionOptions.moe_host_launch_s`)
  from the MoE rows' predictions on a grid of (FP8 factor, launch time), at the FP8 factor
  the dense rows chose, by the mean (not the median) |log(predicted / published)|: the host
  floor binds on the few rows with little GPU work per layer, and a median fit would pick
  the value that moves the majority of rows instead; without MoE rows to fit, 0 (no floor);
- `leave_one_source_out`: for each source family, the model fitted on every other
  family, applied to that family's rows; the errors of those rows are out of sample.

Errors are relative: (predicted - published) / published seconds per iteration.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from costmodel.execution import FP8_GEMM_RATE_FACTOR


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One published run beside its prediction."""

    row_id: str
    source_id: str
    model: str
    plan: str
    generation: str
    """A100, H100/H800 or Blackwell."""
    precision: str
    """Job precision as priced (bf16 or fp8)."""
    kind: str
    """dense or moe."""
    gpu_type: str
    num_gpus: int
    seq_length: int
    published_s: float
    """Published seconds per iteration."""
    predicted_s: float
    """Predicted seconds per iteration."""
    peak_memory_gib: float
    device_memory_gib: float
    fits: bool

    @property
    def error(self) -> float:
        """(predicted - published) / published seconds per iteration."""
        return (self.predicted_s - self.published_s) / self.published_s

    @property
    def source_family(self) -> str:
        """The source without release or table suffix (``MBRIDGE-26.04`` -> ``MBRIDGE``):
        releases of one recipe book share their recipes, so they are left out together."""
        return self.source_id.split("-")[0]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` by linear interpolation between order statistics
    (Hyndman-Fan type 7, numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(outcomes: list[Outcome]) -> dict[str, float | int]:
    """Median |error|, signed median error, p90 |error|, fit fraction and row count."""
    if not outcomes:
        return {"num_rows": 0}
    errors = [o.error for o in outcomes]
    absolute = [abs(e) for e in errors]
    return {
        "num_rows": len(outcomes),
        "median_abs_error": statistics.median(absolute),
        "signed_median_error": statistics.median(errors),
        "p90_abs_error": quantile(absolute, 0.9),
        "fit_fraction": sum(o.fits for o in outcomes) / len(outcomes),
    }


def grouped(outcomes: Iterable[Outcome], key: Callable[[Outcome], str]) -> dict[str, list[Outcome]]:
    """Outcomes by ``key``, keys sorted."""
    groups: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(key(outcome), []).append(outcome)
    return dict(sorted(groups.items()))


def strategy_key(outcome: Outcome) -> str:
    """Same model, GPU type and sequence length: the strategies a team chose between."""
    return f"{outcome.model} | {outcome.gpu_type} | seq {outcome.seq_length}"


def concordance(outcomes: list[Outcome]) -> tuple[int, int, int]:
    """(concordant, discordant, pairs) of predicted vs published tokens/s per GPU; pairs
    tied in either order count in neither."""
    rates = [(1 / (o.published_s * o.num_gpus), 1 / (o.predicted_s * o.num_gpus)) for o in outcomes]
    concordant = discordant = pairs = 0
    for i, (pub_i, pred_i) in enumerate(rates):
        for pub_j, pred_j in rates[i + 1 :]:
            pairs += 1
            sign = (pub_i - pub_j) * (pred_i - pred_j)
            concordant += sign > 0
            discordant += sign < 0
    return concordant, discordant, pairs


def kendall_tau(outcomes: list[Outcome]) -> dict[str, object]:
    """Pooled Kendall tau over the strategy groups with two or more rows, and per group."""
    per_group: dict[str, float] = {}
    total_c = total_d = total_pairs = 0
    for name, members in grouped(outcomes, strategy_key).items():
        if len(members) < 2:
            continue
        c, d, pairs = concordance(members)
        per_group[name] = (c - d) / pairs
        total_c, total_d, total_pairs = total_c + c, total_d + d, total_pairs + pairs
    tau = (total_c - total_d) / total_pairs if total_pairs else float("nan")
    return {"kendall_tau": tau, "pairs": total_pairs, "groups": per_group}


Fp8Grid = dict[str, dict[float, float]]
"""Row id -> {fp8_gemm_rate_factor: predicted seconds} for the FP8 rows."""

MoeGrid = dict[str, dict[tuple[float, float], float]]
"""Row id -> {(fp8_gemm_rate_factor, moe_host_launch_s): predicted seconds} for the MoE rows
(the factor axis holds only the default for bf16 rows)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedModel:
    """The fitted global parameter and the rows that fitted it."""

    fp8_factor: float | None
    """fp8_gemm_rate_factor for every GPU generation; None when no dense FP8 row fitted it
    (the predictions keep the factor they were made with)."""
    fitted_on: tuple[str, ...]
    """Row ids of the dense FP8 rows that fitted it."""
    moe_host_launch_s: float | None = None
    """moe_host_launch_s for every GPU generation; None when the predictions keep the value
    they were made with (no MoE grid given)."""
    host_fitted_on: tuple[str, ...] = ()
    """Row ids of the MoE rows that fitted it (none: the value is 0)."""


def _log_median(pairs: list[tuple[float, float]]) -> float:
    return statistics.median(abs(math.log(pred / pub)) for pred, pub in pairs)


def fit_model(
    outcomes: list[Outcome], grid: Fp8Grid, moe_grid: MoeGrid | None = None
) -> FittedModel:
    """The grid factor whose predictions minimise the median |log(predicted / published)|
    over the dense FP8 rows of ``outcomes`` (ties: the larger factor). MoE rows are left
    out: they carry the token dispatcher's and grouped GEMMs' errors too. With ``moe_grid``,
    then the MoE host-launch time that minimises the mean |log(predicted / published)| over
    the MoE rows at that factor (ties: the smaller time); 0 when ``outcomes`` hold no MoE
    row."""
    fp8 = [o for o in outcomes if o.row_id in grid and o.kind == "dense"]
    factor = None
    if fp8:
        candidates = sorted(grid[fp8[0].row_id], reverse=True)
        factor = min(
            candidates,
            key=lambda f: _log_median([(grid[o.row_id][f], o.published_s) for o in fp8]),
        )
    fitted = FittedModel(fp8_factor=factor, fitted_on=tuple(o.row_id for o in fp8))
    if moe_grid is None:
        return fitted
    moe = [o for o in outcomes if o.row_id in moe_grid]
    if not moe:
        return dataclasses.replace(fitted, moe_host_launch_s=0.0)
    times = sorted({h for o in moe for _, h in moe_grid[o.row_id]})
    host = min(
        times,
        key=lambda h: statistics.fmean(
            abs(math.log(_moe_prediction(moe_grid, o, fitted, h) / o.published_s)) for o in moe
        ),
    )
    return dataclasses.replace(
        fitted, moe_host_launch_s=host, host_fitted_on=tuple(o.row_id for o in moe)
    )


def _moe_prediction(moe_grid: MoeGrid, outcome: Outcome, model: FittedModel, host: float) -> float:
    """A MoE row's prediction at ``host`` seconds per launch and the model's FP8 factor (the
    default `FP8_GEMM_RATE_FACTOR` when none was fitted; a bf16 row's grid has one factor)."""
    row = moe_grid[outcome.row_id]
    factors = {f for f, _ in row}
    factor = model.fp8_factor if model.fp8_factor is not None else FP8_GEMM_RATE_FACTOR
    if len(factors) == 1:
        (factor,) = factors
    return row[(factor, host)]


def apply_model(
    outcomes: list[Outcome], grid: Fp8Grid, model: FittedModel, moe_grid: MoeGrid | None = None
) -> list[Outcome]:
    """FP8 rows re-predicted with the fitted factor, MoE rows (with ``moe_grid`` and a fitted
    host-launch time) with the factor and the host-launch time; other rows unchanged."""
    result = []
    for o in outcomes:
        if moe_grid and o.row_id in moe_grid and model.moe_host_launch_s is not None:
            o = dataclasses.replace(
                o, predicted_s=_moe_prediction(moe_grid, o, model, model.moe_host_launch_s)
            )
        elif model.fp8_factor is not None and o.row_id in grid:
            o = dataclasses.replace(o, predicted_s=grid[o.row_id][model.fp8_factor])
        result.append(o)
    return result


def fp8_factors_used(outcomes: list[Outcome], grid: Fp8Grid) -> set[float]:
    """The FP8 factors the in-sample fit and every leave-one-source-out fit choose, and the
    default: the only ones the MoE host-launch grid is needed at."""
    families = {o.source_family for o in outcomes}
    models = [fit_model(outcomes, grid)] + [
        fit_model([o for o in outcomes if o.source_family != f], grid) for f in families
    ]
    return {m.fp8_factor for m in models if m.fp8_factor is not None} | {FP8_GEMM_RATE_FACTOR}


def leave_one_source_out(
    outcomes: list[Outcome], grid: Fp8Grid, moe_grid: MoeGrid | None = None
) -> tuple[list[Outcome], dict[str, FittedModel]]:
    """Every outcome predicted with the model fitted on the other source families, and per
    family the model used (generations without other rows keep factor and scale 1; the MoE
    host-launch time is 0 when no other family has MoE rows)."""
    predicted: list[Outcome] = []
    models: dict[str, FittedModel] = {}
    for family, rows in grouped(outcomes, lambda o: o.source_family).items():
        others = [o for o in outcomes if o.source_family != family]
        models[family] = fit_model(others, grid, moe_grid)
        predicted.extend(apply_model(rows, grid, models[family], moe_grid))
    order = {o.row_id: i for i, o in enumerate(outcomes)}
    return sorted(predicted, key=lambda o: order[o.row_id]), models
