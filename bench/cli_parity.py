"""The `paraplan estimate` command line of each published row, and whether it prices the
row's memory and iteration time as `bench/validate_published.py` does.

For every trusted row the bench prices (`published_rows.case_for_row`), `cli_argv` writes
the command a user would type: the row's `ModelSpec` as a JSON file (``--model PATH``), its
cluster, job and plan flags, and the recipe flags of `paraplan.recipe_args.add_recipe_args`
(memory settings, and the time-only ones of `paraplan.time_args`). Parsed back by
`paraplan.args`, `paraplan.plan_args` and `paraplan.recipe_args`, that line must give the
row's own `ParallelPlan` and `ExecutionOptions`;
`row_parity` names each field it cannot express, as memory (`MEMORY_OPTION_FIELDS` and the
plan) or time only. Where it expresses every memory field, the CLI's memory per pipeline
stage, run through `paraplan.cli.main`, must equal the bench's
(`row_pricing.evaluate_row`); where it expresses every field, its iteration time too
(`TIME_TOLERANCE`).

Usage: ``python bench/cli_parity.py [--rows TEXT,...] [--json]``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from published_csv import default_csv, read_rows, select_rows
from published_rows import NotExpressible, RowCase
from row_figures import case_estimate
from row_pricing import TRUSTED, evaluate_row

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from paraplan.cli import build_parser, main
from paraplan.plan_args import plan_from_args
from paraplan.recipe_args import options_from_args
from planner.export_options import (
    cross_entropy_arguments,
    cuda_graph_arguments,
    fp8_arguments,
    gradient_arguments,
    optimizer_offload_arguments,
    optimizer_precision_arguments,
)
from profiles.store import load_profile
from specs.errors import SpecError
from specs.plan import ParallelPlan
from specs.serde import dumps

MEMORY_OPTION_FIELDS = (
    "attention",
    "hidden_dropout",
    "main_grad_bytes",
    "deallocate_pipeline_outputs",
    "ddp_gradient_copy",
    "cross_entropy_fusion",
    "expandable_segments",
    "fp8_recipe",
    "fp8_param",
    "fp8_attention",
    "fp8_tn_gemm_only",
    "allocator_fragmentation",
    "step_gradient_copy",
    "precision_aware_optimizer",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "main_params_dtype",
    "stale_main_grad",
)
"""The `ExecutionOptions` fields the megatron runtime's memory reads
(`costmodel.runtimes.megatron.runtime.MegatronRuntime.memory`); the others move time only."""

TOLERANCE_GIB = 0.1
"""Largest per-stage difference, GiB, counted as equal."""

TIME_TOLERANCE = 1e-6
"""Largest relative difference of the iteration times counted as equal: the CLI and the
bench run the same `estimate_plan` on the same inputs, so only a different input moves it;
the margin covers nothing but float formatting."""


def plan_flags(plan: ParallelPlan) -> list[str]:
    """The plan flags of `paraplan.plan_args.add_plan_args` that state ``plan``."""
    flags = ["--tp", str(plan.tp), "--pp", str(plan.pp), "--vpp", str(plan.vpp)]
    flags += ["--cp", str(plan.cp), "--ep", str(plan.ep), "--mbs", str(plan.micro_batch_size)]
    flags += ["--recompute", plan.recompute]
    valued = {
        "--etp": plan.etp,
        "--recompute-num-layers": plan.recompute_num_layers,
        "--bucket-size": plan.ddp_bucket_size,
        "--decoder-first-pipeline-num-layers": plan.decoder_first_pipeline_num_layers,
        "--decoder-last-pipeline-num-layers": plan.decoder_last_pipeline_num_layers,
        "--pipeline-model-parallel-layout": plan.pipeline_model_parallel_layout,
    }
    flags += [item for flag, v in valued.items() if v is not None for item in (flag, str(v))]
    if plan.recompute_modules is not None:
        flags += ["--recompute-modules", ",".join(plan.recompute_modules) or "none"]
    if plan.cpu_offloading_num_layers:
        flags += ["--cpu-offloading-num-layers", str(plan.cpu_offloading_num_layers)]
    if plan.offload_modules:
        flags += ["--offload-modules", ",".join(plan.offload_modules)]
    if plan.use_megatron_fsdp:
        flags += ["--data-parallel-sharding-strategy", plan.data_parallel_sharding_strategy]
    switches = {
        "--sp": plan.sequence_parallel,
        "--dist-opt": plan.distributed_optimizer,
        "--use-megatron-fsdp": plan.use_megatron_fsdp,
        "--overlap-grad-reduce": plan.overlap_grad_reduce,
        "--overlap-param-gather": plan.overlap_param_gather,
        "--tp-comm-overlap": plan.tp_comm_overlap,
        "--account-for-embedding-in-pipeline-split": plan.account_for_embedding_in_pipeline_split,
        "--account-for-loss-in-pipeline-split": plan.account_for_loss_in_pipeline_split,
    }
    return flags + [flag for flag, on in switches.items() if on]


def recipe_flags(options: ExecutionOptions, precision: str) -> list[str]:
    """The flags of `paraplan.recipe_args.add_recipe_args` (and ``--attention``) that state the
    fields of ``options`` in a ``precision`` run: the memory-relevant ones and the
    time-only ones of `paraplan.time_args` (`time_recipe_flags`). Where the command line
    takes Megatron-LM's spelling, the flags are the export's (`planner.export_options`),
    so both name them in one place."""
    flags = [] if options.attention == "flash" else ["--attention", options.attention]
    flags += fp8_arguments(options) if precision == "fp8" else []
    flags += ["--fp8-attention"] if options.fp8_attention else []
    flags += gradient_arguments(options) + cross_entropy_arguments(options)
    flags += ["--expandable-segments"] if options.expandable_segments else []
    return (
        flags
        + optimizer_precision_arguments(options)
        + optimizer_offload_arguments(options)
        + time_recipe_flags(options)
    )


def time_recipe_flags(options: ExecutionOptions) -> list[str]:
    """The flags of `paraplan.time_args` that state the time-only fields of ``options``
    where they differ from Megatron-core's defaults."""
    flags = []
    if options.moe_dispatcher != DEFAULT_OPTIONS.moe_dispatcher:
        flags += ["--moe-token-dispatcher-type", options.moe_dispatcher]
    flags += ["--overlap-moe-expert-parallel-comm"] if options.moe_a2a_overlap else []
    flags += cuda_graph_arguments(options.cuda_graph_scopes)
    flags += [] if options.rope_fusion else ["--no-rope-fusion"]
    flags += ["--cutedsl-fused-grouped-mlp"] if options.moe_fused_grouped_mlp else []
    flags += ["--cudnn-norm"] if options.cudnn_norm else []
    if options.flash_attention_version != DEFAULT_OPTIONS.flash_attention_version:
        flags += ["--flash-attention-version", str(options.flash_attention_version)]
    if options.tp_overlap_rs_method != DEFAULT_OPTIONS.tp_overlap_rs_method:
        flags += ["--tp-comm-overlap-rs-method", options.tp_overlap_rs_method]
    if not options.tp_overlap_bulk_sm_margin:
        flags += ["--no-tp-comm-overlap-bulk-sm-margin"]
    if not options.tp_overlap_pipeline_sm_margin:
        flags += ["--no-tp-comm-overlap-pipeline-sm-margin"]
    return flags


def cli_argv(case: RowCase, model_path: Path) -> list[str]:
    """``paraplan estimate`` arguments of the row's ``case``, its model read from
    ``model_path`` (a ModelSpec JSON)."""
    cluster, job = case.cluster, case.job
    argv = ["--model", str(model_path), "--hardware", cluster.hardware]
    argv += ["--num-gpus", str(cluster.num_gpus)]
    if cluster.gpus_per_node is not None:
        argv += ["--gpus-per-node", str(cluster.gpus_per_node)]
    argv += ["--seq-len", str(job.seq_length), "--global-batch", str(job.global_batch_size)]
    argv += ["--precision", job.precision]
    if job.optimizer != "adam":
        argv += ["--optimizer", job.optimizer]
    if job.lora is not None:
        argv += ["--lora-rank", str(job.lora.rank), "--lora-alpha", str(job.lora.alpha)]
        argv += ["--lora-targets", ",".join(job.lora.targets)]
    return argv + plan_flags(case.plan) + recipe_flags(case.options, job.precision)


def unexpressed(case: RowCase, argv: list[str]) -> tuple[list[str], list[str]]:
    """(memory, time-only) fields of the row's plan and options that ``argv`` parses to
    another value: ``plan.<field>`` and ``options.<field>``."""
    args = build_parser(("estimate",)).parse_args(["estimate", *argv])
    profile = load_profile(case.profile)
    plan = plan_from_args(args)
    options = device_options(options_from_args(args), profile)
    if args.attention is not None:
        options = dataclasses.replace(options, attention=args.attention)
    row = device_options(case.options, profile)
    memory = [
        f"plan.{f.name}"
        for f in dataclasses.fields(plan)
        if getattr(plan, f.name) != getattr(case.plan, f.name)
    ]
    time_only = []
    for f in dataclasses.fields(row):
        if getattr(options, f.name) != getattr(row, f.name):
            (memory if f.name in MEMORY_OPTION_FIELDS else time_only).append(f"options.{f.name}")
    return memory, time_only


def cli_estimate(argv: list[str]) -> dict[str, Any]:
    """The JSON of ``paraplan estimate ARGV --json``, as the command line prints it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["estimate", *argv, "--json"])
    if code != 0:
        raise SpecError(f"paraplan estimate exited {code}")
    return json.loads(out.getvalue())


def row_parity(raw: dict[str, str], folder: Path) -> dict[str, Any]:
    """The row's command line, what it cannot express, and (where it expresses every
    memory field) the CLI's and the bench's peak memory and largest per-stage difference;
    where it expresses every field, also both iteration times and their relative
    difference."""
    outcome, case = evaluate_row(raw)
    model_path = folder / f"row-{raw['row_id']}.json"
    model_path.write_text(dumps(case.model))
    argv = cli_argv(case, model_path)
    memory, time_only = unexpressed(case, argv)
    result: dict[str, Any] = {
        "row_id": raw["row_id"],
        "command": "paraplan estimate " + shlex.join(argv),
        "unexpressed_memory": memory,
        "unexpressed_time": time_only,
        "bench_peak_gib": outcome.peak_memory_gib,
    }
    if memory:
        return result
    bench = case_estimate(case)
    want = [s.total_bytes / 2**30 for s in bench.memory]
    cli = cli_estimate(argv)
    got = [s["total_gib"] for s in cli["memory"]]
    gap = max(abs(g - w) for g, w in zip(got, want, strict=True))
    result |= {"cli_peak_gib": max(got), "max_stage_gap_gib": gap}
    if time_only:
        return result
    cli_s, bench_s = cli["iteration_time_s"], bench.iteration_time_s
    return result | {
        "cli_iteration_time_s": cli_s,
        "bench_iteration_time_s": bench_s,
        "time_relative_gap": abs(cli_s - bench_s) / bench_s,
    }


def parity(rows: list[dict[str, str]]) -> dict[str, Any]:
    """`row_parity` of every trusted row the bench prices, with counts: ``expressed``
    (every memory field stated), ``equal`` (of those, every stage within `TOLERANCE_GIB`)
    and the unexpressed memory fields with their row counts."""
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for raw in rows:
            if raw.get("trust") not in TRUSTED:
                continue
            try:
                results.append(row_parity(raw, Path(folder)))
            except (NotExpressible, SpecError):
                continue
    expressed = [r for r in results if not r["unexpressed_memory"]]
    timed = [r for r in results if "time_relative_gap" in r]
    return {
        "rows": len(results),
        "expressed": len(expressed),
        "equal": sum(r["max_stage_gap_gib"] <= TOLERANCE_GIB for r in expressed),
        "time_expressed": len(timed),
        "time_equal": sum(r["time_relative_gap"] <= TIME_TOLERANCE for r in timed),
        "unexpressed_memory_fields": field_counts(results, "unexpressed_memory"),
        "unexpressed_time_fields": field_counts(results, "unexpressed_time"),
        "by_row": results,
    }


def field_counts(results: list[dict[str, Any]], key: str) -> dict[str, int]:
    """Rows per field name of the ``key`` lists of ``results``, most rows first."""
    counts: dict[str, int] = {}
    for r in results:
        for name in r[key]:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def main_cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="", help="as bench/validate_published.py --rows")
    parser.add_argument("--json", action="store_true", help="print every row as JSON")
    args = parser.parse_args(argv)
    csv_path = default_csv()
    if csv_path is None:
        print("published-runs CSV not found", file=sys.stderr)
        return 2
    result = parity(select_rows(read_rows(csv_path), args.rows))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{result['rows']} rows priced; the CLI states every memory setting of "
        f"{result['expressed']}, and prices {result['equal']} of them as the bench "
        f"(every stage within {TOLERANCE_GIB} GiB)"
    )
    for name, count in result["unexpressed_memory_fields"].items():
        print(f"  not expressed: {name} ({count} rows)")
    for r in result["by_row"]:
        if not r["unexpressed_memory"] and r["max_stage_gap_gib"] > TOLERANCE_GIB:
            print(f"  row {r['row_id']} differs by {r['max_stage_gap_gib']:.2f} GiB")
    print(
        f"the CLI states every setting, time too, of {result['time_expressed']} rows, and "
        f"prices the iteration time of {result['time_equal']} of them as the bench "
        f"(relative difference within {TIME_TOLERANCE:g})"
    )
    for name, count in result["unexpressed_time_fields"].items():
        print(f"  not expressed (time only): {name} ({count} rows)")
    for r in result["by_row"]:
        if r.get("time_relative_gap", 0.0) > TIME_TOLERANCE:
            print(
                f"  row {r['row_id']}: CLI {r['cli_iteration_time_s']:.6g} s, bench "
                f"{r['bench_iteration_time_s']:.6g} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main_cli())
