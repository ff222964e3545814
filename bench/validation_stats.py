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


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedModel:
    """The fitted global parameter and the rows that fitted it."""

    fp8_factor: float | None
    """fp8_gemm_rate_factor for every GPU generation; None when no dense FP8 row fitted it
    (the predictions keep the factor they were made with)."""
    fitted_on: tuple[str, ...]
    """Row ids of the dense FP8 rows that fitted it."""


def _log_median(pairs: list[tuple[float, float]]) -> float:
    return statistics.median(abs(math.log(pred / pub)) for pred, pub in pairs)


def fit_model(outcomes: list[Outcome], grid: Fp8Grid) -> FittedModel:
    """The grid factor whose predictions minimise the median |log(predicted / published)|
    over the dense FP8 rows of ``outcomes`` (ties: the larger factor). MoE rows are left
    out: they carry the token dispatcher's and grouped GEMMs' errors too."""
    fp8 = [o for o in outcomes if o.row_id in grid and o.kind == "dense"]
    if not fp8:
        return FittedModel(fp8_factor=None, fitted_on=())
    candidates = sorted(grid[fp8[0].row_id], reverse=True)
    factor = min(
        candidates,
        key=lambda f: _log_median([(grid[o.row_id][f], o.published_s) for o in fp8]),
    )
    return FittedModel(fp8_factor=factor, fitted_on=tuple(o.row_id for o in fp8))


def apply_model(outcomes: list[Outcome], grid: Fp8Grid, model: FittedModel) -> list[Outcome]:
    """FP8 rows re-predicted with the fitted factor; other rows unchanged."""
    if model.fp8_factor is None:
        return list(outcomes)
    return [
        dataclasses.replace(o, predicted_s=grid[o.row_id][model.fp8_factor])
        if o.row_id in grid
        else o
        for o in outcomes
    ]


def leave_one_source_out(
    outcomes: list[Outcome], grid: Fp8Grid
) -> tuple[list[Outcome], dict[str, FittedModel]]:
    """Every outcome predicted with the model fitted on the other source families, and per
    family the model used (generations without other rows keep factor and scale 1)."""
    predicted: list[Outcome] = []
    models: dict[str, FittedModel] = {}
    for family, rows in grouped(outcomes, lambda o: o.source_family).items():
        others = [o for o in outcomes if o.source_family != family]
        models[family] = fit_model(others, grid)
        predicted.extend(apply_model(rows, grid, models[family]))
    order = {o.row_id: i for i, o in enumerate(outcomes)}
    return sorted(predicted, key=lambda o: order[o.row_id]), models
