"""Cluster sizing of `paraplan plan --tokens T`: the run, its table, JSON and files.

`paraplan.commands.plan` parses and checks the flags and builds the model, the job (with
its token budget), the profile and the search space; `run_sizing` sizes the cluster
(`planner.sizing.size_cluster`) under ``--days``, ``--max-gpus`` or ``--budget`` (with
``--gpu-hour-usd``), prints the table of cluster sizes or the JSON (``--json``), says how
``--time-limit`` cut the run, and with ``--out DIR`` writes sizing.json, sizing.csv,
scaling.png and plan.json of the chosen size (with the execution options it was priced
with, `costmodel.execution_record`). The planner and pandas are imported inside the
functions, so importing this module loads neither.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costmodel.execution_record import record_options
from paraplan.commands.plan_results import plan_entry
from paraplan.fix_flags import cli_fix
from paraplan.output import DeferredProgress, print_json, print_table
from paraplan.recipe_args import options_from_args
from profiles.schema import HardwareProfile
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.formats import mfu_text
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.serde import dumps

if TYPE_CHECKING:
    from planner.sizing import SizingResult, SizingRow
    from planner.space import SearchSpace


def row_reason(row: SizingRow) -> str | None:
    """Why no plan was found on the row's size, its rule fix in this command's flags
    (`paraplan.fix_flags.cli_fix`); None with a plan."""
    return None if row.reason is None else cli_fix(row.reason)


def sizing_row_json(row: SizingRow) -> dict[str, Any]:
    """One cluster size: GPUs, the best plan (knobs and metrics) or the reason there is none,
    days, GPU-hours, cost (null without a plan)."""
    return {
        "num_gpus": row.num_gpus,
        "plan": plan_entry(row.best) if row.best else None,
        "reason": row_reason(row),
        "tokens_per_s": row.tokens_per_s if row.best else None,
        "mfu": row.mfu if row.best else None,
        "mfu_bf16": row.mfu_bf16,
        "days": row.days if row.best else None,
        "gpu_hours": row.gpu_hours if row.best else None,
        "cost_usd": row.cost_usd if row.best else None,
    }


def sizing_table_row(row: SizingRow) -> list[Any]:
    """GPUs, plan (or why none), tokens/s, MFU, days, GPU-hours, cost; "-" without a plan."""
    if row.best is None:
        return [row.num_gpus, f"none: {row_reason(row)}", "-", "-", "-", "-", "-"]
    return [
        row.num_gpus,
        row.best.plan.label(),
        round(row.tokens_per_s),
        mfu_text(row.mfu, row.best.estimate.mfu_peak_dtype, row.mfu_bf16),
        f"{row.days:,.1f}",
        f"{row.gpu_hours:,.0f}",
        "-" if row.cost_usd is None else f"{row.cost_usd:,.0f}",
    ]


def sizing_time_limit_json(result: SizingResult) -> dict[str, Any]:
    """The ``time_limit`` entry of the sizing JSON: the limit, whether it cut the run short,
    the sizes searched, those whose search it cut short, those not searched, and the
    sentence of the text output (empty when not reached)."""
    from planner.sizing import sizing_time_limit_note

    return {
        "limit_s": result.time_limit_s,
        "reached": result.time_limit_reached,
        "searched": [r.num_gpus for r in result.rows],
        "cut_short": [r.num_gpus for r in result.rows if r.time_limit_reached],
        "not_searched": list(result.not_searched),
        "note": sizing_time_limit_note(result),
    }


def _print_sizing(result: SizingResult) -> None:
    from planner.sizing import sizing_time_limit_note

    columns = ["GPUs", "plan", "tokens/s", "MFU", "days", "GPU-hours", "cost (USD)"]
    rows = [sizing_table_row(r) for r in result.rows]
    print_table(f"cluster sizing: {result.goal}", columns, rows)
    note = sizing_time_limit_note(result)
    if note:
        print(note)
    if result.chosen is None:
        print(f"No evaluated cluster size meets the goal ({result.goal}).")
        return
    print(f"Chosen: {result.chosen.num_gpus} GPUs, {result.chosen.days:.1f} days.")
    if result.cheapest is not None and result.cheapest is not result.chosen:
        print(
            f"Cheapest meeting the goal: {result.cheapest.num_gpus} GPUs, "
            f"{result.cheapest.gpu_hours:,.0f} GPU-hours."
        )


def sizing_csv_row(row: SizingRow) -> dict[str, Any]:
    """One row of sizing.csv: the columns of the table, empty without a plan, and the reason."""
    found = row.best is not None
    return {
        "num_gpus": row.num_gpus,
        "plan": row.best.plan.label() if row.best else "",
        "tokens_per_s": row.tokens_per_s if found else None,
        "mfu": row.mfu if found else None,
        "mfu_bf16": row.mfu_bf16,
        "days": row.days if found else None,
        "gpu_hours": row.gpu_hours if found else None,
        "cost_usd": row.cost_usd if found else None,
        "reason": row_reason(row) or "",
    }


def size_from_args(
    args: argparse.Namespace,
    *,
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    space: SearchSpace,
) -> SizingResult:
    """`planner.sizing.size_cluster` of ``job`` (which carries the token budget) under the
    goal and price flags, the search flags (at most 3 plans simulated per size) and
    ``--time-limit``, with a progress bar on stderr."""
    from planner.sizing import size_cluster

    bar = DeferredProgress()
    try:
        return size_cluster(
            model,
            args.hardware,
            job,
            profile,
            days=args.days,
            max_gpus=args.max_gpus,
            budget_usd=args.budget,
            gpu_hour_usd=args.gpu_hour_usd,
            gpus_per_node=args.gpus_per_node,
            space=space,
            top_k=min(args.top, 3),
            memory_headroom=args.memory_headroom,
            progress=lambda gpus, done, total: bar(
                f"sizing: searching {gpus} GPUs ({done + 1} of at most {total} sizes)", done, total
            ),
            options=options_from_args(args),
            time_limit_s=args.time_limit,
        )
    finally:
        bar.close()


def sizing_json(result: SizingResult, runtime: str) -> dict[str, Any]:
    """The ``--json`` output and sizing.json: runtime, goal, the chosen and the cheapest size
    (`sizing_row_json`, null when none), every size searched, and ``time_limit``
    (`sizing_time_limit_json`) when the run had one."""
    data: dict[str, Any] = {
        "runtime": runtime,
        "goal": result.goal,
        "chosen": sizing_row_json(result.chosen) if result.chosen else None,
        "cheapest": sizing_row_json(result.cheapest) if result.cheapest else None,
        "rows": [sizing_row_json(r) for r in result.rows],
    }
    if result.time_limit_s is not None:
        data["time_limit"] = sizing_time_limit_json(result)
    return data


def run_sizing(
    args: argparse.Namespace,
    *,
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    space: SearchSpace,
) -> int:
    """Size the cluster (`size_from_args`), write ``--out``, print the table or the JSON;
    exit code 0 when a size meets the goal, 1 when none does."""
    result = size_from_args(args, model=model, job=job, profile=profile, space=space)
    data = sizing_json(result, args.runtime)
    if args.out:
        _write_sizing_outputs(result, data, model, job, args, Path(args.out))
    if args.json:
        print_json(data)
    else:
        _print_sizing(result)
        print(f"runtime: {args.runtime}")
    return 0 if result.chosen is not None else 1


def _write_sizing_outputs(
    result: SizingResult,
    data: dict[str, Any],
    model: ModelSpec,
    job: TrainingJob,
    args: argparse.Namespace,
    out: Path,
) -> None:
    import pandas as pd

    from planner.sizing_plot import scaling_plot

    out.mkdir(parents=True, exist_ok=True)
    (out / "sizing.json").write_text(json.dumps(data, indent=2) + "\n")
    pd.DataFrame([sizing_csv_row(r) for r in result.rows]).to_csv(out / "sizing.csv", index=False)
    scaling_plot(result, out / "scaling.png")
    if result.chosen is not None and result.chosen.best is not None:
        cluster = ClusterSpec(
            hardware=args.hardware,
            num_gpus=result.chosen.num_gpus,
            gpus_per_node=args.gpus_per_node,
        )
        bundle = PlanBundle(
            model=model,
            cluster=cluster,
            job=job,
            plan=result.chosen.best.plan,
            execution=record_options(options_from_args(args)),
        )
        (out / "plan.json").write_text(dumps(bundle) + "\n")
