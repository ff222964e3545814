"""`paraplan estimate`: predict one plan's iteration time, throughput, MFU and memory.

The cost model (pandas, networkx) is imported once the plan has passed its rules, so that
``--help``, bad input and an invalid plan answer without loading it.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from costmodel.bf16_layer_rules import bf16_layer_violations, check_bf16_layers
from costmodel.execution_presets import device_options
from costmodel.optimizer_offload import offload_violations
from paraplan.accuracy import accuracy_json, accuracy_lines, published_accuracy
from paraplan.args import add_problem_args, cluster_from_args, job_from_args, model_from_args
from paraplan.assumptions import memory_assumptions
from paraplan.commands import COMMAND_HELP
from paraplan.fix_flags import cli_fix
from paraplan.fp8_args import check_fp8_flags, delayed_scaling_violations, fp8_param_violations
from paraplan.lora_args import lora_line
from paraplan.optimizer_args import precision_aware_violations
from paraplan.output import print_json, print_table, print_verdict
from paraplan.packing_line import packing_json, packing_line
from paraplan.placement_line import check_segment, placement_json, placement_line
from paraplan.plan_args import add_plan_args, plan_from_args
from paraplan.recipe_args import add_recipe_args, add_runtime_arg, options_from_args
from paraplan.time_args import a2a_overlap_violations, cuda_graph_violations
from paraplan.time_assumptions import time_assumptions
from profiles.store import load_profile
from specs.errors import SpecError
from specs.formats import gib, mfu_text, percent, shown_seconds
from specs.rules import check_plan

if TYPE_CHECKING:
    from costmodel.estimate import Estimate
    from specs.cluster import ClusterSpec
    from specs.job import TrainingJob
    from specs.model import ModelSpec
    from specs.plan import ParallelPlan

NAME = "estimate"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_args(parser)
    add_plan_args(parser)
    add_runtime_arg(parser, "megatron")
    add_recipe_args(parser)
    parser.add_argument(
        "--attention",
        choices=("flash", "materialized"),
        default=None,
        help="attention kernel of the megatron runtime: fused flash attention (the default, "
        "Transformer Engine) or materialized softmax (unfused)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print iteration_time_s, tokens_per_s, model_tflops_per_gpu, mfu, hfu, "
        "flops_per_iteration, peak_memory_gib, fits, memory, breakdown, published_accuracy "
        "(errors of the published runs like this one, null for another runtime or a CPU), "
        "placement (the NVLink domain on NVL72); "
        'for a plan that breaks a rule, check\'s {"valid", "plan", "violations"}',
    )


def run(args: argparse.Namespace) -> int:
    if args.attention is not None and args.runtime != "megatron":
        raise SpecError(
            f"--attention {args.attention} chooses the attention kernel of the megatron "
            f"runtime; the {args.runtime} runtime prices its own executor's attention: drop "
            "--attention, or give --runtime megatron"
        )
    model = model_from_args(args)
    cluster = cluster_from_args(args)
    job = job_from_args(args)
    plan = plan_from_args(args)
    profile = load_profile(cluster.hardware)
    check_segment(cluster, profile)
    check_fp8_flags(args, job, profile)
    violations = check_plan(model, cluster, job, plan)
    options = options_from_args(args)
    violations += a2a_overlap_violations(plan, options)
    # offload needs the precision-aware optimizer: one violation where both need dist-opt
    aware = precision_aware_violations(plan, options)
    violations += aware or offload_violations(plan, options.optimizer_cpu_offload_fraction)
    violations += fp8_param_violations(job, plan, options)
    violations += delayed_scaling_violations(model, job, plan, options)
    check_bf16_layers(model, job, options)
    violations += bf16_layer_violations(model, job, plan, options)
    violations += cuda_graph_violations(model, plan, options)
    if violations:
        where = f"{model.name} on {cluster.num_gpus} GPUs"
        print_verdict(plan.label(), where, violations, as_json=args.json)
        return 1
    options = device_options(options, profile)
    if args.attention is not None:
        options = dataclasses.replace(options, attention=args.attention)
    from costmodel.estimate import estimate_plan, estimate_to_json

    est = estimate_plan(model, cluster, job, plan, profile, options=options)
    accuracy = published_accuracy(model, job, options, profile)
    if args.json:
        print_json(
            estimate_to_json(est)
            | {"published_accuracy": accuracy_json(accuracy)}
            | packing_json(job)
            | placement_json(cluster, profile, plan)
        )
        return 0
    title = (
        f"{model.name} on {cluster.num_gpus} x {profile.name}: {plan.label()} "
        f"(runtime {options.runtime})"
    )
    _print_summary(title, est, lora_line(job))
    if not est.fits:
        for line in _over_memory_lines(model, cluster, job, plan, est):
            print(line)
    for line in (packing_line(job), placement_line(cluster, profile, plan)):
        if line is not None:
            print(line)
    for line in memory_assumptions(job, options, profile.device.name):
        print(line)
    for line in time_assumptions(model, job, options, profile, plan):
        print(line)
    for line in accuracy_lines(accuracy):
        print(line)
    return 0


def _over_memory_lines(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan, est: Estimate
) -> list[str]:
    """How far a plan that does not fit is over the device's memory, and the changes of
    `planner.explain_fit.fit_suggestions` with their peak memory, those that fit first, each
    change in the command line's flags (`paraplan.fix_flags.cli_fix`)."""
    from planner.explain_fit import fit_suggestion_lines

    limit = est.device_memory_bytes
    stage = max(est.memory, key=lambda s: s.total_bytes).pp_rank
    return [
        f"does not fit: peak {gib(est.peak_memory_bytes)} on pipeline stage {stage}, "
        f"{gib(est.peak_memory_bytes - limit)} over the {gib(limit)} of device memory; "
        "changes and their peak memory:",
        *fit_suggestion_lines(model, cluster, job, plan, limit, phrase=cli_fix),
        f"  (`paraplan plan` searches every plan on {cluster.num_gpus} GPUs and names the closest "
        "when none fits)",
    ]


def _print_summary(title: str, est: Estimate, job_line: str | None = None) -> None:
    from costmodel.estimate import MEMORY_PARTS, stage_memory_parts_gib

    # The plan line is printed whole (a table title would wrap it at the table's width).
    print(title)
    if job_line is not None:
        print(job_line)
    print_table(
        "",
        ("quantity", "value"),
        [
            ("iteration time (s)", est.iteration_time_s),
            ("tokens/s (whole job)", est.tokens_per_s),
            ("model TFLOP/s per GPU", est.model_tflops_per_gpu),
            (
                "MFU (model FLOPs, no recompute)",
                mfu_text(est.mfu, est.mfu_peak_dtype, est.mfu_bf16),
            ),
            ("HFU (with recompute)", mfu_text(est.hfu, est.mfu_peak_dtype, None)),
            ("model FLOPs per iteration", est.flops_per_iteration),
            ("peak memory (GiB)", est.peak_memory_gib),
            ("fits in device memory", "yes" if est.fits else "NO"),
        ],
    )
    total = est.iteration_time_s
    print_table(
        f"where the time goes (critical stage {est.critical_stage})",
        ("phase", "seconds", "share"),
        [
            (phase, shown_seconds(s, total), percent(shown_seconds(s, total) / total))
            for phase, s in est.breakdown.as_dict().items()
        ],
    )
    shown = [p for p in MEMORY_PARTS if any(getattr(s, f"{p}_bytes") for s in est.memory)]
    rows = []
    for stage in est.memory:
        parts = stage_memory_parts_gib(stage)
        rows.append((stage.pp_rank, stage.total_bytes / 2**30, *(parts[p] for p in shown)))
    print_table("memory per rank (GiB) by pipeline stage", ("stage", "total", *shown), rows)
    print_table(
        "time per pipeline stage (one microbatch; seconds)",
        ("stage", "layers", "forward", "backward", "pipeline end", "grads done"),
        [
            (t.pp_rank, t.num_layers, t.forward_s, t.backward_s, t.pipeline_end_s, t.grads_done_s)
            for t in est.stage_times
        ],
    )
