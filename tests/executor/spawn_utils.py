"""Spawn a small gloo world of local processes and collect what each rank saved.

Ranks rendezvous through a FileStore in a temporary directory (no TCP port to race for),
use one thread each (2 ranks share 2 cores on CI), and get a 60 s process-group timeout so
a collective mismatch fails instead of hanging. A rank function receives ``(rank, save,
*args)`` and calls ``save(obj)`` whenever it has results worth keeping; a rank that
returns ends through `specs.host.exit_now`, as the launchers' ranks do; when a rank raises,
``torch.multiprocessing.spawn`` stops the others and `run_world` returns what was saved
together with the error text. A rank that native code kills (a C-library heap check's
SIGABRT) adds the Python stack of each of its threads at the crash to that text
(`launch.failures.record_native_crashes`).

Spawned ranks import the rank function by module name, so the module that defines it must
be importable from the repository root; ranks inherit the parent's ``sys.path``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from launch.failures import native_trace_path, read_native_trace, record_native_crashes
from specs.host import exit_now

PG_TIMEOUT = timedelta(seconds=60)


def _rank_entry(rank: int, world: int, tmp: str, fn: Callable, args: tuple) -> None:
    record_native_crashes(native_trace_path(Path(tmp), rank))
    torch.set_num_threads(1)
    store = dist.FileStore(str(Path(tmp) / "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=PG_TIMEOUT)
    out = Path(tmp) / f"rank{rank}.pt"

    def save(obj: Any) -> None:
        torch.save(obj, out)

    try:
        fn(rank, save, *args)
    finally:
        dist.destroy_process_group()
    exit_now(0)  # everything is saved: skip the interpreter teardown (`exit_now`)


def run_world(world: int, fn: Callable, *args: Any) -> tuple[list[Any], str | None]:
    """Run ``fn(rank, save, *args)`` on ``world`` spawned ranks; return each rank's last
    saved object (None if it saved nothing) and the error text of a failed rank, if any."""
    with tempfile.TemporaryDirectory() as tmp:
        error = None
        try:
            mp.spawn(_rank_entry, args=(world, tmp, fn, args), nprocs=world, join=True)
        except Exception as exc:  # a rank's traceback, re-raised by spawn in the parent
            error = f"{exc.__class__.__name__}: {exc}" + _native_traces(Path(tmp), world)
        results = []
        for rank in range(world):
            path = Path(tmp) / f"rank{rank}.pt"
            results.append(torch.load(path, weights_only=False) if path.exists() else None)
    return results, error


def _native_traces(tmp: Path, world: int) -> str:
    """The Python stacks each rank that native code killed left at the crash; last, so that
    a test showing the error's tail shows them."""
    traces = ((r, read_native_trace(native_trace_path(tmp, r))) for r in range(world))
    return "".join(f"\n---- rank {r}, native crash:\n{text}" for r, text in traces if text)
