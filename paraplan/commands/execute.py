"""`paraplan execute PLAN.json`: train with the plan on torch.distributed and measure it.

Besides what the executor writes (``plan.json``, ``metrics.json``, ``measured.json``,
``traces/``), the run folder gets the cost model's view of the same plan on the hardware
profile (``--hardware``, default the plan's ``cluster.hardware``): ``estimate.json`` and
``predicted.json``, so `paraplan report RUN` can compare them, and the search's
``candidates.json`` when the plan came from `paraplan plan --out DIR`. Without a usable profile
they are skipped with a note, and MFU stays null unless ``--peak-tflops`` is given.

Exit codes: 0 the run finished; 1 the plan breaks a rule (the violations are printed, no
process starts) or a rank failed (its original error is printed); 2 bad input (a missing or
malformed plan or data file, a world this machine cannot host), raised as `SpecError`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from costmodel.estimate import estimate_to_json, simulate_plan
from costmodel.flops import model_flops_per_iteration
from executor.launch import LaunchError
from executor.run import RunConfig, RunSummary, execute
from paraplan.commands import COMMAND_HELP
from profiles.host_probe import host_probe
from profiles.lookup import peak_flops
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs import serde
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.rules import check_plan

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
    parser.add_argument("--save", metavar="DIR", help="write a checkpoint here after the last step")
    parser.add_argument("--resume", metavar="DIR", help="continue from a checkpoint of --save")
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


def run(args: argparse.Namespace) -> int:
    bundle = serde.load(PlanBundle, args.plan)
    violations = check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan)
    if violations:
        print(f"invalid plan ({bundle.plan.label()}); nothing was started:")
        for v in violations:
            print(f"  [{v.rule}] {v.message}")
        return 1
    profile = _profile(args.hardware, bundle)
    config = RunConfig(
        bundle=bundle,
        out_dir=args.out,
        steps=args.steps,
        warmup=args.warmup,
        data=args.data,
        seed=args.seed,
        save_dir=args.save,
        resume_dir=args.resume,
        host_probe=host_probe if args.host_probe else None,
        peak_flops_per_rank=_peak_flops(bundle, profile, args.peak_tflops),
        model_flops_per_iteration=model_flops_per_iteration(
            bundle.model, bundle.job.seq_length, bundle.job.global_batch_size
        ),
    )
    try:
        summary = execute(config)
    except LaunchError as exc:
        sys.stderr.write(f"paraplan execute: error: {exc}\n")
        return 2 if exc.original.error_type == "SpecError" else 1
    if summary is not None:
        if profile is not None:
            _write_prediction(bundle, profile, Path(args.out))
        _copy_candidates(Path(args.plan), Path(args.out))
        _print_summary(summary)
    return 0


def _profile(hardware: str | None, bundle: PlanBundle) -> HardwareProfile | None:
    """``--hardware`` (a bad one is a `SpecError`), else the plan's own profile if it loads."""
    if hardware is not None:
        return load_profile(hardware)
    try:
        return load_profile(bundle.cluster.hardware)
    except SpecError as exc:
        _note(f"no hardware profile, so no predicted.json or estimate.json: {exc}")
        return None


def _peak_flops(
    bundle: PlanBundle, profile: HardwareProfile | None, peak_tflops: float | None
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
        _note(f"MFU left null: {exc}")
        return None


def _write_prediction(bundle: PlanBundle, profile: HardwareProfile, out: Path) -> None:
    """``estimate.json`` and ``predicted.json`` of the cost model for the executed plan."""
    try:
        estimate, timeline = simulate_plan(
            bundle.model, bundle.cluster, bundle.job, bundle.plan, profile
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
    mfu = "n/a" if s.mfu is None else f"{100 * s.mfu:.3g}%"
    print(f"run folder: {s.out_dir}")
    print(f"loss: {s.loss[0]:.4f} -> {s.loss[-1]:.4f} over {len(s.loss)} measured steps")
    print(f"iteration time p50: {s.iteration_time_p50_s * 1e3:.1f} ms")
    print(f"throughput: {s.tokens_per_s:,.0f} tokens/s, MFU {mfu}")
    print(f"peak memory per rank: {', '.join(f'{g:.3f}' for g in s.peak_memory_gib)} GiB")
    if s.steal is not None:
        print(f"CPU stolen by the hypervisor during the timed steps: {s.steal:.2%}")
    print(f"next step (for --resume): {s.next_step}")
