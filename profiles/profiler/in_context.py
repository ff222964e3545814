"""Paired timings of a chain of layers with and without a synchronizing mechanism, at
levels of host work between the layers: the shared loop of the in-context probes
(`moe_exchange`: the expert-parallel exchanges; `fsdp_context`: FSDP2's gathers).

A mechanism that waits on the peer rank costs more inside a chain of host work than alone:
each call waits for the rank that reached it later, and the ranks drift apart over the
work between the calls. So a probe times a chain of layers of the executor's pattern
against the same chain without the mechanism (its base), in pairs from a barrier (base,
barrier, real), forward and backward timed apart (wall clock), at each level of host work,
and records per layer of the chain:

- ``<extra>_<pass>_w<level>``: the real chain's pass less the base's;
- ``<layer>_<pass>_w<level>``: the base's pass: the host work per layer at that level,
  which `costmodel.in_context.InContext` interpolates on.

Each sample is the mean of `PAIRS_PER_SAMPLE` consecutive pairs (a step pays every wait,
the long ones too).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from profiles.profiler.compute import Runner
from profiles.profiler.timing import OverheadTiming

CHAIN_LAYERS = 4
"""Layers chained between two meetings of the ranks (their drift grows over the chain)."""
WORK_GEMMS = 40
"""Products of a (128, 128) activation by a 128 x 128 weight, each with a tanh, per layer at
a probe's worked level (4-7 ms forward on a core of the 2-core development VM)."""
PAIRS = 24
"""Timed pairs per level."""
PAIRS_PER_SAMPLE = 4
"""Consecutive pairs whose mean makes one sample."""
PASSES = ("forward", "backward")

Chain = Callable[[int, bool], tuple[float, float]]
"""(host work, real) -> (forward s, backward s) of one chain."""


def timed_passes(run: Runner, forward: Callable[[], torch.Tensor]) -> tuple[float, float]:
    """(forward s, backward s) of ``forward()`` and the backward of its result's sum."""
    start = time.perf_counter()
    loss = forward().sum()
    if run.cuda:
        torch.cuda.synchronize()
    middle = time.perf_counter()
    loss.backward()
    if run.cuda:
        torch.cuda.synchronize()
    return middle - start, time.perf_counter() - middle


def _samples(values: list[float]) -> tuple[float, ...]:
    step = PAIRS_PER_SAMPLE
    return tuple(sum(values[i : i + step]) / step for i in range(0, len(values), step))


def _level(run: Runner, chain: Chain, work: int, per: tuple[int, int]) -> dict[str, list[float]]:
    """Per-layer base passes and per-unit differences of one level, one entry per pair;
    ``per``: (layers, units) of a chain."""
    layers, units = per
    out: dict[str, list[float]] = {f"{k}_{p}": [] for k in ("layer", "extra") for p in PASSES}
    for i in range(run.budget.warmup_calls + PAIRS):
        dist.barrier()
        base = chain(work, False)
        dist.barrier()
        real = chain(work, True)
        if i < run.budget.warmup_calls:
            continue
        for p, b, r in zip(PASSES, base, real, strict=True):
            out[f"layer_{p}"].append(b / layers)
            out[f"extra_{p}"].append((r - b) / units)
    return out


def time_in_context(
    run: Runner,
    chain: Chain,
    *,
    levels: tuple[int, ...],
    names: tuple[str, str],
    per: tuple[int, int],
) -> tuple[OverheadTiming, ...]:
    """The records of the module doc; ``names``: (extra, layer) prefixes; ``per``: the
    chain's layers (the base's divisor) and units of the mechanism (the difference's)."""
    extra, layer = names
    records = []
    for level, work in enumerate(levels):
        found = _level(run, chain, work, per)
        for p in PASSES:
            records.append(
                OverheadTiming(op=f"{extra}_{p}_w{level}", times_s=_samples(found[f"extra_{p}"]))
            )
            records.append(
                OverheadTiming(op=f"{layer}_{p}_w{level}", times_s=_samples(found[f"layer_{p}"]))
            )
    return tuple(records)
