"""Pricing of the published rows (`bench/validate_published.py`): each trust A and B row
through the same `estimate_plan` a user gets, with only what the row states
(`published_rows.case_for_row`), into a `validation_stats.Outcome`; the rows the specs
cannot express set apart with the reason; and the re-pricing the fits ask for at other
FP8 and NVFP4 GEMM rate factors, MoE host-launch times (Python-level and per expert), sustained
16-bit GEMM rate factors and MoE device times per token (the grids of `FIT_GRID`, each distinct
pricing computed once: `row_predictor`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from norm_recipes import train_task
from published_rows import NotExpressible, RowCase
from row_figures import case_estimate, published_case
from row_recipes import recipe_mismatch
from row_spellings import normalised_row
from validation_fit import LOW_PRECISION, Predict, apply_model
from validation_fit_params import FitGrid, FittedModel
from validation_stats import Outcome
from zero3_recipes import priced_apart_reason

from costmodel.execution import ExecutionOptions
from profiles.store import load_profile
from specs.errors import SpecError

TRUSTED = ("A", "B")
FP8_GRID = tuple(round(1.0 - 0.05 * i, 2) for i in range(15))
"""Candidate `ExecutionOptions.fp8_gemm_rate_factor` and ``fp4_gemm_rate_factor`` values,
1.0 down to 0.3."""
HOST_GRID = tuple(round(5e-6 * i, 6) for i in range(13))
"""Candidate `ExecutionOptions.moe_host_launch_s` values, 0 to 60 microseconds."""
SUSTAINED_GRID = tuple(round(1.0 - 0.05 * i, 2) for i in range(9))
"""Candidate `ExecutionOptions.sustained_gemm_rate_factor` values, 1.0 down to 0.6."""
TOKEN_GRID = tuple(round(25e-9 * i, 12) for i in range(13))
"""Candidate `ExecutionOptions.moe_token_device_s` values, 0 to 300 nanoseconds."""
EXPERT_GRID = (0.0, 2e-6, 5e-6, 10e-6, 20e-6, 30e-6, 50e-6)
"""Candidate `ExecutionOptions.moe_expert_launch_s` values, 0 to 50 microseconds: from no host
time per C++-issued launch up to the Python-level launch time's own scale."""
FIT_GRID = FitGrid(
    fp8_factors=FP8_GRID,
    host_launch_s=HOST_GRID,
    sustained_factors=SUSTAINED_GRID,
    token_device_s=TOKEN_GRID,
    expert_launch_s=EXPERT_GRID,
    expert_launch_tied=True,
)
"""The grids the fits search (`validation_fit.fit_model`); rows are priced lazily, only
at the points the coordinate descent visits (`row_predictor`). The per-expert launch time
is tied to the Python-level one (`FitGrid.expert_launch_tied`): fitted apart over
`EXPERT_GRID` it took the grid's top, 50 us, in sample and 0 without the Megatron-Bridge
rows (the model zoo's rows left alone hold too few local-expert counts to separate the two),
which made the leave-one-source-out median 11.7% against 10.8% tied
(`costmodel.fitted_rates.MOE_EXPERT_LAUNCH_S`); `fit_grid` unties it when it fixes it."""


def fit_grid(host_launch_s: float | None = None, expert_launch_s: float | None = None) -> FitGrid:
    """`FIT_GRID`, with the MoE host-launch time fixed at ``host_launch_s`` seconds and the
    per-expert launch time at ``expert_launch_s`` where given (fixed inputs of every fit, not
    fitted: `validation_fit_params.FitGrid.host_launch_fixed`, ``expert_launch_fixed``)."""
    grid = FIT_GRID
    if host_launch_s is not None:
        grid = dataclasses.replace(grid, host_launch_s=(host_launch_s,))
    if expert_launch_s is not None:
        grid = dataclasses.replace(
            grid, expert_launch_s=(expert_launch_s,), expert_launch_tied=False
        )
    return grid


def evaluate_row(raw: dict[str, str]) -> tuple[Outcome, RowCase]:
    """Predict one row; with the row's case. NotExpressible or SpecError when it cannot be
    priced. ``raw`` is read in its accepted spellings (`row_spellings.normalised_row`)."""
    raw = normalised_row(raw)
    case, published = published_case(raw)
    profile = load_profile(case.profile)
    est = case_estimate(case, profile=profile)
    outcome = Outcome(
        row_id=raw["row_id"],
        source_id=raw["source_id"],
        model=raw["model"],
        plan=case.plan.label(),
        generation=case.generation,
        precision=case.job.precision,
        kind="moe" if case.model.num_experts else "dense",
        gpu_type=raw["gpu_type"],
        num_gpus=case.cluster.num_gpus,
        seq_length=case.job.seq_length,
        published_s=published,
        predicted_s=est.iteration_time_s,
        peak_memory_gib=est.peak_memory_gib,
        device_memory_gib=profile.device.memory_gib,
        fits=est.fits,
        global_batch_size=case.job.global_batch_size,
        precision_text=raw.get("precision", ""),
        not_fit_reason="" if est.fits else recipe_mismatch(raw) or "",
        sustained_fixed=case.options.sustained_gemm_rate_factor is not None,
        fit_generation=profile.device.generation,
        task=train_task(raw),
        assumption=case.assumption,
        apart_reason=priced_apart_reason(raw),
    )
    return outcome, case


def row_predictor(cases: dict[str, RowCase]) -> Predict:
    """`validation_fit.Predict` over the rows' ``cases``: `estimate_plan` with the row's
    options and the given low-precision factor (FP8 rows' FP8 factor, NVFP4 rows' NVFP4
    factor; None keeps the row's own), MoE host-launch
    times and device time per token (MoE rows; a device time or per-expert launch time None
    keeps the row's own) and
    sustained 16-bit factor (rows whose options leave it to the fitted default and that
    price GEMMs on the 16-bit curves: every bf16/fp16 row, and an FP8 row only if its
    prediction moves with the factor, `prices_16bit_gemms`), each distinct pricing computed
    once (and each profile loaded once)."""
    memo: dict[
        tuple[str, float | None, float | None, float | None, float | None, float | None], float
    ] = {}
    profiles = {name: load_profile(name) for name in {c.profile for c in cases.values()}}

    def price(case: RowCase, options: ExecutionOptions) -> float:
        return case_estimate(case, options=options, profile=profiles[case.profile]).iteration_time_s

    sixteen: dict[str, bool] = {}

    def uses_sustained(row_id: str) -> bool:
        if row_id not in sixteen:
            case = cases[row_id]
            sixteen[row_id] = case.options.sustained_gemm_rate_factor is None and (
                case.job.precision not in LOW_PRECISION or prices_16bit_gemms(case, price)
            )
        return sixteen[row_id]

    def predict(
        row_id: str,
        factor: float | None,
        host_s: float,
        sustained: float | None,
        token_s: float | None,
        expert_s: float | None = None,
    ) -> float:
        case = cases[row_id]
        moe = bool(case.model.num_experts)
        key = (
            row_id,
            factor if case.job.precision in LOW_PRECISION else None,
            host_s if moe else None,
            sustained if sustained is not None and uses_sustained(row_id) else None,
            token_s if moe else None,
            expert_s if moe else None,
        )
        if key not in memo:
            options = case.options
            if key[1] is not None:
                options = dataclasses.replace(options, **{_low_precision_field(case): key[1]})
            if key[2] is not None:
                options = dataclasses.replace(options, moe_host_launch_s=key[2])
            if key[3] is not None:
                options = dataclasses.replace(options, sustained_gemm_rate_factor=key[3])
            if key[4] is not None:
                options = dataclasses.replace(options, moe_token_device_s=key[4])
            if key[5] is not None:
                options = dataclasses.replace(options, moe_expert_launch_s=key[5])
            memo[key] = price(case, options)
        return memo[key]

    return predict


def _low_precision_field(case: RowCase) -> str:
    """The `ExecutionOptions` field of the low-precision GEMM rate factor of ``case``'s
    precision: ``fp4_gemm_rate_factor`` for NVFP4, ``fp8_gemm_rate_factor`` for FP8."""
    return "fp4_gemm_rate_factor" if case.job.precision == "nvfp4" else "fp8_gemm_rate_factor"


def prices_16bit_gemms(case: RowCase, price: Callable[[RowCase, ExecutionOptions], float]) -> bool:
    """Whether ``case``'s prediction moves with the sustained 16-bit GEMM rate factor
    (priced at the two ends of `SUSTAINED_GRID`): an FP8 (NVFP4) run prices its linear
    layers on the fp8 (fp4) curve, so only GEMMs the cost model keeps in 16 bits could move it."""
    ends = (max(SUSTAINED_GRID), min(SUSTAINED_GRID))
    times = [
        price(case, dataclasses.replace(case.options, sustained_gemm_rate_factor=f)) for f in ends
    ]
    return times[0] != times[1]


def evaluate(
    rows: list[dict[str, str]], trusts: Collection[str] = TRUSTED
) -> tuple[list[Outcome], dict[str, RowCase], list[dict[str, str]]]:
    """Outcomes of the rows of the ``trusts`` levels (default the trusted ones), their
    cases (the fitted parameters act on every row: `row_predictor`), and the rows set apart
    (row, source, model, reason)."""
    outcomes, apart = [], []
    cases: dict[str, RowCase] = {}
    for raw in rows:
        if raw["trust"] not in trusts:
            continue
        try:
            outcome, case = evaluate_row(raw)
            outcomes.append(outcome)
            cases[outcome.row_id] = case
        except (NotExpressible, SpecError) as err:
            apart.append(
                {"row_id": raw["row_id"], "source_id": raw["source_id"], "model": raw["model"]}
                | {"reason": apart_reason(err)}
            )
    return outcomes, cases, apart


def apart_reason(err: NotExpressible | SpecError) -> str:
    """Why a row is set apart, one line: a `NotExpressible` reason as it reads, a plan
    rejection as its rule ids (e.g. ``plan rule layers_divisible_by_pp``)."""
    if isinstance(err, NotExpressible):
        return str(err).splitlines()[0]
    ids = [line.strip()[2:].split(":")[0] for line in str(err).splitlines()[1:]]
    return "plan rule " + ", ".join(i for i in ids if i) if ids else str(err)


def at_host_launch(
    outcomes: list[Outcome], predict: Predict, host_s: float, expert_s: float | None = None
) -> list[Outcome]:
    """``outcomes`` with the MoE rows re-priced at a host-launch time of ``host_s`` seconds
    and a per-expert launch time of ``expert_s`` seconds (None: each row's own), every other
    option as the row has it (`validation_fit.apply_model` with no factor fitted)."""
    model = FittedModel(
        fp8_factor=None,
        fitted_on=(),
        moe_host_launch_s=host_s,
        moe_expert_launch_s=expert_s,
    )
    moe = [o for o in outcomes if o.kind == "moe"]
    repriced = {o.row_id: o for o in apply_model(moe, predict, model)}
    return [repriced.get(o.row_id, o) for o in outcomes]
