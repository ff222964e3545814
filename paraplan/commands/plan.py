"""`paraplan plan`: search the parallel plans of a job on a cluster, or size the cluster.

Two forms:
- ``--num-gpus N``: the best plans on N GPUs (`planner.search.search_plans`), printed as a
  table with the explanation, or as JSON with ``--json``; ``--out DIR`` writes plan.json,
  candidates.csv, candidates.json, estimate.json, predicted.json, prediction.trace.json and
  plan.html.
- ``--tokens T`` with ``--days D``, ``--max-gpus N`` or ``--budget USD --gpu-hour-usd P``:
  cluster sizing (`planner.sizing.size_cluster`); ``--out DIR`` writes sizing.csv,
  sizing.json, scaling.png and plan.json of the chosen size.

This module defines and checks the flags and builds the problem of either form (the plan
knobs' flags and the search space they fix: `paraplan.knob_args`); the search's
JSON and files are `paraplan.commands.plan_results`, the sizing run with its table, JSON
and files `paraplan.commands.plan_sizing`.

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
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from costmodel.bf16_layer_rules import check_bf16_layers
from costmodel.execution_presets import device_options
from paraplan.accuracy import accuracy_json, accuracy_lines, published_accuracy
from paraplan.args import add_problem_args, cluster_from_args, job_from_args, model_from_args
from paraplan.assumptions import memory_assumptions
from paraplan.commands import COMMAND_HELP
from paraplan.commands.plan_results import (
    DEFAULT_CANDIDATES_LIMIT,
    search_json,
    write_search_outputs,
)
from paraplan.commands.plan_sizing import run_sizing
from paraplan.fix_flags import cli_fix
from paraplan.fp8_args import check_fp8_flags
from paraplan.knob_args import add_knob_args, space_from_args
from paraplan.lora_args import lora_line
from paraplan.nodes import partial_nodes_problem
from paraplan.output import DeferredProgress, print_json, print_table
from paraplan.packing_line import packing_json, packing_line
from paraplan.placement_line import check_segment, placement_json, placement_line
from paraplan.recipe_args import add_recipe_args, add_runtime_arg, options_from_args
from paraplan.time_args import refuse_scopes_the_model_lacks
from paraplan.time_assumptions import time_assumptions
from planner.defaults import DEFAULT_HEADROOM, DEFAULT_MAX_MICRO_BATCH_SIZE
from profiles import load_profile
from specs.errors import SpecError
from specs.formats import BF16_PEAK_DTYPES, percent
from specs.plan import ParallelPlan

if TYPE_CHECKING:
    from planner.search_result import SearchResult

NAME = "plan"
HELP = COMMAND_HELP[NAME]


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
    g.add_argument(
        "--json",
        action="store_true",
        help='print {"best", "top", "rejected", ..., "published_accuracy"} (errors of the '
        "published runs like this job, null for another runtime or a CPU), and on NVL72 "
        '"placement" (the best plan\'s NVLink domain)',
    )
    s = parser.add_argument_group("cluster sizing (instead of --num-gpus)")
    s.add_argument("--tokens", type=float, default=None, help="token budget of the training run")
    s.add_argument("--days", type=float, default=None, help="deadline in days")
    s.add_argument("--max-gpus", type=int, default=None, help="largest cluster allowed")
    s.add_argument("--budget", type=float, default=None, help="budget in USD")
    s.add_argument("--gpu-hour-usd", type=float, default=None, help="price of one GPU-hour")


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


def mfu_columns(dtype: str) -> list[str]:
    """The MFU columns of the plan table for a job whose GEMMs run in ``dtype``: ``MFU``
    over a bf16 (or fp16) peak; ``MFU (fp8 peak)`` and ``MFU (bf16 peak)`` for another
    dtype (`costmodel.estimate.mfu_over_peaks`)."""
    if dtype in BF16_PEAK_DTYPES:
        return ["MFU"]
    return [f"MFU ({dtype} peak)", "MFU (bf16 peak)"]


def optional_percent(fraction: float | None) -> str:
    """A fraction as a percentage, ``-`` for None."""
    return "-" if fraction is None else percent(fraction)


def _print_top(result: SearchResult, limit: int) -> None:
    shown = result.top[:limit] if result.top else result.closest[:limit]
    if not shown:
        return
    mfus = mfu_columns(shown[0].estimate.mfu_peak_dtype)  # one job: one GEMM dtype
    columns = ["#", "tp", "pp", "vpp", "split", "cp", "ep", "etp", "dp", "mbs", "sp",
               "recompute", "dp sharding", "overlap g/p/tp", "iter (s)", "tokens/s", *mfus,
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
            round(e.tokens_per_s), percent(e.mfu),
            *([] if len(mfus) == 1 else [optional_percent(e.mfu_bf16)]),
            round(e.peak_memory_gib, 1),
        ])  # fmt: skip
    title = "best plans (MFU: model FLOPs, Megatron-LM convention)"
    if not result.top:
        title = "closest plans (none fits)"
    print_table(f"{result.model.name} on {result.cluster.num_gpus} GPUs: {title}", columns, rows)


def _run_search(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    job = job_from_args(args)
    profile = load_profile(args.hardware)
    check_fp8_flags(args, job, profile)
    refuse_scopes_the_model_lacks(model, options_from_args(args))
    check_bf16_layers(model, job, options_from_args(args))
    cluster = cluster_from_args(args)
    check_segment(cluster, profile)
    per_node = args.gpus_per_node or profile.topology.gpus_per_node
    partial = partial_nodes_problem(args.num_gpus, per_node)
    if partial is not None:  # priced as asked; `export --to megatron` will refuse it
        refusal = "`paraplan export --to megatron` refuses such a plan"
        sys.stderr.write(f"paraplan plan: note: {partial} ({refusal})\n")
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
    # the rule examples and fit suggestions the explanation quotes are in this command's flags
    examples = {rule: cli_fix(message) for rule, message in result.rule_examples.items()}
    result = dataclasses.replace(result, rule_examples=examples)
    text = explain(result, phrase=cli_fix)
    if args.out:
        write_search_outputs(
            result, args.hardware, Path(args.out), text, args.candidates_limit, options=options
        )
    device_opts = device_options(options, profile)
    accuracy = published_accuracy(model, job, device_opts, profile)
    if args.json:
        placed = {} if result.best is None else placement_json(cluster, profile, result.best.plan)
        print_json(
            {"runtime": args.runtime, **search_json(result)}
            | {"published_accuracy": accuracy_json(accuracy)}
            | packing_json(job)
            | placed
        )
    else:
        _print_top(result, args.top)
        job_line = lora_line(job)
        placed = None if result.best is None else placement_line(cluster, profile, result.best.plan)
        for line in (job_line, packing_line(job), placed):
            if line is not None:
                print(line)
        print(text)
        for line in memory_assumptions(job, device_opts, profile.device.name):
            print(line)
        for line in time_assumptions(model, job, device_opts, profile):
            print(line)
        for line in accuracy_lines(accuracy):
            print(line)
        print(f"runtime: {args.runtime}")
    return 0 if result.best is not None else 1


def _run_sizing(args: argparse.Namespace) -> int:
    """Check the sizing flags, build the problem with the token budget in the job, and size
    the cluster (`paraplan.commands.plan_sizing.run_sizing`)."""
    if args.num_gpus is not None:
        raise SpecError(
            f"--num-gpus ({args.num_gpus}) fixes the cluster while --tokens sizes it: give "
            f"--max-gpus {args.num_gpus} to bound the sizing, or drop --tokens to plan on "
            f"{args.num_gpus} GPUs"
        )
    if args.nvlink_segment_nodes is not None:
        raise SpecError(
            f"--nvlink-segment-nodes ({args.nvlink_segment_nodes}) fixes the segment of one "
            "node count while --tokens tries several, each under Megatron-Bridge's launcher "
            "rule: drop --nvlink-segment-nodes, or drop --tokens and plan on --num-gpus N"
        )
    if args.days is None and args.max_gpus is None and args.budget is None:
        raise SpecError("--tokens needs a goal: --days D, --max-gpus N, or --budget USD")
    model = model_from_args(args)
    base = job_from_args(args)
    job = dataclasses.replace(base, token_budget=int(args.tokens))
    profile = load_profile(args.hardware)
    check_fp8_flags(args, job, profile)
    refuse_scopes_the_model_lacks(model, options_from_args(args))
    check_bf16_layers(model, job, options_from_args(args))
    space = space_from_args(args)
    return run_sizing(args, model=model, job=job, profile=profile, space=space)


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
