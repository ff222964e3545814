"""Peak memory of a rank during `paraplan execute` (`executor.run`).

Peak memory: on CUDA the caching allocator's peak (``max_memory_allocated``). On CPU the
profiler's memory events, which count only what is allocated while a profiler runs: the
peak of a profiled window is the bytes of the tensors alive when it begins (weights,
buffers, gradients, optimizer state; `live_bytes`) plus the highest allocator total the
profiler reports inside it. Two windows are watched: the first warmup step, which creates
the optimizer state and gradient buffers, and the trace window.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile


class MemoryWatch:
    """Peak allocator memory of this rank (see the module doc)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak = 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def profiled(self, base_bytes: Callable[[], int], run: Callable[[], Any]) -> Any:
        """Run ``run()`` under a memory-recording profiler (CPU only) and note its peak over
        ``base_bytes()``, the live tensors' bytes when it begins (`live_bytes`)."""
        if self.device.type == "cuda":
            return run()
        base = base_bytes()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as session:
            result = run()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            session.export_chrome_trace(f.name)
            self.note(base, json.loads(Path(f.name).read_text()))
        return result

    def note(self, base_bytes: int, trace_json: Mapping[str, Any]) -> None:
        """A profiled window that began with ``base_bytes`` of live tensors."""
        self.peak = max(self.peak, base_bytes + max(memory_totals(trace_json), default=0))

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return self.peak


def live_bytes(parts: Iterable[nn.Module], optimizer: torch.optim.Optimizer) -> int:
    """Bytes of this rank's weights, buffers, gradients and optimizer state (each storage
    once; DTensors by their local shard)."""
    parts = list(parts)
    tensors: list[torch.Tensor] = []
    for part in parts:
        for param in part.parameters():
            tensors += [param] if param.grad is None else [param, param.grad]
        tensors += list(part.buffers())
    for state in optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    storages = {}
    for t in tensors:
        storage = (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values()) + sum(ddp_bucket_bytes(p) for p in parts)


def ddp_bucket_bytes(module: torch.nn.Module) -> int:
    """Bytes of a DDP module's gradient buckets: flat buffers its reducer allocates when it
    wraps the model, before any profiler window, and keeps for the whole run (DDP's own
    logging data, ``bucket_sizes`` in bytes); 0 for any other module."""
    if not isinstance(module, DistributedDataParallel):
        return 0
    sizes = str(module._get_ddp_logging_data().get("bucket_sizes", ""))
    return sum(int(size) for size in sizes.split(",") if size.strip())


def memory_totals(trace_json: Mapping[str, Any]) -> list[int]:
    """The allocator total of every memory event of a profiled window, relative to the
    total when the window began.

    The CPU allocator's reported total is a process-wide counter of the blocks allocated
    while any profiler recorded memory, less those of them freed since: blocks allocated
    in an earlier window and still alive (gradients, optimizer state) stay in it, while
    `live_bytes` already counts them. The window's own start, the first event's total
    less its signed size, is taken off.
    """
    events = [
        e for e in trace_json.get("traceEvents", []) if e.get("name") == "[memory]" and "args" in e
    ]
    if not events:
        return []
    events.sort(key=lambda e: e.get("ts", 0))
    first = events[0]["args"]
    start = int(first.get("Total Allocated", 0)) - int(first.get("Bytes", 0))
    return [int(e["args"].get("Total Allocated", 0)) - start for e in events]
