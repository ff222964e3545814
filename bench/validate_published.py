"""Check the cost model against published Megatron runs (``published-runs-dev.csv``).

Every trust A and B row of the development set (column guide: ``published-runs-dev.md``
beside it) goes through the same `estimate_plan` a user gets, with only what the row
states (`bench/published_rows.py`: plan, precision, optimizer sharding, recompute; the
SC21-era sources keep Megatron-LM's 2021 execution options, `MEGATRON_2021`). Rows the
specs cannot express yet are listed apart with the reason; trust C rows are not used.

Per row: predicted and published seconds per iteration (convention-free: the printed
time, tokens/s/GPU, or TFLOP/s/GPU through the source's own FLOPs formula), the signed
error, the predicted peak memory and whether it fits the device. Summaries
(`bench/validation_stats.py`) over all rows, by source, GPU generation, precision,
dense/MoE, and the SC21 Table 1 group; Kendall tau over strategy groups. Rows predicted
not to fit are listed apart (``not_fitting``), those printed unlike the recipe their
release ships with the reason, and ``fit_fraction_as_run`` leaves the latter out.

Four sets of figures:
- ``model``: `estimate_plan` as it is (its fitted defaults, the FP8 GEMM rate factor
  `costmodel.fitted_rates.FP8_GEMM_RATE_FACTOR`, the MoE host-launch time
  `MOE_HOST_LAUNCH_S` and the sustained 16-bit GEMM rate factors
  `costmodel.fitted_rates.SUSTAINED_GEMM_RATE_FACTORS`, were fitted on the rows here);
- ``fitted``: those parameters fitted jointly on all rows (in sample;
  `validation_stats.fit_model`, with `PER_GENERATION`);
- ``loso``: leave one source family out: the parameters fitted on the other families
  predict it. These are the out-of-sample figures.
- ``per_generation``: the same two fits with the other choice of `PER_GENERATION`, the
  evidence for that choice.

The fits key their per-generation factors by the profile's `DeviceSpec.generation`
(``fit_generation`` of each row), while the summaries group by the issue's generations
(A100, H100/H800, Blackwell with B300 and GB300). ``same_recipe_ratios``
(`bench/same_recipe.py`) gives the published tokens/s per GPU ratio of identical recipes on
two GPU types, over every row of the CSV that prints that rate (``--rows`` does not filter
it), and the cost model's ratio at the shipped defaults on the pairs it prices.
``unstated_vpp`` (`bench/unstated_vpp.py`) prices the rows whose only gap is the
virtual-pipeline degree at every degree Megatron admits, apart from every statistic above.

Usage: ``python bench/validate_published.py [--json] [--markdown] [--figure] [--csv PATH]
[--host-launch-us US]`` (``--markdown`` writes docs/validation.md, ``--figure``
docs/validation.png; ``--host-launch-us`` fixes the MoE host-launch time instead of fitting
it, `fit_grid`).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

from published_rows import (
    MEGATRON_BRIDGE_PERF,
    NotExpressible,
    RowCase,
    case_for_row,
    published_iteration_time_s,
)
from row_recipes import recipe_mismatch
from same_recipe import same_recipe_ratios, with_predictions
from unstated_vpp import print_unstated_vpp, unstated_vpp_report
from validation_stats import (
    FitGrid,
    FittedModel,
    Outcome,
    Predict,
    apply_model,
    fit_model,
    grouped,
    kendall_tau,
    leave_one_source_out,
    summary,
)

from costmodel.estimate import estimate_plan, stage_memory_parts_gib
from costmodel.execution import DEFAULT_OPTIONS, ExecutionOptions
from costmodel.megatron_estimator import megatron_theoretical_memory
from costmodel.memory_allowances import GiB
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

CSV_NAME = "shared/reference/published-runs-dev.csv"
DOCS = Path(__file__).resolve().parents[1] / "docs"
TRUSTED = ("A", "B")
FP8_GRID = tuple(round(1.0 - 0.05 * i, 2) for i in range(13))
"""Candidate `ExecutionOptions.fp8_gemm_rate_factor` values, 1.0 down to 0.4."""
HOST_GRID = tuple(round(5e-6 * i, 6) for i in range(13))
"""Candidate `ExecutionOptions.moe_host_launch_s` values, 0 to 60 microseconds."""
SUSTAINED_GRID = tuple(round(1.0 - 0.05 * i, 2) for i in range(9))
"""Candidate `ExecutionOptions.sustained_gemm_rate_factor` values, 1.0 down to 0.6."""
PER_GENERATION = True
"""Whether the FP8 GEMM rate factor is fitted per GPU generation (`validation_stats.fit_model`,
keyed by the profile's `DeviceSpec.generation`: `Outcome.fit_key`) rather than once for
all. On: Blackwell Ultra (B300, GB300) publishes a higher training rate than Blackwell on
identical recipes (``same_recipe_ratios``: GB300 over GB200 about 1.2) that its profiles'
peaks do not carry (GB300 has no MAMF of its own), so its FP8 rows fit their own factor
(`costmodel.fitted_rates.FP8_GEMM_RATE_FACTORS`). Each generation's FP8 rows come from one
source family (H100: NeMo long-sequence; Blackwell and Blackwell Ultra: Megatron-Bridge,
with the MoE model zoo on Blackwell), so leaving that family out leaves the generation to
the shared factor. The ``per_generation`` block of the JSON shows the single-factor fit."""
FIT_GRID = FitGrid(fp8_factors=FP8_GRID, host_launch_s=HOST_GRID, sustained_factors=SUSTAINED_GRID)
"""The grids the fits search (`validation_stats.fit_model`); rows are priced lazily, only
at the points the coordinate descent visits (`row_predictor`)."""


def fit_grid(host_launch_s: float | None = None) -> FitGrid:
    """`FIT_GRID`, or with the MoE host-launch time fixed at ``host_launch_s`` seconds (a
    fixed input of every fit, not fitted: `validation_stats.FitGrid.host_launch_fixed`)."""
    if host_launch_s is None:
        return FIT_GRID
    return dataclasses.replace(FIT_GRID, host_launch_s=(host_launch_s,))


SC21_TABLE1 = "SC21-T1"
SC21_TARGET = 0.10
"""Median |error| target of the SC21 Table 1 group."""
GROUPINGS = {
    "source": lambda o: o.source_id,
    "generation": lambda o: o.generation,
    "precision": lambda o: o.precision,
    "kind": lambda o: o.kind,
}


def default_csv() -> Path | None:
    """``shared/reference/published-runs-dev.csv`` in the nearest folder above this file."""
    for parent in Path(__file__).resolve().parents:
        if (parent / CSV_NAME).is_file():
            return parent / CSV_NAME
    return None


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows as dicts of column -> text."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def rows_by_ids(ids_text: str) -> tuple[list[dict[str, str]], str | None]:
    """The dev set's rows named in ``ids_text`` (comma-separated row ids), in that order, or
    an error line naming the missing CSV or the ids it lacks."""
    path = default_csv()
    if path is None:
        return [], f"{CSV_NAME} not found above {Path(__file__).parent}"
    wanted = [r.strip() for r in ids_text.split(",") if r.strip()]
    by_id = {raw["row_id"]: raw for raw in read_rows(path)}
    missing = [r for r in wanted if r not in by_id]
    if missing:
        return [], f"rows not in {path}: {', '.join(missing)}"
    return [by_id[r] for r in wanted], None


def evaluate_row(raw: dict[str, str]) -> tuple[Outcome, RowCase]:
    """Predict one row; with the row's case. NotExpressible or SpecError when it cannot be
    priced."""
    case = case_for_row(raw)
    published = published_iteration_time_s(raw, case)
    profile = load_profile(case.profile)
    est = estimate_plan(
        case.model, case.cluster, case.job, case.plan, profile, options=case.options
    )
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
    )
    return outcome, case


def row_predictor(cases: dict[str, RowCase]) -> Predict:
    """`validation_stats.Predict` over the rows' ``cases``: `estimate_plan` with the row's
    options and the given FP8 factor (FP8 rows; None keeps the row's own), MoE host-launch
    time (MoE rows) and sustained 16-bit factor (rows whose options leave it to the
    fitted default and that price GEMMs on the 16-bit curves: every bf16/fp16 row, and an
    FP8 row only if its prediction moves with the factor, `prices_16bit_gemms`), each
    distinct pricing computed once (and each profile loaded once)."""
    memo: dict[tuple[str, float | None, float | None, float | None], float] = {}
    profiles = {name: load_profile(name) for name in {c.profile for c in cases.values()}}

    def price(case: RowCase, options: ExecutionOptions) -> float:
        est = estimate_plan(
            case.model, case.cluster, case.job, case.plan, profiles[case.profile], options=options
        )
        return est.iteration_time_s

    sixteen: dict[str, bool] = {}

    def uses_sustained(row_id: str) -> bool:
        if row_id not in sixteen:
            case = cases[row_id]
            sixteen[row_id] = case.options.sustained_gemm_rate_factor is None and (
                case.job.precision != "fp8" or prices_16bit_gemms(case, price)
            )
        return sixteen[row_id]

    def predict(row_id: str, factor: float | None, host_s: float, sustained: float | None) -> float:
        case = cases[row_id]
        key = (
            row_id,
            factor if case.job.precision == "fp8" else None,
            host_s if case.model.num_experts else None,
            sustained if sustained is not None and uses_sustained(row_id) else None,
        )
        if key not in memo:
            options = case.options
            if key[1] is not None:
                options = dataclasses.replace(options, fp8_gemm_rate_factor=key[1])
            if key[2] is not None:
                options = dataclasses.replace(options, moe_host_launch_s=key[2])
            if key[3] is not None:
                options = dataclasses.replace(options, sustained_gemm_rate_factor=key[3])
            memo[key] = price(case, options)
        return memo[key]

    return predict


def prices_16bit_gemms(case: RowCase, price: Callable[[RowCase, ExecutionOptions], float]) -> bool:
    """Whether ``case``'s prediction moves with the sustained 16-bit GEMM rate factor
    (priced at the two ends of `SUSTAINED_GRID`): an FP8 run prices its linear layers on
    the fp8 curve, so only GEMMs the cost model keeps in 16 bits could move it."""
    ends = (max(SUSTAINED_GRID), min(SUSTAINED_GRID))
    times = [
        price(case, dataclasses.replace(case.options, sustained_gemm_rate_factor=f)) for f in ends
    ]
    return times[0] != times[1]


def evaluate(
    rows: list[dict[str, str]],
) -> tuple[list[Outcome], dict[str, RowCase], list[dict[str, str]]]:
    """Outcomes of the trusted rows, their cases (the fitted parameters act on every row:
    `row_predictor`), and the rows set apart (row, source, model, reason)."""
    outcomes, apart = [], []
    cases: dict[str, RowCase] = {}
    for raw in rows:
        if raw["trust"] not in TRUSTED:
            continue
        try:
            outcome, case = evaluate_row(raw)
            outcomes.append(outcome)
            cases[outcome.row_id] = case
        except (NotExpressible, SpecError) as err:
            reason = str(err).splitlines()[0] if isinstance(err, NotExpressible) else _rules(err)
            apart.append(
                {"row_id": raw["row_id"], "source_id": raw["source_id"], "model": raw["model"]}
                | {"reason": reason}
            )
    return outcomes, cases, apart


def _rules(err: SpecError) -> str:
    """The rule ids of a plan rejection, e.g. ``plan rule layers_divisible_by_pp``."""
    ids = [line.strip()[2:].split(":")[0] for line in str(err).splitlines()[1:]]
    return "plan rule " + ", ".join(i for i in ids if i) if ids else str(err)


def llama3_8b_memory_case() -> dict[str, dict[str, float]]:
    """Peak GiB per rank of Llama-3-8B, sequence 8192, TP1 PP1, FP8, distributed optimizer,
    micro-batch 1 on 8 H100 (the recipe of the issue's memory example), under Megatron-LM's
    default options (fp32 main gradients), under Megatron-Bridge's performance options
    (bf16 gradient reduction, `MEGATRON_BRIDGE_PERF`), and with CP 2 as Megatron-Bridge's
    H100 Llama-3-8B performance config sets it; beside Megatron's own estimator
    (`megatron_theoretical_memory`, stage 0, bf16 assumed)."""
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=8192, global_batch_size=128, precision="fp8")
    profile = load_profile("h100-sxm-80gb")
    overlap = {"overlap_grad_reduce": True, "overlap_param_gather": True}
    plan = ParallelPlan.for_world(8, distributed_optimizer=True, **overlap)
    cp2 = ParallelPlan.for_world(8, cp=2, distributed_optimizer=True, **overlap)
    cases = {
        "megatron_defaults": (plan, DEFAULT_OPTIONS),
        "megatron_bridge_perf": (plan, MEGATRON_BRIDGE_PERF),
        "megatron_bridge_perf_cp2": (cp2, MEGATRON_BRIDGE_PERF),
    }
    result: dict[str, dict[str, float]] = {}
    for name, (p, options) in cases.items():
        est = estimate_plan(model, cluster, job, p, profile, options=options)
        result[name] = {
            "peak_gib": est.peak_memory_gib,
            "device_gib": profile.device.memory_gib,
        } | stage_memory_parts_gib(est.memory[0])
    weights, activations = megatron_theoretical_memory(model, job, plan)
    result["megatron_estimator"] = {
        "peak_gib": (weights + activations) / GiB,
        "weights_and_optimizer": weights / GiB,
        "activations": activations / GiB,
    }
    return result


def select_rows(rows: list[dict[str, str]], texts: str) -> list[dict[str, str]]:
    """The ``rows`` whose ``row_id``, ``source_id`` or ``model`` contains one of the
    comma-separated ``texts`` (case-insensitive); every row when ``texts`` is empty."""
    wanted = [t.strip().lower() for t in texts.split(",") if t.strip()]
    if not wanted:
        return rows
    return [
        raw
        for raw in rows
        if any(
            w == raw["row_id"] or w in raw["source_id"].lower() or w in raw["model"].lower()
            for w in wanted
        )
    ]


def defaults_report(outcomes: list[Outcome], apart: list[dict[str, str]]) -> dict[str, object]:
    """The figures and rows at the shipped defaults, without the fitted and
    leave-one-source-out sections (``--no-fit``)."""
    return (
        figures(outcomes)
        | strategy_report(outcomes)
        | not_fitting_report(outcomes)
        | {
            "rows": [outcome_row(o, o.error) for o in outcomes],
            "not_expressible": apart,
        }
    )


def at_host_launch(outcomes: list[Outcome], predict: Predict, host_s: float) -> list[Outcome]:
    """``outcomes`` with the MoE rows re-priced at a host-launch time of ``host_s`` seconds
    and every other option as the row has it (`validation_stats.apply_model` with no factor
    fitted)."""
    model = FittedModel(fp8_factor=None, fitted_on=(), moe_host_launch_s=host_s)
    moe = [o for o in outcomes if o.kind == "moe"]
    repriced = {o.row_id: o for o in apply_model(moe, predict, model)}
    return [repriced.get(o.row_id, o) for o in outcomes]


def not_fitting_report(outcomes: list[Outcome]) -> dict[str, object]:
    """``not_fitting``: every row predicted not to fit its device, with its peak and device
    memory and, for a row printed unlike the recipe its release ships
    (`row_recipes.recipe_mismatch`), the reason; ``fit_fraction_as_run``: the fit fraction
    over the rows whose printed configuration is the one that ran (those printed unlike
    their recipe reported apart, in ``not_fitting`` with their reason)."""
    as_run = [o for o in outcomes if not o.not_fit_reason]
    return {
        "not_fitting": [
            {
                "row_id": o.row_id,
                "source_id": o.source_id,
                "model": o.model,
                "plan": o.plan,
                "peak_memory_gib": o.peak_memory_gib,
                "device_memory_gib": o.device_memory_gib,
                "printed_not_recipe": o.not_fit_reason,
            }
            for o in outcomes
            if not o.fits
        ],
        "fit_fraction_as_run": (
            sum(o.fits for o in as_run) / len(as_run) if as_run else float("nan")
        ),
    }


def strategy_report(outcomes: list[Outcome]) -> dict[str, object]:
    """``strategy_groups`` (group -> Kendall tau), ``strategy_pairs`` (pairs over all
    groups) and ``strategy_rates`` (group -> strategy -> published and predicted tokens/s
    per GPU) of `validation_stats.kendall_tau`."""
    tau = kendall_tau(outcomes)
    rates = {
        group: {
            name: {"published_tokens_per_s_per_gpu": pub, "predicted_tokens_per_s_per_gpu": pred}
            for name, (pub, pred) in strategies.items()
        }
        for group, strategies in tau["strategies"].items()  # type: ignore[union-attr]
    }
    return {
        "strategy_groups": tau["groups"],
        "strategy_pairs": tau["pairs"],
        "strategy_rates": rates,
    }


def outcome_row(o: Outcome, loso_error: float) -> dict[str, object]:
    """One row of the bench's JSON."""
    return {
        "row_id": o.row_id,
        "source_id": o.source_id,
        "model": o.model,
        "plan": o.plan,
        "generation": o.generation,
        "precision": o.precision,
        "kind": o.kind,
        "published_s": o.published_s,
        "predicted_s": o.predicted_s,
        "error": o.error,
        "loso_error": loso_error,
        "peak_memory_gib": o.peak_memory_gib,
        "device_memory_gib": o.device_memory_gib,
        "fits": o.fits,
        "fit_generation": o.fit_key,
    } | ({"not_fit_reason": o.not_fit_reason} if o.not_fit_reason else {})


def figures(outcomes: list[Outcome]) -> dict[str, object]:
    """Overall summary, Kendall tau and per-grouping summaries of ``outcomes``."""
    result: dict[str, object] = dict(summary(outcomes))
    result["kendall_tau"] = kendall_tau(outcomes)["kendall_tau"]
    for name, key in GROUPINGS.items():
        result[f"by_{name}"] = {g: summary(rows) for g, rows in grouped(outcomes, key).items()}
    sc21 = [o for o in outcomes if o.source_id == SC21_TABLE1]
    result["sc21_table1"] = summary(sc21) | {"target": SC21_TARGET}
    return result


def report(
    outcomes: list[Outcome],
    apart: list[dict[str, str]],
    predict: Predict,
    grid: FitGrid = FIT_GRID,
) -> dict[str, object]:
    """The bench's JSON: model figures at the top level, ``fitted``, ``loso`` and
    ``per_generation``, the fits searching ``grid``."""
    fitted = fit_model(outcomes, predict, grid, per_generation=PER_GENERATION)
    loso, loso_models = leave_one_source_out(outcomes, predict, grid, per_generation=PER_GENERATION)
    loso_by_row = {o.row_id: o for o in loso}
    rows = [outcome_row(o, loso_by_row[o.row_id].error) for o in outcomes]
    return (
        figures(outcomes)
        | strategy_report(outcomes)
        | not_fitting_report(outcomes)
        | {
            "fitted": figures(apply_model(outcomes, predict, fitted))
            | {
                "fp8_gemm_rate_factor": fitted.fp8_factor,
                "fitted_on": list(fitted.fitted_on),
                "fp8_gemm_rate_factor_by_generation": fitted.fp8_factors,
                "fp8_fitted_on_by_generation": {
                    g: list(r) for g, r in fitted.fp8_fitted_on.items()
                },
                "moe_host_launch_s": fitted.moe_host_launch_s,
                "moe_host_fitted_on": list(fitted.host_fitted_on),
            }
            | sustained_report(fitted),
            "loso": figures(loso)
            | {
                "fp8_gemm_rate_factor_by_left_out_source": {
                    family: m.fp8_factors | {"shared": m.fp8_factor}
                    for family, m in loso_models.items()
                },
                "moe_host_launch_s_by_left_out_source": {
                    family: m.moe_host_launch_s for family, m in loso_models.items()
                },
                "sustained_gemm_rate_factor_by_left_out_source": {
                    family: m.sustained_factors | {"shared": m.sustained_factor}
                    for family, m in loso_models.items()
                },
            },
            "per_generation": other_choice(outcomes, predict, grid),
            "memory_case_llama3_8b_h100": llama3_8b_memory_case(),
            "rows": rows,
            "not_expressible": apart,
        }
    )


def sustained_report(fitted: FittedModel) -> dict[str, object]:
    """The fitted sustained 16-bit GEMM rate factors (per generation with dense 16-bit
    rows, and the shared one of the other generations) and the rows that fitted them."""
    return {
        "sustained_gemm_rate_factor_by_generation": fitted.sustained_factors,
        "sustained_gemm_rate_factor_shared": fitted.sustained_factor,
        "sustained_fitted_on_by_generation": {
            g: list(r) for g, r in fitted.sustained_fitted_on.items()
        },
    }


def other_choice(
    outcomes: list[Outcome], predict: Predict, grid: FitGrid = FIT_GRID
) -> dict[str, object]:
    """In-sample and leave-one-source-out figures with `PER_GENERATION` the other way,
    and the factors of the in-sample fit."""
    choice = not PER_GENERATION
    fitted = fit_model(outcomes, predict, grid, per_generation=choice)
    loso, _ = leave_one_source_out(outcomes, predict, grid, per_generation=choice)
    return {
        "per_generation": choice,
        "fp8_gemm_rate_factor": fitted.fp8_factor,
        "fp8_gemm_rate_factor_by_generation": fitted.fp8_factors,
        "moe_host_launch_s": fitted.moe_host_launch_s,
        "sustained_gemm_rate_factor_by_generation": fitted.sustained_factors,
        "fitted": figures(apply_model(outcomes, predict, fitted)),
        "loso": figures(loso),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--markdown", action="store_true", help="write docs/validation.md")
    parser.add_argument("--figure", action="store_true", help="write docs/validation.png")
    parser.add_argument(
        "--search", action="store_true", help="add the planner's search sanity (trust A rows)"
    )
    parser.add_argument("--csv", type=Path, default=default_csv(), help="published-runs CSV")
    parser.add_argument(
        "--rows",
        default="",
        help="only the rows whose source id, model or row id contains one of these "
        "comma-separated texts (case-insensitive)",
    )
    parser.add_argument(
        "--no-fit",
        action="store_true",
        help="price the rows with the shipped defaults only: no fitted or leave-one-source-out "
        "sections (a quick look at a change)",
    )
    parser.add_argument(
        "--host-launch-us",
        type=float,
        default=None,
        help="fix the MoE host-launch time at this many microseconds: --no-fit prices the MoE "
        "rows with it, the fits take it as an input instead of fitting it",
    )
    args = parser.parse_args(argv)
    if args.csv is None or not args.csv.is_file():
        print(f"published-runs CSV not found ({args.csv}); pass --csv PATH", file=sys.stderr)
        return 2
    selected = select_rows(read_rows(args.csv), args.rows)
    outcomes, cases, apart = evaluate(selected)
    host_s = None if args.host_launch_us is None else args.host_launch_us * 1e-6
    if args.no_fit:
        if host_s is not None:
            outcomes = at_host_launch(outcomes, row_predictor(cases), host_s)
        result = defaults_report(outcomes, apart)
    else:
        result = report(outcomes, apart, row_predictor(cases), fit_grid(host_s))
    result["same_recipe_ratios"] = with_predictions(
        same_recipe_ratios(read_rows(args.csv)), {o.row_id: o.predicted_s for o in outcomes}
    )
    result["unstated_vpp"] = unstated_vpp_report(selected)
    if args.search:
        from search_sanity import search_sanity

        result["search_sanity"] = search_sanity(read_rows(args.csv))
    if args.markdown or args.figure:
        from validation_docs import write_figure, write_markdown

        if args.markdown:
            write_markdown(result, DOCS / "validation.md")
        if args.figure:
            write_figure(outcomes, DOCS / "validation.png")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    """Per-row lines and the three summaries, as text."""
    print(
        f"{'row':>4} {'source':<18} {'model':<22} {'plan':<34} {'pub s':>8} {'pred s':>8} "
        f"{'error':>7} {'loso':>7} {'GiB':>5} fits"
    )
    for r in result["rows"]:
        print(
            f"{r['row_id']:>4} {r['source_id']:<18} {r['model'][:22]:<22} {r['plan'][:34]:<34} "
            f"{r['published_s']:>8.3f} {r['predicted_s']:>8.3f} {r['error']:>+7.1%} "
            f"{r['loso_error']:>+7.1%} {r['peak_memory_gib']:>5.0f} {r['fits']}"
        )
    for name in ("model", "fitted", "loso"):
        if name != "model" and name not in result:
            continue
        figs = result if name == "model" else result[name]
        print(
            f"{name:>6}: rows {figs['num_rows']}, median |error| {figs['median_abs_error']:.1%}, "
            f"signed median {figs['signed_median_error']:+.1%}, p90 {figs['p90_abs_error']:.1%}, "
            f"fit {figs['fit_fraction']:.0%}, Kendall tau {figs['kendall_tau']:.2f}"
        )
    for r in result["not_fitting"]:
        reason = r["printed_not_recipe"]
        print(
            f"not fitting: row {r['row_id']} {r['model'][:22]} {r['plan']}: "
            f"{r['peak_memory_gib']:.1f} of {r['device_memory_gib']:.1f} GiB"
            + (f"; printed unlike its recipe: {reason}" if reason else "")
        )
    print(f"fit fraction of the rows printed as run: {result['fit_fraction_as_run']:.0%}")
    print(f"not expressible yet: {len(result['not_expressible'])} trusted rows")
    print_unstated_vpp(result.get("unstated_vpp", []))
    sanity = result.get("search_sanity")
    if sanity:
        for r in sanity["rows"]:
            print(
                f"search {r['row_id']:>4} {r['model'][:22]:<22} recipe {r['recipe']:<34} "
                f"pick {r['pick']:<34} speedup {r['claimed_speedup']:.2f}x rank {r['recipe_rank']} "
                f"free {r['pick_memory_free']:.0%}; same recompute "
                f"{r['same_recompute_speedup']:.2f}x rank {r['same_recompute_rank']}"
            )
        print(
            f"search sanity: median claimed speedup {sanity['median_claimed_speedup']:.2f}x, "
            f"recipe in top 10: {sanity['recipe_in_top10_fraction']:.0%}; held to the "
            f"recipe's recompute: {sanity['median_same_recompute_speedup']:.2f}x, "
            f"{sanity['same_recompute_in_top10_fraction']:.0%}; counting only plans more than "
            f"{sanity['tie_tolerance']:.0%} faster: "
            f"{sanity['recipe_in_top10_within_error_fraction']:.0%} and "
            f"{sanity['same_recompute_in_top10_within_error_fraction']:.0%}"
        )


if __name__ == "__main__":
    sys.exit(main())
