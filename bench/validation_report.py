"""The figures of the published-runs validation (`bench/validate_published.py`) as the
JSON it prints: summaries over all rows and per source, GPU generation, precision and
dense/MoE, the SC21 Table 1 group, Kendall tau over strategy groups, the rows predicted not
to fit, one entry per row, and (with the fits) the ``fitted``, ``loso`` and
``per_generation`` sections and the Llama-3-8B memory case. The statistics themselves are
`validation_stats`'s, the fits `validation_fit`'s; the rows are priced by `row_pricing`."""

from __future__ import annotations

from row_options import MEGATRON_BRIDGE_PERF
from row_pricing import FIT_GRID
from validation_fit import (
    Predict,
    Progress,
    apply_model,
    fit_model,
    leave_one_source_out,
    no_progress,
)
from validation_fit_params import FitGrid, FittedModel
from validation_stats import Outcome, grouped, kendall_tau, summary

from costmodel.estimate import estimate_plan, stage_memory_parts_gib
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.megatron_estimator import megatron_theoretical_memory
from costmodel.memory_allowances import GiB
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

PER_GENERATION = True
"""Whether the FP8 GEMM rate factor is fitted per GPU generation (`validation_fit.fit_model`,
keyed by the profile's `DeviceSpec.generation`: `Outcome.fit_key`) rather than once for
all. On: Blackwell Ultra (B300, GB300) publishes a higher training rate than Blackwell on
identical recipes (``same_recipe_ratios``: GB300 over GB200 about 1.2) that its profiles'
peaks do not carry (GB300 has no MAMF of its own), so its FP8 rows fit their own factor
(`costmodel.fitted_rates.FP8_GEMM_RATE_FACTORS`). Each generation's FP8 rows come from one
source family (H100: NeMo long-sequence; Blackwell and Blackwell Ultra: Megatron-Bridge,
with the MoE model zoo on Blackwell), so leaving that family out leaves the generation to
the shared factor. The ``per_generation`` block of the JSON shows the single-factor fit."""
SC21_TABLE1 = "SC21-T1"
SC21_TARGET = 0.10
"""Median |error| target of the SC21 Table 1 group."""
GROUPINGS = {
    "source": lambda o: o.source_id,
    "generation": lambda o: o.generation,
    "precision": lambda o: o.precision,
    "kind": lambda o: o.kind,
}


def figures(outcomes: list[Outcome]) -> dict[str, object]:
    """Overall summary, Kendall tau and per-grouping summaries of ``outcomes``."""
    result: dict[str, object] = dict(summary(outcomes))
    result["kendall_tau"] = kendall_tau(outcomes)["kendall_tau"]
    for name, key in GROUPINGS.items():
        result[f"by_{name}"] = {g: summary(rows) for g, rows in grouped(outcomes, key).items()}
    sc21 = [o for o in outcomes if o.source_id == SC21_TABLE1]
    result["sc21_table1"] = summary(sc21) | {"target": SC21_TARGET}
    return result


def outcome_row(o: Outcome, loso_error: float) -> dict[str, object]:
    """One row of the bench's JSON."""
    return (
        {
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
        }
        | ({"not_fit_reason": o.not_fit_reason} if o.not_fit_reason else {})
        | ({"assumption": o.assumption} if o.assumption else {})
    )


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


def report(
    outcomes: list[Outcome],
    apart: list[dict[str, str]],
    predict: Predict,
    grid: FitGrid = FIT_GRID,
    progress: Progress = no_progress,
) -> dict[str, object]:
    """The bench's JSON: model figures at the top level, ``fitted``, ``loso`` and
    ``per_generation``, the fits searching ``grid``; ``progress`` gets a line before each
    fit."""
    progress(f"in-sample fit over {len(outcomes)} rows")
    fitted = fit_model(outcomes, predict, grid, per_generation=PER_GENERATION)
    loso, loso_models = leave_one_source_out(
        outcomes, predict, grid, per_generation=PER_GENERATION, progress=progress
    )
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
                "fp4_gemm_rate_factor_by_generation": fitted.fp4_factors,
                "fp4_fitted_on_by_generation": {
                    g: list(r) for g, r in fitted.fp4_fitted_on.items()
                },
                "moe_host_launch_s": fitted.moe_host_launch_s,
                "moe_host_fitted_on": list(fitted.host_fitted_on),
                "moe_expert_launch_s": fitted.moe_expert_launch_s,
                "moe_expert_fitted_on": list(fitted.expert_fitted_on),
                "moe_token_device_s": fitted.moe_token_device_s,
            }
            | sustained_report(fitted),
            "loso": figures(loso)
            | {
                "fp8_gemm_rate_factor_by_left_out_source": {
                    family: m.fp8_factors | {"shared": m.fp8_factor}
                    for family, m in loso_models.items()
                },
                "fp4_gemm_rate_factor_by_left_out_source": {
                    family: m.fp4_factors for family, m in loso_models.items()
                },
                "moe_host_launch_s_by_left_out_source": {
                    family: m.moe_host_launch_s for family, m in loso_models.items()
                },
                "moe_expert_launch_s_by_left_out_source": {
                    family: m.moe_expert_launch_s for family, m in loso_models.items()
                },
                "moe_token_device_s_by_left_out_source": {
                    family: m.moe_token_device_s for family, m in loso_models.items()
                },
                "sustained_gemm_rate_factor_by_left_out_source": {
                    family: m.sustained_factors | {"shared": m.sustained_factor}
                    for family, m in loso_models.items()
                },
            },
            "per_generation": other_choice(outcomes, predict, grid, progress),
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
    outcomes: list[Outcome],
    predict: Predict,
    grid: FitGrid = FIT_GRID,
    progress: Progress = no_progress,
) -> dict[str, object]:
    """In-sample and leave-one-source-out figures with `PER_GENERATION` the other way,
    and the factors of the in-sample fit."""
    choice = not PER_GENERATION
    progress(f"in-sample fit with per-generation factors {'on' if choice else 'off'}")
    fitted = fit_model(outcomes, predict, grid, per_generation=choice)
    loso, _ = leave_one_source_out(
        outcomes, predict, grid, per_generation=choice, progress=progress
    )
    return {
        "per_generation": choice,
        "fp8_gemm_rate_factor": fitted.fp8_factor,
        "fp8_gemm_rate_factor_by_generation": fitted.fp8_factors,
        "fp4_gemm_rate_factor_by_generation": fitted.fp4_factors,
        "moe_host_launch_s": fitted.moe_host_launch_s,
        "moe_expert_launch_s": fitted.moe_expert_launch_s,
        "moe_token_device_s": fitted.moe_token_device_s,
        "sustained_gemm_rate_factor_by_generation": fitted.sustained_factors,
        "fitted": figures(apply_model(outcomes, predict, fitted)),
        "loso": figures(loso),
    }


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
