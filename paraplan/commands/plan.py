"""`paraplan plan`: search the parallel plans of a job on a cluster, or size the cluster.

Two forms:
- ``--num-gpus N``: the best plans on N GPUs (`planner.search.search_plans`), printed as a
  table with the explanation, or as JSON with ``--json``; ``--out DIR`` writes plan.json,
  candidates.csv, candidates.json, estimate.json, predicted.json, prediction.trace.json and
  plan.html.
- ``--tokens T`` with ``--days D``, ``--max-gpus N`` or ``--budget USD --gpu-hour-usd P``:
  cluster sizing (`planner.sizing.size_cluster`); ``--out DIR`` writes sizing.csv,
  sizing.json, scaling.png and plan.json of the chosen size.

Every plan flag is optional: a flag given fixes that knob, the others are searched.
``--time-limit S`` bounds the search on N GPUs: past S seconds it ranks the best of the
candidates priced so far and says how many of how many those are (text and ``--json``).
With ``--tokens`` it bounds the whole sizing run, split over the cluster sizes, and says
which sizes were searched, cut short or not searched.
Exit codes: 0 a plan (or a cluster size) was found; 1 nothing fits or meets the goal;
2 bad input.

The search (`planner`, the cost model, pandas, networkx) is imported where it starts, after
the model, job and profile have been read: ``--help`` and bad input answer without loading it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costmodel.execution import ExecutionOptions, device_options
from paraplan.args import (
    add_problem_args,
    add_recipe_args,
    add_runtime_arg,
    add_split_args,
    job_from_args,
    model_from_args,
    module_list,
    options_from_args,
)
from paraplan.assumptions import memory_assumptions
from paraplan.commands import COMMAND_HELP
from paraplan.flags import spellings
from paraplan.output import DeferredProgress, print_json, print_table
from planner.defaults import DEFAULT_HEADROOM, DEFAULT_MAX_MICRO_BATCH_SIZE
from profiles import load_profile
from reports.html import render_report
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.formats import percent
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.serde import dumps, to_dict

if TYPE_CHECKING:
    import pandas as pd

    from planner.search import RankedPlan, SearchResult
    from planner.sizing import SizingResult, SizingRow
    from planner.space import SearchSpace

NAME = "plan"
HELP = COMMAND_HELP[NAME]

KNOB_FLAGS: dict[str, str] = {
    "tp": "tp",
    "pp": "pp",
    "vpp": "vpp",
    "cp": "cp",
    "ep": "ep",
    "etp": "etp",
    "mbs": "micro_batch_size",
    "sp": "sequence_parallel",
    "recompute": "recompute",
    "recompute_num_layers": "recompute_num_layers",
    "recompute_method": "recompute_method",
    "dist_opt": "distributed_optimizer",
    "use_megatron_fsdp": "use_megatron_fsdp",
    "data_parallel_sharding_strategy": "data_parallel_sharding_strategy",
    "bucket_size": "ddp_bucket_size",
    "overlap_grad_reduce": "overlap_grad_reduce",
    "overlap_param_gather": "overlap_param_gather",
    "tp_comm_overlap": "tp_comm_overlap",
    "decoder_first_pipeline_num_layers": "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers": "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split": "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split": "account_for_loss_in_pipeline_split",
    "pipeline_model_parallel_layout": "pipeline_model_parallel_layout",
    "recompute_modules": "recompute_modules",
    "cpu_offloading_num_layers": "cpu_offloading_num_layers",
    "offload_modules": "offload_modules",
}
"""argparse dest -> `ParallelPlan` field of each knob flag."""
MODULE_FLAGS = ("recompute_modules", "offload_modules")
"""Knob flags whose comma-separated text is a module tuple (`paraplan.args.module_list`)."""

DEFAULT_CANDIDATES_LIMIT = 1000
"""Screened candidates written to candidates.csv by default (the best by screened tokens/s)."""


def add_knob_args(parser: argparse.ArgumentParser) -> None:
    """The plan flags of `paraplan estimate`, each optional: unset means searched."""
    g = parser.add_argument_group("fix plan knobs (unset = searched; dp = num_gpus/(tp*pp*cp))")
    for flag, text in (
        ("--tp", "tensor-parallel size"),
        ("--pp", "pipeline stages"),
        ("--vpp", "model chunks per pipeline rank"),
        ("--cp", "context-parallel size"),
        ("--ep", "expert-parallel size"),
        ("--etp", "expert tensor-parallel size"),
        ("--mbs", "micro-batch size (sequences)"),
        (
            "--recompute-num-layers",
            "with full recompute: layers per pipeline chunk (block) or per recompute group "
            "(uniform), as Megatron's --recompute-num-layers",
        ),
        (
            "--cpu-offloading-num-layers",
            "layers whose activations are offloaded to host memory (pp 1, no recompute; "
            "never searched: default 0, off)",
        ),
        ("--bucket-size", "DDP gradient bucket (parameters; 0: Megatron's default)"),
    ):
        g.add_argument(*spellings(flag), type=int, default=None, help=text)
    g.add_argument(*spellings("--recompute"), choices=("none", "selective", "full"), default=None)
    g.add_argument("--recompute-method", choices=("uniform", "block"), default=None)
    g.add_argument(
        "--recompute-modules",
        default=None,
        help="selective recompute of these comma-separated Megatron-core modules (core_attn, "
        "moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; 'none': no module); "
        "implies --recompute selective (default: searched where memory binds)",
    )
    g.add_argument(
        "--offload-modules",
        default=None,
        help="fine-grained activation offloading of these comma-separated modules' inputs "
        "(attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act; never "
        "searched: default off)",
    )
    g.add_argument(
        "--data-parallel-sharding-strategy",
        choices=("no_shard", "optim", "optim_grads", "optim_grads_params"),
        default=None,
        help="Megatron-FSDP sharding strategy (implies --use-megatron-fsdp unless no_shard; "
        "default: optim_grads_params searched beside the distributed optimizer)",
    )
    for flag, text in (
        ("--sp", "sequence parallel"),
        ("--dist-opt", "distributed optimizer"),
        ("--use-megatron-fsdp", "Megatron-FSDP (instead of DDP / distributed optimizer)"),
        ("--overlap-grad-reduce", "overlap DP gradient reduction"),
        ("--overlap-param-gather", "overlap parameter all-gather"),
        ("--tp-comm-overlap", "overlap TP communication with GEMMs"),
    ):
        g.add_argument(
            *spellings(flag), action=argparse.BooleanOptionalAction, default=None, help=text
        )
    add_split_args(g, searched=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # --num-gpus is optional here: the sizing form (--tokens) searches over GPU counts
    add_problem_args(parser, num_gpus_required=False)
    add_runtime_arg(parser, "megatron")
    add_recipe_args(parser)
    add_knob_args(parser)
    g = parser.add_argument_group("search")
    g.add_argument("--top", type=int, default=5, help="plans simulated and shown (default 5)")
    g.add_argument(
        "--memory-headroom",
        type=float,
        default=DEFAULT_HEADROOM,
        help=f"fraction of device memory kept free (default {DEFAULT_HEADROOM})",
    )
    g.add_argument(
        "--max-mbs",
        type=int,
        default=DEFAULT_MAX_MICRO_BATCH_SIZE,
        help=f"largest micro-batch tried (default {DEFAULT_MAX_MICRO_BATCH_SIZE})",
    )
    g.add_argument(
        "--tp-beyond-scale-up", action="store_true", help="also try tp beyond the NVLink domain"
    )
    g.add_argument("--out", default=None, help="folder for plan.json and the other results")
    g.add_argument(
        "--candidates-limit",
        type=int,
        default=DEFAULT_CANDIDATES_LIMIT,
        metavar="N",
        help="with --out: candidates.csv keeps the simulated plans, the rule-rejected "
        f"representatives and the N best screened candidates (default {DEFAULT_CANDIDATES_LIMIT}"
        "; 0 writes every candidate)",
    )
    g.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop screening new candidates after this many seconds and rank the best of "
        "those priced; the output says how many were (with --tokens: over the whole sizing "
        "run; default: no limit)",
    )
    g.add_argument("--json", action="store_true", help='print {"best", "top", "rejected"}')
    s = parser.add_argument_group("cluster sizing (instead of --num-gpus)")
    s.add_argument("--tokens", type=float, default=None, help="token budget of the training run")
    s.add_argument("--days", type=float, default=None, help="deadline in days")
    s.add_argument("--max-gpus", type=int, default=None, help="largest cluster allowed")
    s.add_argument("--budget", type=float, default=None, help="budget in USD")
    s.add_argument("--gpu-hour-usd", type=float, default=None, help="price of one GPU-hour")


def space_from_args(args: argparse.Namespace) -> SearchSpace:
    """The search space: fixed knobs from the flags that were given."""
    from planner.space import SearchSpace

    fixed = {
        field: getattr(args, dest)
        for dest, field in KNOB_FLAGS.items()
        if getattr(args, dest) is not None
    }
    for name in MODULE_FLAGS:
        if name in fixed:
            fixed[name] = module_list(fixed[name])
    strategy = fixed.get("data_parallel_sharding_strategy")
    if strategy not in (None, "no_shard"):
        fixed.setdefault("use_megatron_fsdp", True)  # the strategy is Megatron-FSDP's
    if "recompute_modules" in fixed:
        fixed.setdefault("recompute", "selective")  # the modules are selective recompute's
    return SearchSpace(
        fixed=fixed,
        tp_beyond_scale_up=args.tp_beyond_scale_up,
        max_micro_batch_size=args.max_mbs,
    )


def plan_entry(ranked: RankedPlan) -> dict[str, Any]:
    """A plan's knobs (ParallelPlan field names) with the metrics of `estimate --json`."""
    from costmodel.estimate import estimate_to_json

    return {**to_dict(ranked.plan), "label": ranked.plan.label()} | estimate_to_json(
        ranked.estimate
    )


def time_limit_json(result: SearchResult) -> dict[str, Any]:
    """The ``time_limit`` entry of `search_json`: the limit, whether it cut the search short,
    the valid candidates, those screened and those not reached, the picks simulated and
    those not, and the explanation's sentence (empty when not reached)."""
    from planner.explain import time_limit_note

    return {
        "limit_s": result.time_limit_s,
        "reached": result.time_limit_reached,
        "valid": result.num_valid,
        "screened": result.num_screened,
        "not_reached": result.num_unvisited,
        "simulated": result.num_simulated,
        "not_simulated": result.num_unsimulated,
        "note": time_limit_note(result),
    }


def search_json(result: SearchResult) -> dict[str, Any]:
    """``{"best", "top", "rejected"}``, ``closest`` when nothing fits, and ``time_limit``
    (`time_limit_json`) when the search had one."""
    data: dict[str, Any] = {
        "best": plan_entry(result.best) if result.best else None,
        "top": [plan_entry(r) for r in result.top],
        "rejected": dict(result.rejected),
    }
    if result.best is None:
        data["closest"] = [plan_entry(r) for r in result.closest]
    if result.time_limit_s is not None:
        data["time_limit"] = time_limit_json(result)
    return data


def _sharding(plan: ParallelPlan) -> str:
    """What the plan shards over data parallelism: ``distopt``, ``fsdp:<strategy>`` or -."""
    if plan.use_megatron_fsdp:
        return f"fsdp:{plan.data_parallel_sharding_strategy}"
    return "distopt" if plan.distributed_optimizer else "-"


def recompute_cell(plan: ParallelPlan) -> str:
    """The recompute column of the plan table: ``none``, ``selective`` (with
    ``:module+module`` for a per-module set), ``full:<method>``, then the offloading
    (`ParallelPlan.saver_label` form: ``offload<N>``, ``offload=<modules>``)."""
    cell = plan.recompute if plan.recompute != "full" else f"full:{plan.recompute_method}"
    if plan.recompute == "selective" and plan.recompute_modules is not None:
        cell += ":" + ("+".join(plan.recompute_modules) or "-")
    offload = [p for p in plan.saver_label().split() if p.startswith("offload")]
    return " ".join([cell, *offload])


def _print_top(result: SearchResult, limit: int) -> None:
    shown = result.top[:limit] if result.top else result.closest[:limit]
    if not shown:
        return
    columns = ["#", "tp", "pp", "vpp", "split", "cp", "ep", "etp", "dp", "mbs", "sp",
               "recompute", "dp sharding", "overlap g/p/tp", "iter (s)", "tokens/s", "MFU",
               "peak GiB"]  # fmt: skip
    rows = []
    for i, r in enumerate(shown, 1):
        p, e = r.plan, r.estimate
        flags = "/".join(
            "y" if f else "-"
            for f in (p.overlap_grad_reduce, p.overlap_param_gather, p.tp_comm_overlap)
        )
        recompute = recompute_cell(p)
        rows.append([
            i, p.tp, p.pp, p.vpp, p.split_label() or "even", p.cp, p.ep,
            p.expert_tp if result.model.is_moe else "-",
            p.dp, p.micro_batch_size,
            "y" if p.sequence_parallel else "-", recompute,
            _sharding(p), flags, round(e.iteration_time_s, 4),
            round(e.tokens_per_s), percent(e.mfu), round(e.peak_memory_gib, 1),
        ])  # fmt: skip
    title = "best plans (MFU: model FLOPs, Megatron-LM convention)"
    if not result.top:
        title = "closest plans (none fits)"
    print_table(f"{result.model.name} on {result.cluster.num_gpus} GPUs: {title}", columns, rows)


def limit_candidates(frame: pd.DataFrame, limit: int) -> pd.DataFrame:
    """The rows of `SearchResult.candidates` that candidates.csv keeps: every simulated plan,
    every rule-rejected representative, and the ``limit`` other candidates with the highest
    screened tokens/s (fitting ones first, those never screened last); ``limit`` 0 keeps
    every row. Row order is kept."""
    from planner.search import BOUND_REJECTION, MEMORY_REJECTION, TIME_LIMIT_REJECTION

    if limit <= 0:
        return frame
    simulated = frame["simulated_iteration_time_s"].notna()
    not_rules = ["", MEMORY_REJECTION, BOUND_REJECTION, TIME_LIMIT_REJECTION]
    by_rule = ~frame["rejected_by"].isin(not_rules)
    rest = frame[~simulated & ~by_rule]
    ranked = rest.assign(_over=rest["rejected_by"] != "").sort_values(
        ["_over", "tokens_per_s"], ascending=[True, False], kind="stable"
    )
    keep = frame.index[simulated | by_rule].union(ranked.index[:limit])
    return frame.loc[keep.sort_values()]


def write_search_outputs(
    result: SearchResult,
    profile_name: str,
    out: Path,
    text: str,
    candidates_limit: int = DEFAULT_CANDIDATES_LIMIT,
    *,
    options: ExecutionOptions,
) -> None:
    """plan.json, estimate.json, predicted.json, prediction.trace.json and plan.html (the
    prediction-only report) when a plan fits; candidates.csv (`limit_candidates`) and
    candidates.json always. The timeline is simulated with the ``options`` the search
    priced with (runtime and recipe settings)."""
    from costmodel.estimate import estimate_to_json, simulate_plan

    out.mkdir(parents=True, exist_ok=True)
    limit_candidates(result.candidates, candidates_limit).to_csv(
        out / "candidates.csv", index=False
    )
    listed = result.top or result.closest
    (out / "candidates.json").write_text(
        json.dumps({"plans": [plan_entry(r) for r in listed], "explanation": text}, indent=2) + "\n"
    )
    if result.best is None:
        return
    bundle = PlanBundle(
        model=result.model, cluster=result.cluster, job=result.job, plan=result.best.plan
    )
    (out / "plan.json").write_text(dumps(bundle) + "\n")
    (out / "estimate.json").write_text(
        json.dumps(estimate_to_json(result.best.estimate), indent=2) + "\n"
    )
    _, timeline = simulate_plan(
        bundle.model,
        bundle.cluster,
        bundle.job,
        bundle.plan,
        load_profile(profile_name),
        options=options,
    )
    if timeline is not None:
        trace = json.dumps(timeline.to_chrome_trace())
        (out / "prediction.trace.json").write_text(trace + "\n")
        (out / "predicted.json").write_text(dumps(timeline))
        page = render_report(
            bundle,
            estimate_to_json(result.best.estimate),
            timeline,
            candidates={"plans": [plan_entry(r) for r in listed], "explanation": text},
        )
        (out / "plan.html").write_text(page)


def _run_search(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    job = job_from_args(args)
    profile = load_profile(args.hardware)
    cluster = ClusterSpec(
        hardware=args.hardware, num_gpus=args.num_gpus, gpus_per_node=args.gpus_per_node
    )
    space = space_from_args(args)
    from planner.explain import explain
    from planner.search import search_plans

    options = options_from_args(args)
    bar = DeferredProgress()
    try:
        result = search_plans(
            model,
            cluster,
            job,
            profile,
            space=space,
            top_k=args.top,
            memory_headroom=args.memory_headroom,
            progress=bar,
            options=options,
            time_limit_s=args.time_limit,
        )
    finally:
        bar.close()
    text = explain(result)
    if args.out:
        write_search_outputs(
            result, args.hardware, Path(args.out), text, args.candidates_limit, options=options
        )
    if args.json:
        print_json({"runtime": args.runtime, **search_json(result)})
    else:
        _print_top(result, args.top)
        print(text)
        device_opts = device_options(options, profile)
        for line in memory_assumptions(job, device_opts, profile.device.name):
            print(line)
        print(f"runtime: {args.runtime}")
    return 0 if result.best is not None else 1


def sizing_row_json(row: SizingRow) -> dict[str, Any]:
    """One cluster size: GPUs, the best plan (knobs and metrics) or the reason there is none,
    days, GPU-hours, cost (null without a plan)."""
    return {
        "num_gpus": row.num_gpus,
        "plan": plan_entry(row.best) if row.best else None,
        "reason": row.reason,
        "tokens_per_s": row.tokens_per_s,
        "mfu": row.mfu,
        "days": row.days if row.best else None,
        "gpu_hours": row.gpu_hours if row.best else None,
        "cost_usd": row.cost_usd if row.best else None,
    }


def sizing_table_row(row: SizingRow) -> list[Any]:
    """GPUs, plan (or why none), tokens/s, MFU, days, GPU-hours, cost; "-" without a plan."""
    if row.best is None:
        return [row.num_gpus, f"none: {row.reason}", "-", "-", "-", "-", "-"]
    return [
        row.num_gpus,
        row.best.plan.label(),
        round(row.tokens_per_s),
        percent(row.mfu),
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
        "days": row.days if found else None,
        "gpu_hours": row.gpu_hours if found else None,
        "cost_usd": row.cost_usd if found else None,
        "reason": row.reason or "",
    }


def _run_sizing(args: argparse.Namespace) -> int:
    if args.num_gpus is not None:
        raise SpecError(
            f"--num-gpus ({args.num_gpus}) fixes the cluster while --tokens sizes it: give "
            f"--max-gpus {args.num_gpus} to bound the sizing, or drop --tokens to plan on "
            f"{args.num_gpus} GPUs"
        )
    if args.days is None and args.max_gpus is None and args.budget is None:
        raise SpecError("--tokens needs a goal: --days D, --max-gpus N, or --budget USD")
    model = model_from_args(args)
    base = job_from_args(args)
    job = TrainingJob(
        seq_length=base.seq_length,
        global_batch_size=base.global_batch_size,
        precision=base.precision,
        token_budget=int(args.tokens),
    )
    profile = load_profile(args.hardware)
    space = space_from_args(args)
    from planner.sizing import size_cluster

    bar = DeferredProgress()
    try:
        result = size_cluster(
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
    data = {
        "runtime": args.runtime,
        "goal": result.goal,
        "chosen": sizing_row_json(result.chosen) if result.chosen else None,
        "cheapest": sizing_row_json(result.cheapest) if result.cheapest else None,
        "rows": [sizing_row_json(r) for r in result.rows],
    }
    if result.time_limit_s is not None:
        data["time_limit"] = sizing_time_limit_json(result)
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

    from planner.sizing import scaling_plot

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
        bundle = PlanBundle(model=model, cluster=cluster, job=job, plan=result.chosen.best.plan)
        (out / "plan.json").write_text(dumps(bundle) + "\n")


SIZING_FLAGS = ("days", "max_gpus", "budget", "gpu_hour_usd")
"""The goal and price flags of the sizing form; they mean nothing without ``--tokens``."""


def refuse_sizing_flags_without_tokens(args: argparse.Namespace) -> None:
    """SpecError naming the sizing flags given without ``--tokens`` (a search on a fixed
    ``--num-gpus`` would otherwise ignore them)."""
    given = [
        f"--{name.replace('_', '-')} {getattr(args, name):g}"
        for name in SIZING_FLAGS
        if getattr(args, name) is not None
    ]
    if given:
        raise SpecError(
            f"{', '.join(given)} only apply to cluster sizing: add --tokens T (the token "
            "budget) and drop --num-gpus to size the cluster, or drop them to search plans on "
            "--num-gpus N"
        )


def run(args: argparse.Namespace) -> int:
    if args.candidates_limit < 0:
        raise SpecError(
            f"--candidates-limit must be >= 0, got {args.candidates_limit}; 0 writes every "
            "candidate to candidates.csv"
        )
    if args.tokens is not None:
        return _run_sizing(args)
    refuse_sizing_flags_without_tokens(args)
    if args.num_gpus is None:
        raise SpecError("give --num-gpus N, or --tokens T with --days, --max-gpus or --budget")
    return _run_search(args)
