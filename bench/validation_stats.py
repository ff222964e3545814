"""Error statistics of the published-runs validation (`bench/validate_published.py`).

Pure functions over `Outcome` records (one per expressible published run):
- `summary`: median |error|, signed median, p90 |error|, fit fraction, row count;
- `kendall_tau`: rank agreement of predicted and published throughput inside strategy
  groups (`strategy_key`: one source release, model, cluster, sequence length and printed
  precision, two or more different strategies), pooled over the groups' pairs (Kendall
  1938, tau-a per group, concordant minus discordant over pairs);
- `fit_model` / `apply_model`: the fitted parameters of the Megatron runtime, fitted jointly
  by grid coordinate descent on one objective over the rows' predictions (`Predict`): the
  FP8 GEMM rate factor (`ExecutionOptions.fp8_gemm_rate_factor`), one value per GPU
  generation with FP8 rows and one shared value for the generations without, and the MoE
  host-launch time (`ExecutionOptions.moe_host_launch_s`), one value for all generations;
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
    global_batch_size: int | None = None
    """Sequences per iteration of the published run; None: not known (a group's strategies
    are then compared by seconds per iteration, as if they processed the same tokens)."""
    precision_text: str = ""
    """The row's precision as the source printed it (``FP8``, ``MXFP8``, ...): FP8 recipes
    that `precision` prices alike are different software. Empty: `precision`."""
    not_fit_reason: str = ""
    """Why a row predicted not to fit may not have run as printed (its printed
    configuration differs from its release's recipe); empty when none is known."""

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
    """The strategy group of ``outcome``: several strategies for the same model on the same
    kind of cluster (issue 33, Build 6), run by the same software. One source release (the
    ``source_id``: a Megatron-Bridge release is its own source), model, GPU type, sequence
    length and printed precision (an FP8 recipe, per-tensor current scaling or MXFP8, is
    software too). The number of GPUs is part of the strategy, not of the group: the issue's
    own groups (MegaScale's Table 2, SC21's Table 2) compare the same model at several
    data-parallel sizes by throughput per GPU. Rows that differ in any of the key's fields
    differ by more than their plan, and their published order is not the plan's to explain."""
    precision = outcome.precision_text or outcome.precision
    return (
        f"{outcome.source_id} | {outcome.model} | {outcome.gpu_type} | "
        f"seq {outcome.seq_length} | {precision}"
    )


def strategy_of(outcome: Outcome) -> str:
    """What a team chose inside a strategy group: the number of GPUs, the plan and the
    global batch."""
    return f"{outcome.num_gpus} GPUs | {outcome.plan} | gbs {outcome.global_batch_size}"


def tokens_per_s_per_gpu(outcome: Outcome) -> tuple[float, float]:
    """(published, predicted) tokens per second per GPU: global batch x sequence / (seconds
    per iteration x GPUs); without a known global batch, one sequence per iteration."""
    tokens = (outcome.global_batch_size or 1) * outcome.seq_length
    gpus = outcome.num_gpus
    return tokens / (outcome.published_s * gpus), tokens / (outcome.predicted_s * gpus)


def strategy_rates(outcomes: list[Outcome]) -> dict[str, tuple[float, float]]:
    """Strategy (`strategy_of`) -> (published, predicted) tokens/s per GPU of one group's
    ``outcomes``. Rows with an identical strategy are one strategy: their rates are
    averaged (the prediction is the same; the published figures are repeat measurements)."""
    rates: dict[str, list[tuple[float, float]]] = {}
    for outcome in outcomes:
        rates.setdefault(strategy_of(outcome), []).append(tokens_per_s_per_gpu(outcome))
    return {
        name: (statistics.fmean(p for p, _ in pairs), statistics.fmean(q for _, q in pairs))
        for name, pairs in sorted(rates.items())
    }


def concordance(rates: list[tuple[float, float]]) -> tuple[int, int, int]:
    """(concordant, discordant, pairs) of (published, predicted) rates; pairs tied in
    either order count in neither."""
    concordant = discordant = pairs = 0
    for i, (pub_i, pred_i) in enumerate(rates):
        for pub_j, pred_j in rates[i + 1 :]:
            pairs += 1
            sign = (pub_i - pub_j) * (pred_i - pred_j)
            concordant += sign > 0
            discordant += sign < 0
    return concordant, discordant, pairs


def kendall_tau(outcomes: list[Outcome]) -> dict[str, object]:
    """Pooled Kendall tau over the strategy groups (`strategy_key`) with two or more
    different strategies (`strategy_rates`), and per group; NaN when no group has two.
    ``strategies`` gives each such group's (published, predicted) tokens/s per GPU by
    strategy."""
    per_group: dict[str, float] = {}
    strategies: dict[str, dict[str, tuple[float, float]]] = {}
    total_c = total_d = total_pairs = 0
    for name, members in grouped(outcomes, strategy_key).items():
        rates = strategy_rates(members)
        if len(rates) < 2:
            continue
        c, d, pairs = concordance(list(rates.values()))
        per_group[name] = (c - d) / pairs
        strategies[name] = rates
        total_c, total_d, total_pairs = total_c + c, total_d + d, total_pairs + pairs
    tau = (total_c - total_d) / total_pairs if total_pairs else float("nan")
    return {"kendall_tau": tau, "pairs": total_pairs, "groups": per_group, "strategies": strategies}


Predict = Callable[[str, float | None, float], float]
"""(row id, fp8_gemm_rate_factor, moe_host_launch_s) -> predicted seconds per iteration of
that row under those two options; factor None: the row's own. A row ignores an option
that does not apply to it (a bf16 row the factor, a dense row the launch time)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FitGrid:
    """Candidate values of the fitted parameters."""

    fp8_factors: tuple[float, ...]
    """Candidate `ExecutionOptions.fp8_gemm_rate_factor` values."""
    host_launch_s: tuple[float, ...]
    """Candidate `ExecutionOptions.moe_host_launch_s` values."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedModel:
    """The fitted parameters and the rows that fitted each."""

    fp8_factor: float | None
    """The FP8 factor fitted with one value shared by every generation (all the FP8 rows
    together): the value of a generation without FP8 rows of its own. None when no FP8 row
    fitted it (the predictions keep the factor they were made with)."""
    fitted_on: tuple[str, ...]
    """Row ids of the FP8 rows (dense and MoE) that fitted ``fp8_factor``."""
    fp8_factors: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU generation -> its FP8 factor, for the generations with FP8 rows of their own
    (with ``per_generation`` off: empty, ``fp8_factor`` for every generation)."""
    fp8_fitted_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """GPU generation -> row ids of the FP8 rows that fitted its factor."""
    moe_host_launch_s: float | None = None
    """moe_host_launch_s for every GPU generation; 0 when no MoE row fitted it (no floor)."""
    host_fitted_on: tuple[str, ...] = ()
    """Row ids of the MoE rows that fitted it."""

    def factor(self, generation: str) -> float | None:
        """The FP8 factor of ``generation``: its own, else the shared one."""
        return self.fp8_factors.get(generation, self.fp8_factor)


def _log_error(predicted_s: float, outcome: Outcome) -> float:
    return abs(math.log(predicted_s / outcome.published_s))


def _objective(
    dense: dict[str, list[Outcome]],
    moe: list[Outcome],
    predict: Predict,
    factors: dict[str, float],
    host: float,
) -> float:
    """Sum over generations of the median |log(predicted / published)| of the generation's
    dense FP8 rows, plus the mean |log(predicted / published)| of the MoE rows."""
    total = sum(
        statistics.median(_log_error(predict(o.row_id, factors[g], host), o) for o in rows)
        for g, rows in dense.items()
    )
    if moe:
        total += statistics.fmean(
            _log_error(predict(o.row_id, factors.get(o.generation), host), o) for o in moe
        )
    return total


def _coordinate_descent(
    dense: dict[str, list[Outcome]],
    moe: list[Outcome],
    predict: Predict,
    grid: FitGrid,
    keys: dict[str, str],
) -> tuple[dict[str, float], float]:
    """Grid coordinate descent on `_objective` from the bare rate (factor 1) and no host
    floor (launch time 0): each factor, then the launch time, over its whole grid, until a
    round changes nothing. ``keys`` maps each generation to the factor it uses (several
    generations share one factor when they map to one key). Ties: the larger factor, the
    smaller launch time."""
    values = {k: max(grid.fp8_factors) for k in set(keys.values())}
    host = min(grid.host_launch_s) if moe else 0.0

    def cost(trial: dict[str, float], launch_s: float) -> float:
        return _objective(dense, moe, predict, {g: trial[k] for g, k in keys.items()}, launch_s)

    for _ in range(len(grid.fp8_factors) + len(grid.host_launch_s)):
        before = (dict(values), host)
        for key in sorted(values):
            values[key] = min(
                sorted(grid.fp8_factors, reverse=True),
                key=lambda f, key=key: cost(values | {key: f}, host),
            )
        if moe:
            host = min(sorted(grid.host_launch_s), key=lambda h: cost(values, h))
        if (values, host) == before:
            break
    return {g: values[k] for g, k in keys.items()}, host


def fit_model(
    outcomes: list[Outcome], predict: Predict, grid: FitGrid, *, per_generation: bool = False
) -> FittedModel:
    """The FP8 GEMM rate factors and the MoE host-launch time fitted jointly on
    ``outcomes`` by grid coordinate descent (`_coordinate_descent`) on one objective: per
    generation the median |log(predicted / published)| of its dense FP8 rows (robust to
    the rows' other residuals), plus the mean |log(predicted / published)| of all MoE rows
    (the host floor binds on the few rows with little GPU work per layer; a median would
    follow the majority it does not touch). MoE rows inform the factor of their generation
    only through that mean, the dense FP8 rows carry the median. With ``per_generation``,
    one factor per generation with FP8 rows, and the shared ``fp8_factor`` (a second fit
    with one factor for all of them) for the others; without, the shared one alone. No MoE
    row: launch time 0 (no floor)."""
    fp8 = [o for o in outcomes if o.precision == "fp8"]
    dense = grouped((o for o in fp8 if o.kind == "dense"), lambda o: o.generation)
    moe = [o for o in outcomes if o.kind == "moe"]
    generations = sorted({o.generation for o in fp8})
    if not generations:
        if not moe:
            return FittedModel(fp8_factor=None, fitted_on=(), moe_host_launch_s=0.0)
        _, host = _coordinate_descent({}, moe, predict, grid, {})
        return FittedModel(
            fp8_factor=None,
            fitted_on=(),
            moe_host_launch_s=host,
            host_fitted_on=tuple(o.row_id for o in moe),
        )
    shared, shared_host = _coordinate_descent(
        dense, moe, predict, grid, {g: "all" for g in generations}
    )
    model = FittedModel(
        fp8_factor=shared[generations[0]],
        fitted_on=tuple(o.row_id for o in fp8),
        moe_host_launch_s=shared_host if moe else 0.0,
        host_fitted_on=tuple(o.row_id for o in moe),
    )
    if not per_generation:
        return model
    factors, host = _coordinate_descent(dense, moe, predict, grid, {g: g for g in generations})
    return dataclasses.replace(
        model,
        fp8_factors=factors,
        fp8_fitted_on={g: tuple(o.row_id for o in fp8 if o.generation == g) for g in generations},
        moe_host_launch_s=host if moe else 0.0,
    )


def apply_model(outcomes: list[Outcome], predict: Predict, model: FittedModel) -> list[Outcome]:
    """FP8 and MoE rows re-predicted with the model's factor of their generation and its
    host-launch time; other rows, and FP8 rows when no factor was fitted, unchanged."""
    result = []
    for o in outcomes:
        factor = model.factor(o.generation)
        fp8 = o.precision == "fp8" and factor is not None
        if fp8 or (o.kind == "moe" and model.moe_host_launch_s is not None):
            host = model.moe_host_launch_s if model.moe_host_launch_s is not None else 0.0
            o = dataclasses.replace(o, predicted_s=predict(o.row_id, factor, host))
        result.append(o)
    return result


def leave_one_source_out(
    outcomes: list[Outcome], predict: Predict, grid: FitGrid, *, per_generation: bool = False
) -> tuple[list[Outcome], dict[str, FittedModel]]:
    """Every outcome predicted with the model fitted (`fit_model`) on the other source
    families, and per family the model used: every fitted parameter is refitted without
    the family's rows. A generation left without FP8 rows takes the factor fitted on all
    remaining FP8 rows together; without remaining MoE rows the launch time is 0."""
    predicted: list[Outcome] = []
    models: dict[str, FittedModel] = {}
    for family, rows in grouped(outcomes, lambda o: o.source_family).items():
        others = [o for o in outcomes if o.source_family != family]
        models[family] = fit_model(others, predict, grid, per_generation=per_generation)
        predicted.extend(apply_model(rows, predict, models[family]))
    order = {o.row_id: i for i, o in enumerate(outcomes)}
    return sorted(predicted, key=lambda o: order[o.row_id]), models
