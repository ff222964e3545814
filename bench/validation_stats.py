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
  generation with FP8 rows and one shared value for the generations without; the sustained
  16-bit GEMM rate factor (`ExecutionOptions.sustained_gemm_rate_factor`), one value per
  generation with dense 16-bit rows and one shared value for the others; and the MoE
  host-launch time (`ExecutionOptions.moe_host_launch_s`), one value for all generations;
- `leave_one_source_out`: for each source family, the model fitted on every other
  family, applied to that family's rows; the errors of those rows are out of sample.

The fits key their per-generation factors by `Outcome.fit_generation` (the profile's
`profiles.schema_device.DeviceSpec.generation`, the key of the cost model's tables), not by the
reporting `Outcome.generation`: Blackwell Ultra rows (B300, GB300) report as Blackwell and
fit their own factors.

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
    """A100, H100/H800 or Blackwell: the reporting group (issue 33's summaries)."""
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
    sustained_fixed: bool = False
    """The row's execution options fix the sustained 16-bit GEMM rate factor (the 2021
    option set, `costmodel.execution_presets.MEGATRON_2021`): the fit neither uses the row for it
    nor moves the row with it."""
    fit_generation: str = ""
    """The profile's `profiles.schema_device.DeviceSpec.generation` (``ampere``, ``hopper``,
    ``blackwell``, ``blackwell_ultra``, ...), the key of the per-generation fitted factors
    (`fit_key`); empty: `generation`."""

    @property
    def fit_key(self) -> str:
        """The generation whose fitted factors the row fits and takes: `fit_generation`,
        else `generation`."""
        return self.fit_generation or self.generation

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


Predict = Callable[[str, float | None, float, float | None], float]
"""(row id, fp8_gemm_rate_factor, moe_host_launch_s, sustained_gemm_rate_factor) ->
predicted seconds per iteration of that row under those options; a factor None: the row's
own. A row ignores an option that does not apply to it (a bf16 row the FP8 factor, a dense
row the launch time, a row without 16-bit GEMMs the sustained factor)."""

FP8, SUSTAINED = "fp8", "sustained"
"""The two kinds of fitted factor: FP8 GEMM rate, sustained 16-bit GEMM rate."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FitGrid:
    """Candidate values of the fitted parameters."""

    fp8_factors: tuple[float, ...]
    """Candidate `ExecutionOptions.fp8_gemm_rate_factor` values."""
    host_launch_s: tuple[float, ...]
    """Candidate `ExecutionOptions.moe_host_launch_s` values. One value is a fixed input,
    not a fitted one (`host_launch_fixed`): every fit prices the MoE rows with it, with or
    without MoE rows of its own, and none is listed as fitting it."""
    sustained_factors: tuple[float, ...] = (1.0,)
    """Candidate `ExecutionOptions.sustained_gemm_rate_factor` values."""

    @property
    def host_launch_fixed(self) -> bool:
        """Whether the launch time is a fixed input (one candidate)."""
        return len(self.host_launch_s) == 1


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedModel:
    """The fitted parameters and the rows that fitted each."""

    fp8_factor: float | None
    """The FP8 factor fitted with one value shared by every generation (per generation: on
    the dense FP8 rows together, `_shared_fp8`): the value of a generation without dense FP8
    rows of its own. None when no FP8 row fitted it (the predictions keep the factor they
    were made with)."""
    fitted_on: tuple[str, ...]
    """Row ids of the FP8 rows that fitted ``fp8_factor``."""
    fp8_factors: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU generation -> its FP8 factor, for the generations with FP8 rows of their own
    (with ``per_generation`` off: empty, ``fp8_factor`` for every generation)."""
    fp8_fitted_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """GPU generation -> row ids of the FP8 rows that fitted its factor (the dense FP8 rows
    of every generation where it takes the shared one)."""
    moe_host_launch_s: float | None = None
    """moe_host_launch_s for every GPU generation; 0 when no MoE row fitted it (no floor);
    the grid's one value when the grid fixes it (`FitGrid.host_launch_fixed`)."""
    host_fitted_on: tuple[str, ...] = ()
    """Row ids of the MoE rows that fitted it."""
    sustained_factor: float | None = None
    """The sustained 16-bit factor fitted with one value for every generation (all the
    dense 16-bit rows together): the value of a generation without dense 16-bit rows of its
    own. None when no dense 16-bit row fitted it (the predictions keep their own)."""
    sustained_factors: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU generation -> its sustained factor, for the generations with dense 16-bit rows."""
    sustained_fitted_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """GPU generation -> row ids of the dense 16-bit rows that fitted its sustained factor;
    ``shared``: every dense 16-bit row (those that fitted ``sustained_factor``)."""

    def factor(self, generation: str) -> float | None:
        """The FP8 factor of ``generation``: its own, else the shared one."""
        return self.fp8_factors.get(generation, self.fp8_factor)

    def sustained(self, generation: str) -> float | None:
        """The sustained 16-bit factor of ``generation``: its own, else the shared one."""
        return self.sustained_factors.get(generation, self.sustained_factor)


@dataclass(frozen=True, kw_only=True, slots=True)
class FitRows:
    """The rows of each term of the fit's objective (`_objective`)."""

    fp8: dict[str, list[Outcome]]
    """GPU generation (`Outcome.fit_key`) -> its dense FP8 rows."""
    sixteen: dict[str, list[Outcome]]
    """GPU generation (`Outcome.fit_key`) -> its dense 16-bit rows."""
    moe: list[Outcome]
    """Every MoE row."""


Point = dict[tuple[str, str], float]
"""A point of the fit: (FP8 or SUSTAINED, generation) -> factor."""


def _log_error(predicted_s: float, outcome: Outcome) -> float:
    return abs(math.log(predicted_s / outcome.published_s))


def _row_error(o: Outcome, predict: Predict, point: Point, host: float) -> float:
    g = o.fit_key
    return _log_error(predict(o.row_id, point.get((FP8, g)), host, point.get((SUSTAINED, g))), o)


def _objective(rows: FitRows, predict: Predict, point: Point, host: float) -> float:
    """Sum over generations of the median |log(predicted / published)| of the generation's
    dense FP8 rows and of its dense 16-bit rows, plus the mean |log(predicted / published)|
    of the MoE rows."""
    total = sum(
        statistics.median(_row_error(o, predict, point, host) for o in members)
        for by_generation in (rows.fp8, rows.sixteen)
        for members in by_generation.values()
    )
    if rows.moe:
        total += statistics.fmean(_row_error(o, predict, point, host) for o in rows.moe)
    return total


def _coordinate_descent(
    rows: FitRows,
    predict: Predict,
    grid: FitGrid,
    keys: dict[tuple[str, str], str],
    fixed: Point | None = None,
) -> tuple[Point, float]:
    """Grid coordinate descent on `_objective` from the bare rates (factors 1) and no host
    floor (launch time 0): each factor, then the launch time, over its whole grid, until a
    round changes nothing. ``keys`` maps each (kind, generation) to the fitted value it
    uses (several generations share one value when they map to one key); ``fixed`` holds
    (kind, generation) values that are not fitted. Ties: the larger factor, the smaller
    launch time."""
    candidates = {FP8: grid.fp8_factors, SUSTAINED: grid.sustained_factors}
    values = {(kind, k): max(candidates[kind]) for (kind, _), k in keys.items()}
    host = min(grid.host_launch_s) if rows.moe else 0.0

    def point(trial: dict[tuple[str, str], float]) -> Point:
        return (fixed or {}) | {(kind, g): trial[kind, k] for (kind, g), k in keys.items()}

    for _ in range(sum(map(len, candidates.values())) + len(grid.host_launch_s)):
        before = (dict(values), host)
        for key in sorted(values):
            values[key] = min(
                sorted(candidates[key[0]], reverse=True),
                key=lambda f, key=key: _objective(rows, predict, point(values | {key: f}), host),
            )
        if rows.moe:
            host = min(
                sorted(grid.host_launch_s),
                key=lambda h: _objective(rows, predict, point(values), h),
            )
        if (values, host) == before:
            break
    return point(values), host


def _fit_rows(outcomes: list[Outcome]) -> FitRows:
    dense = [o for o in outcomes if o.kind == "dense"]
    return FitRows(
        fp8=grouped((o for o in dense if o.precision == "fp8"), lambda o: o.fit_key),
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
    """The FP8 GEMM rate factors, the sustained 16-bit GEMM rate factors and the MoE
    host-launch time fitted jointly on ``outcomes`` by grid coordinate descent
    (`_coordinate_descent`) on one objective: per generation the median
    |log(predicted / published)| of its dense FP8 rows and that of its dense 16-bit rows
    (robust to the rows' other residuals), plus the mean |log(predicted / published)| of
    all MoE rows (the host floor binds on the few rows with little GPU work per layer; a
    median would follow the majority it does not touch). MoE rows inform the factors of
    their generation only through that mean; the dense rows carry the medians.

    The sustained factor of a generation without dense 16-bit rows is the shared one,
    fitted first on every dense 16-bit row together (`_shared_sustained`; MoE rows do not
    move it: their residuals are the MoE layer's). With ``per_generation`` the FP8 factor
    follows the same rule: a generation whose FP8 rows are all MoE rows takes the shared
    FP8 factor, fitted on every dense FP8 row together (`_shared_fp8`), so that MoE
    residuals (the all-to-all overlap, the device time per token that docs/cost-model.md
    names) never set a GEMM rate alone; without dense FP8 rows at all, the MoE rows fit it
    as one factor. Then one descent fits the sustained factor of each generation with
    dense 16-bit rows, the FP8 factor (per generation with dense FP8 rows when
    ``per_generation``, else one for all) and the launch time. No MoE row: launch time 0
    (no floor). A one-value ``grid.host_launch_s`` fixes the launch time
    (`FitGrid.host_launch_fixed`)."""
    rows = _fit_rows(outcomes)
    fp8_rows = [o for o in outcomes if o.precision == "fp8"]
    fp8_gens = sorted({o.fit_key for o in fp8_rows})
    shared = _shared_sustained(rows, predict, grid)
    shared_fp8 = _shared_fp8(rows, predict, grid)
    own = {(SUSTAINED, g): g for g in rows.sixteen}
    fixed = {
        (SUSTAINED, g): shared
        for g in {o.fit_key for o in outcomes} - set(rows.sixteen)
        if shared is not None
    }
    own_fp8 = fp8_gens
    if per_generation and shared_fp8 is not None:
        own_fp8 = [g for g in fp8_gens if g in rows.fp8]
        fixed |= {(FP8, g): shared_fp8 for g in fp8_gens if g not in own_fp8}
    fp8_keys = {(FP8, g): g if per_generation else "all" for g in own_fp8}
    point, host = _coordinate_descent(rows, predict, grid, fp8_keys | own, fixed)
    fp8_factor = point[FP8, fp8_gens[0]] if fp8_gens else None
    if per_generation and shared_fp8 is not None:
        fp8_factor = shared_fp8
    elif per_generation and fp8_gens:
        all_keys = {(FP8, g): "all" for g in fp8_gens}
        fp8_factor = _coordinate_descent(rows, predict, grid, all_keys | own, fixed)[0][
            FP8, fp8_gens[0]
        ]
    sixteen_ids = {g: tuple(o.row_id for o in members) for g, members in rows.sixteen.items()}
    if sixteen_ids:
        sixteen_ids["shared"] = tuple(i for ids in sixteen_ids.values() for i in ids)
    per_gen = per_generation and bool(fp8_gens)
    dense_fp8_ids = tuple(o.row_id for members in rows.fp8.values() for o in members)
    return FittedModel(
        fp8_factor=fp8_factor,
        fitted_on=dense_fp8_ids
        if per_gen and shared_fp8 is not None
        else tuple(o.row_id for o in fp8_rows),
        fp8_factors={g: point[FP8, g] for g in fp8_gens} if per_gen else {},
        fp8_fitted_on=(
            {
                g: tuple(o.row_id for o in fp8_rows if o.fit_key == g)
                if g in own_fp8
                else dense_fp8_ids
                for g in fp8_gens
            }
            if per_gen
            else {}
        ),
        moe_host_launch_s=grid.host_launch_s[0]
        if grid.host_launch_fixed
        else (host if rows.moe else 0.0),
        host_fitted_on=() if grid.host_launch_fixed else tuple(o.row_id for o in rows.moe),
        sustained_factor=shared,
        sustained_factors={g: point[SUSTAINED, g] for g in rows.sixteen},
        sustained_fitted_on=sixteen_ids,
    )


def _shared_fp8(rows: FitRows, predict: Predict, grid: FitGrid) -> float | None:
    """One FP8 factor for every generation, fitted on the dense FP8 rows alone (`_objective`
    over them, each generation's rows a median term); None without such rows."""
    if not rows.fp8:
        return None
    dense = FitRows(fp8=rows.fp8, sixteen={}, moe=[])
    keys = {(FP8, g): "all" for g in rows.fp8}
    point, _ = _coordinate_descent(dense, predict, grid, keys)
    return point[FP8, min(rows.fp8)]


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
    and its host-launch time (a row ignores what does not apply to it); a factor the model
    did not fit (None) keeps the row's own."""
    result = []
    for o in outcomes:
        factor, sustained = model.factor(o.fit_key), model.sustained(o.fit_key)
        host = model.moe_host_launch_s if model.moe_host_launch_s is not None else 0.0
        result.append(
            dataclasses.replace(o, predicted_s=predict(o.row_id, factor, host, sustained))
        )
    return result


def leave_one_source_out(
    outcomes: list[Outcome], predict: Predict, grid: FitGrid, *, per_generation: bool = False
) -> tuple[list[Outcome], dict[str, FittedModel]]:
    """Every outcome predicted with the model fitted (`fit_model`) on the other source
    families, and per family the model used: every fitted parameter is refitted without
    the family's rows. A generation left without FP8 (dense 16-bit) rows takes the FP8
    (sustained) factor fitted on all remaining such rows together; without remaining MoE
    rows the launch time is 0, unless the grid fixes it (`FitGrid.host_launch_fixed`)."""
    predicted: list[Outcome] = []
    models: dict[str, FittedModel] = {}
    for family, rows in grouped(outcomes, lambda o: o.source_family).items():
        others = [o for o in outcomes if o.source_family != family]
        models[family] = fit_model(others, predict, grid, per_generation=per_generation)
        predicted.extend(apply_model(rows, predict, models[family]))
    order = {o.row_id: i for i, o in enumerate(outcomes)}
    return sorted(predicted, key=lambda o: order[o.row_id]), models
