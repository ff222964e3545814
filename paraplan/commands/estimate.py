"""`paraplan estimate`: predict one plan's iteration time, throughput, MFU and memory.

The cost model (pandas, networkx) is imported once the plan has passed its rules, so that
``--help``, bad input and an invalid plan answer without loading it.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from costmodel.execution import device_options
from costmodel.memory import FrameworkAllowance
from paraplan.args import (
    add_plan_args,
    add_problem_args,
    add_recipe_args,
    add_runtime_arg,
    cluster_from_args,
    job_from_args,
    model_from_args,
    options_from_args,
    plan_from_args,
)
from paraplan.commands import COMMAND_HELP
from paraplan.output import print_json, print_table
from profiles.store import load_profile
from specs.errors import SpecError
from specs.formats import percent, shown_seconds
from specs.rules import check_plan

if TYPE_CHECKING:
    from costmodel.estimate import Estimate
    from costmodel.execution import ExecutionOptions
    from specs.job import TrainingJob

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
        "flops_per_iteration, peak_memory_gib, fits, memory, breakdown",
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
    violations = check_plan(model, cluster, job, plan)
    if violations:
        print(f"invalid plan ({plan.label()}) for {model.name} on {cluster.num_gpus} GPUs:")
        for v in violations:
            print(f"  [{v.rule}] {v.message}")
        return 1
    profile = load_profile(cluster.hardware)
    options = device_options(options_from_args(args), profile)
    if args.attention is not None:
        options = dataclasses.replace(options, attention=args.attention)
    from costmodel.estimate import estimate_plan, estimate_to_json

    est = estimate_plan(model, cluster, job, plan, profile, options=options)
    if args.json:
        print_json(estimate_to_json(est))
        return 0
    title = (
        f"{model.name} on {cluster.num_gpus} x {profile.name}: {plan.label()} "
        f"(runtime {options.runtime})"
    )
    _print_summary(title, est)
    for line in memory_assumptions(job, options, profile.device.name):
        print(line)
    return 0


def memory_assumptions(job: TrainingJob, options: ExecutionOptions, device: str) -> list[str]:
    """Lines naming the launch settings the megatron runtime's memory assumes and the flag
    that changes each (`add_recipe_args`), Megatron-core's defaults unless a flag is given;
    ``options`` resolved for the ``device`` (`costmodel.execution.device_options`). Empty
    for other runtimes."""
    if options.runtime != "megatron":
        return []
    lines = ["memory assumes (Megatron-core's defaults where no flag is given):"]
    if options.main_grad_bytes == 4:
        lines.append("  fp32 main gradients; add --grad-reduce-in-bf16 for bf16 ones")
    else:
        lines.append(f"  {options.main_grad_bytes}-byte main gradients (--grad-reduce-in-bf16)")
    if job.precision == "fp8":
        if options.fp8_param:
            lines.append(f"  FP8 parameters, {options.fp8_recipe} scaling (--fp8-param-gather)")
        else:
            lines.append(
                f"  bf16 weights plus Transformer Engine's FP8 copies ({options.fp8_recipe} "
                "scaling); add --fp8-param-gather for FP8 parameters as Megatron-Bridge's "
                "FP8 recipes, --fp8-recipe to change the scaling"
            )
        if options.fp8_recipe != "mxfp8":
            lines.append(fp8_layout_line(options, device))
    lines.append(cross_entropy_line(options))
    lines.append(allocator_line(options))
    return lines


def fp8_layout_line(options: ExecutionOptions, device: str) -> str:
    """Whether per-tensor FP8 weights keep a transposed copy on ``device``
    (`ExecutionOptions.fp8_tn_gemm_only`, decided by the device)."""
    if options.fp8_tn_gemm_only is False:
        return f"  no FP8 weight transposes: the {device} runs FP8 GEMMs in any layout"
    return f"  FP8 weights with their transposes: the {device}'s FP8 GEMMs take only TN"


def cross_entropy_line(options: ExecutionOptions) -> str:
    """What the loss keeps of the logits (`ExecutionOptions.cross_entropy_fusion`)."""
    fusion = options.cross_entropy_fusion
    if fusion == "te":
        return (
            "  Transformer Engine's fused cross entropy, no fp32 logits copy "
            "(--cross-entropy-fusion-impl te)"
        )
    flag = "" if fusion == "unfused" else f" ({fusion} fused cross entropy)"
    return (
        f"  an fp32 copy of the logits per in-flight microbatch{flag}; add "
        "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te for Transformer Engine's "
        "fused loss (Megatron-Bridge's recipes)"
    )


def allocator_line(options: ExecutionOptions) -> str:
    """The caching allocator's fragmentation share (`costmodel.memory.FrameworkAllowance`)
    and the flag that halves it."""
    allowance = FrameworkAllowance()
    share = options.allocator_fragmentation
    if share is None:
        share = allowance.fragmentation(options.expandable_segments)
    if options.expandable_segments:
        return (
            f"  expandable allocator segments: {percent(share)} of activation and buffer "
            "bytes for fragmentation (--expandable-segments)"
        )
    return (
        f"  {percent(share)} of activation and buffer bytes for allocator fragmentation; add "
        f"--expandable-segments for {percent(allowance.fragmentation(True))}"
    )


def _print_summary(title: str, est: Estimate) -> None:
    from costmodel.estimate import MEMORY_PARTS, stage_memory_parts_gib

    # The plan line is printed whole (a table title would wrap it at the table's width).
    print(title)
    print_table(
        "",
        ("quantity", "value"),
        [
            ("iteration time (s)", est.iteration_time_s),
            ("tokens/s (whole job)", est.tokens_per_s),
            ("model TFLOP/s per GPU", est.model_tflops_per_gpu),
            ("MFU (model FLOPs, no recompute)", percent(est.mfu)),
            ("HFU (with recompute)", percent(est.hfu)),
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
