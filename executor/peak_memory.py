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
    """The bytes allocated inside a profiled window and still alive, at every memory event
    of the window.

    Rebuilt from the events' block addresses and sizes rather than read from the allocator
    total they carry: that total is a process-wide counter of the blocks allocated while
    any profiler recorded memory, less those of them whose free it saw, and it misses some
    frees. In tensor-parallel, FSDP2 and expert-parallel steps on gloo (torch 2.13) blocks
    of the collectives' buffers were allocated again at an address whose free was never
    reported (24 blocks, 2.0 MiB over a tp2 window of two steps; 1.6 MiB under FSDP2,
    2.5 MiB for a MoE layer under expert parallelism), so the counter climbed by that much
    and the measured peak with it. Here a block allocated at a live address ends the block
    that was there (the allocator cannot hand out a live block twice), a free ends its
    block, and frees of blocks allocated before the window (`live_bytes` counts those it
    keeps) are left out, as the counter leaves them out. Events without addresses (older
    traces) fall back to the counter, relative to its value when the window began.
    """
    events = [
        e for e in trace_json.get("traceEvents", []) if e.get("name") == "[memory]" and "args" in e
    ]
    if not events:
        return []
    events.sort(key=lambda e: e.get("ts", 0))
    if any("Addr" not in e["args"] for e in events):
        first = events[0]["args"]
        start = int(first.get("Total Allocated", 0)) - int(first.get("Bytes", 0))
        return [int(e["args"].get("Total Allocated", 0)) - start for e in events]
    live: dict[int, int] = {}
    total = 0
    totals = []
    for e in events:
        address, size = int(e["args"]["Addr"]), int(e["args"].get("Bytes", 0))
        total -= live.pop(address, 0)
        if size > 0:
            live[address] = size
            total += size
        totals.append(total)
    return totals
