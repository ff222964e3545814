"""`paraplan calibrate RUN [RUN ...] -o PROFILE.json`: refit a hardware profile from runs.

The base profile is ``--hardware``, or else the ``cluster.hardware`` of the runs' plans,
which must then name one profile. The fit is `reports.calibrate.calibrate`; the command
prints the fitted factors and every run's iteration-time error before and after, and
writes the calibrated profile. ``--check RUN ...`` adds held-out runs that are evaluated
but not fitted. ``--host-speed ELASTICITY`` first brings every run to one host speed by
its host probe (`reports.host_speed.runs_at_one_host_speed`; the fitted runs' mean speed,
held-out runs brought to it too), for runs of a shared machine taken in different spells.

The fit (numpy, scipy, the cost model) is imported once the runs and the base profile have
been read: ``--help`` and bad input answer without loading it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from costmodel.runtimes.torch.host_rates import layer_collective_scale
from paraplan.commands import COMMAND_HELP
from paraplan.recipe_args import add_runtime_arg, options_from_args
from profiles.lookup import collective_fit
from profiles.schema import HardwareProfile
from profiles.store import load_profile, save_profile
from reports.run_dir import RunDir, load_run
from specs.errors import SpecError

if TYPE_CHECKING:
    from reports.calibrate import CalibrationResult

NAME = "calibrate"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folders of `paraplan execute ... --out RUN`"
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="PROFILE.json", help="calibrated profile to write"
    )
    parser.add_argument(
        "--hardware",
        metavar="BASE",
        help="profile to start from (stored name or JSON path); default: the plans' "
        "cluster.hardware, which must be the same in every run",
    )
    parser.add_argument(
        "--host-speed",
        type=float,
        metavar="ELASTICITY",
        help="bring every run's step times to one host speed before fitting (the geometric "
        "mean of the runs' host probes; runs of `paraplan execute --host-probe`): each step "
        "times (that mean over the run's probe) ** ELASTICITY (1: time follows the probe)",
    )
    parser.add_argument(
        "--check",
        nargs="+",
        default=[],
        metavar="RUN",
        help="held-out run folders: their error is printed before and after, never fitted",
    )
    add_runtime_arg(parser, "torch")


def base_profile(hardware: str | None, runs: Sequence[RunDir]) -> HardwareProfile:
    """``hardware`` if given, else the one profile every run's plan names."""
    if hardware is not None:
        return load_profile(hardware)
    named = sorted({run.bundle.cluster.hardware for run in runs})
    if len(named) != 1:
        listing = "; ".join(f"{run.path}: {run.bundle.cluster.hardware}" for run in runs)
        raise SpecError(
            f"the runs name {len(named)} different hardware profiles ({listing}); calibrate "
            "runs of one machine together, or pass --hardware BASE to choose the base profile"
        )
    return load_profile(named[0])


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def print_result(result: CalibrationResult) -> None:
    """The factors, the refitted collectives and the per-run errors, as a short table."""
    f, base = result.factors, result.base
    print(
        f"factors: GEMM efficiency x{f.gemm_scale:.3g}, attention x{f.attention_scale:.3g}, "
        f"memory bandwidth x{f.memory_bandwidth_scale:.3g}, op overhead "
        f"{base.compute.op_overhead_s * 1e6:.3g} -> {f.op_overhead_s * 1e6:.3g} us, "
        f"send_recv time x{f.p2p_time_scale:.3g}"
    )
    layers = (layer_collective_scale(base), layer_collective_scale(result.profile))
    if layers[0] != layers[1]:
        print(
            f"layer collectives (tensor, context, expert parallelism): "
            f"x{layers[0]:.3g} -> x{layers[1]:.3g}"
        )
    for fit in result.collectives:
        try:
            old = collective_fit(base, fit.op, fit.group_size, fit.placement)
            before = f"{old.latency_s * 1e6:.4g} us, {old.busbw_GBps:.4g} GB/s -> "
        except SpecError:
            before = "new: "
        print(
            f"collective {fit.op} {fit.placement} x{fit.group_size}: {before}"
            f"{fit.latency_s * 1e6:.4g} us, {fit.busbw_GBps:.4g} GB/s"
        )
    rows = [("run", "plan", "measured", "before", "after")]
    for e in result.runs:
        rows.append(
            (
                f"{e.path} ({'fitted' if e.fitted else 'held out'})",
                e.plan,
                _ms(e.measured_s),
                f"{_ms(e.predicted_before_s)} ({e.error_before:+.1%})",
                f"{_ms(e.predicted_after_s)} ({e.error_after:+.1%})",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def run(args: argparse.Namespace) -> int:
    runs = [load_run(path) for path in args.runs]
    held_out = [load_run(path) for path in args.check]
    base = base_profile(args.hardware, runs)
    from reports.calibrate import calibrate
    from reports.host_speed import runs_at_one_host_speed

    command = ["paraplan", "calibrate", *args.runs, "-o", args.output, "--runtime", args.runtime]
    if args.hardware:
        command += ["--hardware", args.hardware]
    if args.host_speed is not None:
        command += ["--host-speed", str(args.host_speed)]
        runs = runs_at_one_host_speed(runs, args.host_speed)
        probe_s = (runs[0].metrics or {})["host_probe_p50_s"]
        held_out = runs_at_one_host_speed(held_out, args.host_speed, probe_s)
        print(f"step times at one host speed: host probe {probe_s * 1e3:.3f} ms")
    if args.check:
        command += ["--check", *args.check]
    result = calibrate(
        base, runs, held_out=held_out, command=shlex.join(command), options=options_from_args(args)
    )
    print(f"base profile: {base.name}, runtime {args.runtime}")
    print_result(result)
    for warning in result.warnings:
        sys.stderr.write(f"paraplan calibrate: warning: {warning}\n")
    out = save_profile(result.profile, args.output)
    print(f"calibrated profile: {out}")
    return 0
