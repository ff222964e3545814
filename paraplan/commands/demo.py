"""`paraplan demo`: the whole loop on this machine, in one command.

Steps, each a library call that another subcommand also makes:

1. profile this machine with the quick sweep (`paraplan profile --quick`), one rank per
   GPU, else one per CPU core (2 to 8); the profile is cached as ``DIR/profile.json`` and
   reused when it was measured on this host for the same number of ranks;
2. search the plans of a small model for that world (`planner.search.search_plans`) and
   write the search's folder ``DIR/plan`` (as `paraplan plan --out`);
3. execute the best plan for a few steady-state steps (`paraplan execute`, run folder
   ``DIR/run``, with the cost model's prediction beside the measurement);
4. compare and write the report (`paraplan report`, ``DIR/run/report.html``).

The job is sized for a quick run: sequences of 256 tokens (128 with ``--reduced``), four
sequences per rank per iteration, bf16 on GPUs and fp32 on CPUs (CPU ranks compute in
fp32). ``--reduced`` also measures fewer steps and simulates fewer candidates; the profile
sweep is the quick one either way. Progress goes to stderr; the report's path and the
three-line summary (iteration time, MFU, verdict) go to stdout. The search and the executor
(pandas, torch) are imported when their step starts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from paraplan.commands import COMMAND_HELP
from paraplan.commands import profile as profile_command
from paraplan.recipe_args import add_runtime_arg, options_from_args
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.formats import percent
from specs.host import available_cpus
from specs.job import TrainingJob
from specs.loading import load_model
from specs.model import ModelSpec
from specs.version import paraplan_version

NAME = "demo"
HELP = COMMAND_HELP[NAME]

PROFILE_ATTEMPTS = 2
"""Tries of the quick profile when a rank crashes in native code (`paraplan profile`'s
`CRASHED_EXIT`); any other failure stops the demo at once."""
MAX_CPU_RANKS = 8
"""Most CPU ranks the demo spawns: the tiny model has 4 layers and 4 heads, so wider worlds
only add data-parallel ranks that share the same cores."""
SEQUENCES_PER_RANK = 4
"""Global batch = this x world size: enough microbatches for pipelining to matter."""


@contextlib.contextmanager
def _quiet_stdout():
    """Keep a subcommand's own printout out of the demo's; its errors still reach stderr."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default="paraplan-demo",
        metavar="DIR",
        help="folder for the profile, the plan and the run (default ./paraplan-demo)",
    )
    parser.add_argument("--model", default="tiny", help="model preset or config (default tiny)")
    add_runtime_arg(parser, "torch")
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        help=f"ranks (default: one per GPU, else one per CPU core, 2 to {MAX_CPU_RANKS})",
    )
    parser.add_argument(
        "--reduced",
        action="store_true",
        help="shorter sequences, fewer measured steps and a smaller search (for tests)",
    )


def local_world_size() -> int:
    """One rank per GPU; without one, one per CPU core, at least 2 and at most 8."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return min(max(2, available_cpus()), MAX_CPU_RANKS)


def cached_profile(path: Path, nproc: int) -> HardwareProfile | None:
    """The profile at ``path`` when this version of paraplan measured it on this host with
    ``nproc`` ranks on one node; None when it is missing, unreadable, or made elsewhere,
    otherwise or by another version (whose probes may measure differently)."""
    if not path.is_file():
        return None
    try:
        profile = load_profile(str(path))
    except SpecError:
        return None
    p = profile.provenance
    host = (p.host or "").split(" ")[0]
    measured_here = p.method == "measured" and host == socket.gethostname()
    same_tool = p.tool_version == paraplan_version()
    return (
        profile if measured_here and same_tool and profile.topology.gpus_per_node == nproc else None
    )


def ensure_profile(path: Path, nproc: int, console: Console) -> HardwareProfile | None:
    """The cached profile of this host at ``path``, or a fresh quick one written there
    (profiled once more, saying so, when a rank crashed in native code); None when
    profiling failed (`paraplan profile` has printed why on stderr)."""
    profile = cached_profile(path, nproc)
    if profile is not None:
        console.print(f"  reusing {path} (measured on this host, {profile.provenance.date})")
        return profile
    argv = ["--quick", "--nproc", str(nproc), "--out", str(path)]
    for attempt in range(1, PROFILE_ATTEMPTS + 1):
        with _quiet_stdout():
            code = run_command(profile_command, argv)
        if code != profile_command.CRASHED_EXIT or attempt == PROFILE_ATTEMPTS:
            break
        console.print(
            f"  a rank crashed in native code (above); profiling again "
            f"(attempt {attempt + 1} of {PROFILE_ATTEMPTS})"
        )
    return load_profile(str(path)) if code == 0 else None


def run_command(module: ModuleType, argv: list[str]) -> int:
    """Run a subcommand module exactly as `paraplan <name> argv...` would."""
    parser = argparse.ArgumentParser(prog=f"paraplan {module.NAME}")
    module.add_arguments(parser)
    return int(module.run(parser.parse_args(argv)))


def _problem(
    args: argparse.Namespace, model: ModelSpec, nproc: int, profile_path: Path
) -> tuple[ModelSpec, ClusterSpec, TrainingJob]:
    """The demo's model, cluster (this machine's profile) and job."""
    import torch

    cluster = ClusterSpec(hardware=str(profile_path.resolve()), num_gpus=nproc)
    job = TrainingJob(
        seq_length=128 if args.reduced else 256,
        global_batch_size=SEQUENCES_PER_RANK * nproc,
        precision="bf16" if torch.cuda.is_available() else "fp32",
    )
    return model, cluster, job


def _plan(
    args: argparse.Namespace,
    problem: tuple[ModelSpec, ClusterSpec, TrainingJob],
    profile: HardwareProfile,
    out: Path,
    console: Console,
) -> PlanBundle | None:
    """Search, write the search folder ``out``, and return the best plan (None if none fits)."""
    from paraplan.commands.plan_results import write_search_outputs
    from planner.explain import explain
    from planner.search import search_plans
    from planner.space import SearchSpace

    model, cluster, job = problem
    space = SearchSpace(max_micro_batch_size=2 if args.reduced else 4)
    options = options_from_args(args)
    result = search_plans(
        model,
        cluster,
        job,
        profile,
        space=space,
        top_k=2 if args.reduced else 5,
        options=options,
    )
    text = explain(result)
    write_search_outputs(result, cluster.hardware, out, text, options=options)
    if result.best is None:
        console.print(text)
        return None
    est = result.best.estimate
    console.print(
        f"  {result.num_valid} valid plans, best {result.best.plan.label()}: predicted "
        f"{est.iteration_time_s * 1e3:.1f} ms/iteration, MFU {percent(est.mfu)}"
    )
    return PlanBundle(model=model, cluster=cluster, job=job, plan=result.best.plan)


def summary_lines(
    comparison: dict[str, Any], estimate: dict[str, Any], metrics: dict[str, Any]
) -> list[str]:
    """The three summary lines: iteration time, MFU, verdict."""
    predicted, measured = (
        comparison["iteration_time_predicted_s"],
        comparison["iteration_time_measured_s"],
    )
    error = comparison["iteration_time_error"]
    mfu_measured = metrics.get("mfu")
    measured_mfu = "n/a" if mfu_measured is None else percent(mfu_measured)
    return [
        f"iteration time: predicted {predicted * 1e3:.1f} ms, measured {measured * 1e3:.1f} ms "
        f"({'n/a' if error is None else f'{error:+.1%}'})",
        f"MFU (model FLOPs): predicted {percent(estimate['mfu'])}, measured {measured_mfu}",
        f"verdict: {comparison['verdict']}",
    ]


def run(args: argparse.Namespace) -> int:
    # input first: a bad --model or --nproc must not wait for the minutes of profiling
    if args.nproc is not None and args.nproc < 1:
        raise SpecError(f"--nproc must be >= 1, got {args.nproc}; omit it for the default")
    model = load_model(args.model)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nproc = args.nproc or local_world_size()
    start = time.perf_counter()

    def step(i: int, text: str) -> None:
        console.print(f"[bold][{i}/4][/bold] {text}  [dim]({time.perf_counter() - start:.0f} s)")

    step(1, f"profiling this machine with {nproc} ranks (quick sweep)")
    profile_path = out / "profile.json"
    profile = ensure_profile(profile_path, nproc, console)
    if profile is None:
        return 1
    model, cluster, job = _problem(args, model, nproc, profile_path)
    step(2, f"planning {model.name} on {nproc} ranks, seq {job.seq_length}, global batch "
            f"{job.global_batch_size}, {job.precision}, runtime {args.runtime}")  # fmt: skip
    with console.status("searching plans"):
        bundle = _plan(args, (model, cluster, job), profile, out / "plan", console)
    if bundle is None:
        return 1
    from paraplan.commands import execute as execute_command
    from paraplan.commands.report import write_report

    step(3, f"executing {bundle.plan.label()}")
    run_dir = out / "run"
    steps, warmup = (4, 1) if args.reduced else (8, 2)
    argv = [str(out / "plan" / "plan.json"), "--steps", str(steps), "--warmup", str(warmup)]
    argv += ["--out", str(run_dir), "--hardware", cluster.hardware, "--runtime", args.runtime]
    with _quiet_stdout():  # `execute` shows its steps' progress on stderr
        code = run_command(execute_command, argv)
    if code != 0:
        return code
    step(4, "comparing prediction and measurement")
    report, comparison = write_report(run_dir)
    estimate = json.loads((run_dir / "estimate.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    console.print(f"  done in {time.perf_counter() - start:.0f} s")
    print(f"report: {report}")
    for line in summary_lines(comparison, estimate, metrics):
        print(line)
    sys.stdout.flush()
    return 0
