"""`paraplan profile`: measure this machine (or a torchrun world) into a hardware profile.

Checks come before any measurement: the output path must be writable and the machine
must host ``--nproc`` ranks (at most 4 per CPU core, one per GPU); both fail with a
one-line error (exit 2). A rank that dies or stops answering fails the run (exit 1),
never hangs it, and nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from paraplan.commands import COMMAND_HELP
from profiles.store import save_profile
from specs.errors import SpecError
from specs.loading import load_model

NAME = "profile"
CRASHED_EXIT = 3
"""Exit status when a rank crashed in native code (`profiles.profiler.world.NATIVE_CRASH_SIGNALS`);
1 for any other failure."""
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short sweep: fewer shapes, sizes and samples (under 2 minutes on 2 cores)",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="ranks to spawn (each a 'GPU'); default: one per GPU, else one per CPU core "
        "and at least 2; at most 4 per CPU core; leave out under torchrun",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="also time this model's exact GEMMs under its candidate TP degrees (a preset "
        "name or a config.json path)",
    )
    parser.add_argument(
        "--out", required=True, help="profile JSON to write (checked writable before measuring)"
    )


def check_writable(path: str) -> Path:
    """Raise `SpecError` unless ``path`` can be written as a file; creates missing
    parent folders (as writing would) and leaves no file behind."""
    out = Path(path)
    if out.is_dir():
        raise SpecError(f"--out {path!r} is a directory; give a file path such as {path}/cpu.json")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            with out.open("a"):
                pass
        else:
            with out.open("x"):
                pass
            out.unlink()
    except OSError as exc:
        raise SpecError(
            f"--out {path!r} is not writable ({exc.strerror or exc}); choose a path in a "
            "writable folder, e.g. --out ./profile.json"
        ) from exc
    return out


def _command_line(args: argparse.Namespace) -> str:
    parts = ["paraplan profile"]
    if args.quick:
        parts.append("--quick")
    if args.nproc is not None:
        parts.append(f"--nproc {args.nproc}")
    if args.model:
        parts.append(f"--model {args.model}")
    parts.append(f"--out {args.out}")
    return " ".join(parts)


def _is_rank_zero() -> bool:
    """True unless torchrun made this process a rank other than 0 (only rank 0 writes)."""
    return int(os.environ.get("RANK", "0")) == 0


def run(args: argparse.Namespace) -> int:
    # torch loads here, not when the command line starts: other subcommands stay quick.
    from profiles.profiler import ProfilingError, profile_machine

    out = check_writable(args.out) if _is_rank_zero() else Path(args.out)
    model = load_model(args.model) if args.model else None
    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]profile[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("starting ranks", total=None)
        tenths_shown = [0]

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)
            # A bar only draws on a terminal; elsewhere (CI logs) print each tenth.
            tenths = done * 10 // max(total, 1)
            if not console.is_terminal and tenths > tenths_shown[0]:
                tenths_shown[0] = tenths
                console.print(f"profile: {done}/{total} points ({label})")

        try:
            profile = profile_machine(
                args.quick,
                args.nproc,
                model,
                progress,
                name=out.stem,
                command=_command_line(args),
            )
        except ProfilingError as exc:
            hint = " (a rank crashed in native code: running again may succeed)"
            sys.stderr.write(f"paraplan profile: error: {exc}{hint if exc.crashed else ''}\n")
            return CRASHED_EXIT if exc.crashed else 1
    if not _is_rank_zero():
        return 0
    save_profile(profile, out)
    device = profile.device
    peaks = ", ".join(f"{d} {v:.4g}" for d, v in sorted(device.peak_tflops.items()))
    print(f"wrote {out}: {device.name} ({device.kind}), peak TFLOP/s {peaks}")
    print(
        f"  memory {device.hbm_GBps:.4g} GB/s x {profile.compute.memory_bandwidth_efficiency:.3g}, "
        f"op overhead {profile.compute.op_overhead_s * 1e6:.3g} us, "
        f"{len(profile.communication.fits)} collective fits ({profile.communication.backend})"
    )
    for note in profile.provenance.notes:
        if note.startswith("held-out"):
            print(f"  {note}")
    return 0
