"""`paraplan execute PLAN.json`: train with the plan on torch.distributed and measure it.

Besides what the executor writes (``plan.json``, ``metrics.json``, ``measured.json``,
``traces/``), the run folder gets the cost model's view of the same plan on the hardware
profile (``--hardware``, default the plan's ``cluster.hardware``): ``estimate.json`` and
``predicted.json``, so `paraplan report RUN` can compare them, and the search's
``candidates.json`` when the plan came from `paraplan plan --out DIR`. Without a usable profile
they are skipped with a note, and MFU stays null unless ``--peak-tflops`` is given.

Checkpoints: ``--save DIR`` writes ``DIR/step_<n>`` after the last step and, with
``--save-interval N``, every N steps, each atomically; ``--keep K`` keeps the newest K.
``--resume DIR`` continues from the newest complete one and says which step.

Exit codes: 0 the run finished; 1 the plan breaks a rule (the violations are printed, no
process starts) or a rank failed: the first line names the rank and the cause, the other
ranks' errors follow as context, the tracebacks are in ``RUN/failure.log`` (printed with
``--verbose``), and ``RUN/metrics.json`` holds the steps that ran with ``status`` ``failed``;
2 bad input (a missing or malformed plan or data file, an unwritable ``--out`` or
``--save``, too little disk for a checkpoint, a world this machine cannot host, a plan
priced with FP8 attention, which the executor does not run), raised as `SpecError` before
any process starts; 130 (SIGINT, Ctrl-C) or 143 (SIGTERM) when the run was interrupted:
every rank is stopped, ``RUN/metrics.json`` holds the steps that ran, and stderr names the
checkpoint to resume from.

The executor (torch) and the cost model are imported once the plan has passed its rules:
``--help`` and an invalid plan answer without loading them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from costmodel.bf16_layer_rules import BF16_LAYERS_FIELD_RULE
from costmodel.execution import ExecutionOptions
from costmodel.execution_record import options_from_record
from costmodel.fp8_attention import FP8_ATTENTION_KERNEL_RULE
from costmodel.iteration_flops import model_flops_per_iteration
from launch.failures import OOM_ERROR_TYPES, LaunchError, LaunchInterrupted
from paraplan.commands import COMMAND_HELP
from paraplan.fix_flags import cli_fix
from paraplan.output import DeferredProgress
from paraplan.recipe_args import add_runtime_arg, options_from_args
from profiles.lookup import peak_flops
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs import serde
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.finetune import executor_lora_refusal
from specs.formats import percent
from specs.rules import check_plan

if TYPE_CHECKING:
    from executor.run import RunConfig
    from executor.run_folder import RunSummary

NAME = "execute"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", metavar="PLAN.json", help="plan bundle (model, cluster, job, plan)")
    parser.add_argument("--steps", type=int, default=10, help="measured steps (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured steps first (default 2)")
    parser.add_argument("--out", default="run", metavar="RUN", help="run folder (default ./run)")
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="a text file (bytes are tokens) or a Megatron dataset prefix (PATH.bin/.idx); "
        "default: a synthetic stream the model can learn",
    )
    parser.add_argument("--seed", type=int, default=0, help="weights and synthetic data seed")
    parser.add_argument(
        "--host-probe",
        action="store_true",
        help="time a fixed piece of host work after each unprofiled step (metrics.json "
        "host_probe_s): how fast a shared host ran during the run",
    )
    parser.add_argument(
        "--save", metavar="DIR", help="checkpoint folder: a checkpoint after the last step"
    )
    parser.add_argument(
        "--save-interval",
        type=int,
        metavar="N",
        help="also checkpoint every N steps (warmup included), atomically",
    )
    parser.add_argument(
        "--keep", type=int, metavar="K", help="keep only the newest K checkpoints (default all)"
    )
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="continue from the newest complete checkpoint of --save DIR (or that checkpoint)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print every rank's traceback when a rank fails (always in RUN/failure.log)",
    )
    parser.add_argument(
        "--hardware",
        metavar="H",
        help="hardware profile (stored name or JSON path) for predicted.json, estimate.json "
        "and the MFU peak; default: the plan's cluster.hardware when it is a profile",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        metavar="X",
        help="peak TFLOP/s of one rank's device for MFU (default: the hardware profile's "
        "at the job's precision; MFU is null when neither exists)",
    )
    add_runtime_arg(parser, "torch")


def run(args: argparse.Namespace) -> int:
    """`paraplan execute`: refuse a plan the executor cannot run as priced
    (`refuse_unrunnable`) or one that breaks a rule, then train it (`launch_run`); the exit
    codes of the module docstring."""
    bundle = serde.load(PlanBundle, args.plan)
    refuse_unrunnable(bundle, args.plan)
    violations = check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan)
    if violations:
        print(f"invalid plan ({bundle.plan.label()}); nothing was started:")
        for v in violations:
            print(f"  [{v.rule}] {cli_fix(v.message)}")
        return 1
    notes: list[str] = []  # printed after the run's outcome, so an error leads stderr
    profile = _profile(args.hardware, bundle, notes)
    from executor.run import RunConfig
    from profiles.host_probe import host_probe

    config = RunConfig(
        bundle=bundle,
        out_dir=args.out,
        steps=args.steps,
        warmup=args.warmup,
        data=args.data,
        seed=args.seed,
        save_dir=args.save,
        save_interval=args.save_interval,
        keep=args.keep,
        resume_dir=args.resume,
        host_probe=host_probe if args.host_probe else None,
        peak_flops_per_rank=_peak_flops(bundle, profile, args.peak_tflops, notes),
        model_flops_per_iteration=model_flops_per_iteration(
            bundle.model, bundle.job.seq_length, bundle.job.global_batch_size
        ),
    )
    return launch_run(args, bundle, profile, config, notes)


def launch_run(
    args: argparse.Namespace,
    bundle: PlanBundle,
    profile: HardwareProfile | None,
    config: RunConfig,
    notes: list[str],
) -> int:
    """Train ``config`` (`executor.run.execute`) behind a progress bar, then write the cost
    model's view of the plan on ``profile`` beside the measurement (`_write_prediction`,
    skipped without a profile) and print ``notes``: after a finished run also the search's
    candidates (`_copy_candidates`) and the summary, 0; after a failed rank
    `report_failure`, 2 for a `SpecError` raised in the ranks, else 1; after an interruption
    `report_interruption` and its exit code."""
    from executor.run import execute

    bar = DeferredProgress()
    bar(f"starting {bundle.plan.world_size} ranks", 0, args.warmup + args.steps)
    try:
        summary = execute(
            config, announce=print, progress=lambda done, total, label: bar(label, done, total)
        )
    except LaunchError as exc:
        bar.close()
        report_failure(exc, bundle, profile, args)
        if profile is not None:
            _write_prediction(bundle, profile, Path(args.out), options_from_args(args))
        _print_notes(notes)
        return 2 if exc.original.error_type == "SpecError" else 1
    except LaunchInterrupted as exc:
        bar.close()
        report_interruption(exc, args)
        if profile is not None:  # `paraplan report RUN` then shows the steps that ran
            _write_prediction(bundle, profile, Path(args.out), options_from_args(args))
        _print_notes(notes)
        return exc.exit_code
    finally:
        bar.close()
    _print_notes(notes)
    if summary is not None:
        if profile is not None:
            _write_prediction(bundle, profile, Path(args.out), options_from_args(args))
        _copy_candidates(Path(args.plan), Path(args.out))
        _print_summary(summary)
        if summary.schedule_note is not None:
            _note(summary.schedule_note)
    return 0


def refuse_unrunnable(bundle: PlanBundle, plan_path: str) -> None:
    """Raise `SpecError` for a plan paraplan's executor would not run as priced: LoRA
    settings it does not train (`executor_lora_refusal`), layers priced in bf16
    (``first_last_layers_bf16``, rule `BF16_LAYERS_FIELD_RULE`), FP8 attention (rule
    `FP8_ATTENTION_KERNEL_RULE`) or an optimizer other than Adam; each message names the fix.
    ``plan_path``: the plan file, named in the messages."""
    lora_refusal = executor_lora_refusal(bundle.job.lora)
    if lora_refusal is not None:
        raise SpecError(lora_refusal)
    priced = options_from_record(bundle.execution, where=f"{plan_path} execution")
    if priced.first_last_layers_bf16:
        raise SpecError(
            f"[{BF16_LAYERS_FIELD_RULE}] {plan_path} was priced with first_last_layers_bf16 "
            "(layers kept in bf16 under Megatron-core); paraplan's executor runs every layer "
            "in the job's precision, so the run would not be the plan as priced: re-plan "
            "without --first-last-layers-bf16, or run it with Megatron-LM (paraplan export "
            "--to megatron)"
        )
    if priced.fp8_attention:
        raise SpecError(
            f"[{FP8_ATTENTION_KERNEL_RULE}] {plan_path} was priced with fp8_attention "
            "(Megatron-core's fp8_dot_product_attention); paraplan's executor runs PyTorch's "
            "attention in bf16, so the run would not be the plan as priced: re-plan with "
            "--no-fp8-attention, or run it through Megatron-Bridge"
        )
    if bundle.job.optimizer != "adam":
        raise SpecError(
            f"optimizer ({bundle.job.optimizer}): paraplan's executor steps AdamW only; run "
            "the plan with Megatron-LM (paraplan export --to megatron), or re-plan with "
            "--optimizer adam"
        )


def report_failure(
    exc: LaunchError, bundle: PlanBundle, profile: HardwareProfile | None, args: argparse.Namespace
) -> None:
    """The root cause on the first line (with the predicted peak memory after an
    out-of-memory error), the other ranks as context, where the tracebacks are, what ran
    and how to go on (`kept_lines`)."""
    from executor.run_folder import FAILURE_LOG

    headline = exc.headline()
    if exc.original.error_type in OOM_ERROR_TYPES and profile is not None:
        peak = _predicted_peak_gib(bundle, profile)
        if peak is not None:
            headline += f"; predicted peak {peak:.1f} GiB"
    lines = [f"paraplan execute: error: {headline}", *(f"  {c}" for c in exc.context())]
    if args.verbose:
        lines.append(exc.full_report())
    else:
        lines.append(f"  tracebacks: {Path(args.out) / FAILURE_LOG} (or run with --verbose)")
    sys.stderr.write("\n".join(lines + kept_lines(args)) + "\n")


def report_interruption(exc: LaunchInterrupted, args: argparse.Namespace) -> None:
    """The signal, then what ran and how to go on (`kept_lines`)."""
    lines = [f"paraplan execute: {exc.headline()}", *kept_lines(args)]
    sys.stderr.write("\n".join(lines) + "\n")


def kept_lines(args: argparse.Namespace) -> list[str]:
    """After a failed or interrupted run: the steps its ``metrics.json`` kept, and the
    checkpoint to resume from (or a rerun when none was saved)."""
    metrics_path = Path(args.out) / "metrics.json"
    try:
        ran = len(json.loads(metrics_path.read_text()).get("steps") or [])
        lines = [f"  steps that ran: {metrics_path} (status: failed, {ran} measured steps)"]
    except (OSError, ValueError):
        lines = [f"  {metrics_path} could not be written; no step was kept"]
    latest = _latest_checkpoint(args.save)
    if latest is not None:
        lines.append(
            f"  to continue: the same command with --resume {args.save} (newest "
            f"checkpoint {latest})"
        )
    else:
        lines.append(
            "  no checkpoint was saved: rerun the command (--save DIR --save-interval N "
            "makes a run resumable)"
        )
    return lines


def _latest_checkpoint(save_dir: str | None) -> Path | None:
    """The newest complete checkpoint of ``--save`` (None without one)."""
    if save_dir is None:
        return None
    from executor.checkpoint import latest_checkpoint

    return latest_checkpoint(save_dir)


def _predicted_peak_gib(bundle: PlanBundle, profile: HardwareProfile) -> float | None:
    """The cost model's peak memory of the busiest rank, None when it cannot predict."""
    from costmodel.estimate import estimate_to_json, simulate_plan

    try:
        estimate, _ = simulate_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan, profile)
    except SpecError:
        return None
    return float(estimate_to_json(estimate)["peak_memory_gib"])


def _print_notes(notes: list[str]) -> None:
    for text in notes:
        _note(text)


def _profile(hardware: str | None, bundle: PlanBundle, notes: list[str]) -> HardwareProfile | None:
    """``--hardware`` (a bad one is a `SpecError`), else the plan's own profile if it loads."""
    if hardware is not None:
        return load_profile(hardware)
    try:
        return load_profile(bundle.cluster.hardware)
    except SpecError as exc:
        notes.append(f"no hardware profile, so no predicted.json or estimate.json: {exc}")
        return None


def _peak_flops(
    bundle: PlanBundle,
    profile: HardwareProfile | None,
    peak_tflops: float | None,
    notes: list[str],
) -> float | None:
    """Peak FLOP/s per rank: the flag, else the profile's at the job's precision, else None."""
    if peak_tflops is not None:
        if peak_tflops <= 0:
            raise SpecError(f"--peak-tflops must be > 0, got {peak_tflops}")
        return peak_tflops * 1e12
    if profile is None:
        return None
    try:
        return peak_flops(profile, bundle.job.precision)
    except SpecError as exc:
        notes.append(f"MFU left null: {exc}")
        return None


def _write_prediction(
    bundle: PlanBundle, profile: HardwareProfile, out: Path, options: ExecutionOptions
) -> None:
    """``estimate.json`` and ``predicted.json`` of the cost model for the executed plan, on
    the runtime ``options`` name (``torch``, the executor's own, by default)."""
    from costmodel.estimate import estimate_to_json, simulate_plan

    _note(f"predicted with the {options.runtime} runtime")
    try:
        estimate, timeline = simulate_plan(
            bundle.model, bundle.cluster, bundle.job, bundle.plan, profile, options=options
        )
    except SpecError as exc:
        _note(f"the cost model cannot predict this plan on {profile.name}: {exc}")
        return
    (out / "estimate.json").write_text(json.dumps(estimate_to_json(estimate), indent=2) + "\n")
    if timeline is not None:
        (out / "predicted.json").write_text(serde.dumps(timeline))


def _copy_candidates(plan_path: Path, out: Path) -> None:
    """A plan written by `paraplan plan --out DIR` has DIR/candidates.json beside it: copy it
    so the run's report shows the search that chose the plan."""
    source = plan_path.parent / "candidates.json"
    if source.is_file() and source.resolve() != (out / "candidates.json").resolve():
        shutil.copyfile(source, out / "candidates.json")


def _note(text: str) -> None:
    sys.stderr.write(f"paraplan execute: note: {text}\n")


def _print_summary(s: RunSummary) -> None:
    mfu = "n/a" if s.mfu is None else percent(s.mfu)
    print(f"run folder: {s.out_dir}")
    print(f"loss: {s.loss[0]:.4f} -> {s.loss[-1]:.4f} over {len(s.loss)} measured steps")
    print(f"iteration time p50: {s.iteration_time_p50_s * 1e3:.1f} ms")
    print(f"throughput: {s.tokens_per_s:,.0f} tokens/s, MFU {mfu}")
    print(f"peak memory per rank: {', '.join(f'{g:.3f}' for g in s.peak_memory_gib)} GiB")
    if s.steal is not None:
        print(f"CPU stolen by the hypervisor during the timed steps: {s.steal:.2%}")
    print(f"next step (for --resume): {s.next_step}")
