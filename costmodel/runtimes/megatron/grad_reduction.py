"""Gradient reduction of one pipeline stage of the ``megatron`` runtime: the data-parallel
buckets, their sizes and when each is ready (step 3 of `costmodel.runtimes.megatron.pricing`).

Megatron-core's DDP reduces the main gradients per bucket over DP x CP, routed experts over
expert DP (megatron-facts.md §5.1): reduce-scatter with the distributed optimizer, else
all-reduce, ``ExecutionOptions.main_grad_bytes`` per element. With ``overlap_grad_reduce`` a
bucket is launched once the last microbatch's backward has produced it (buckets fill in
backward order during that action); Megatron buckets only the first chunk of the first
stage and keeps one bucket per chunk elsewhere. Without it every bucket waits for the end of
the pipeline. Megatron-FSDP's sharding strategies that reduce in every backward do so one
layer at a time (`costmodel.runtimes.megatron.megatron_fsdp.grads_reduced_every_backward`).
`costmodel.runtimes.megatron.stage_tail` queues the events on the stage's communication
stream. Seconds and bytes throughout.
"""

from __future__ import annotations

import math

from costmodel.collectives import collective_time_s
from costmodel.passes import ChunkCost
from costmodel.pipeline_sim import TimedAction
from costmodel.runtimes.megatron.megatron_fsdp import (
    grads_reduce_scattered,
    grads_reduced_every_backward,
)
from costmodel.topology import GroupPlacement, PlanPlacements
from profiles.schema import HardwareProfile
from specs.plan import ParallelPlan


def group_collective_s(
    profile: HardwareProfile, op: str, size: float, group: GroupPlacement
) -> float:
    """Seconds of one ``op`` collective of ``size`` bytes over ``group``
    (`costmodel.collectives.collective_time_s`); zero for a group of one rank."""
    return collective_time_s(profile, op, size, group) if group.size > 1 else 0.0


def bucket_params(params: float, bucket: float | None) -> list[float]:
    """Split ``params`` into buckets of ``bucket`` parameters (the last one smaller)."""
    if params <= 0:
        return []
    if bucket is None or bucket >= params:
        return [params]
    n = math.ceil(params / bucket)
    return [bucket] * (n - 1) + [params - bucket * (n - 1)]


def _last_backward(row: tuple[TimedAction, ...], chunk: int) -> TimedAction:
    return next(t for t in reversed(row) if t.action.phase == "B" and t.action.chunk == chunk)


def _dp_groups(
    cost: ChunkCost, placements: PlanPlacements
) -> tuple[tuple[str, float, GroupPlacement], ...]:
    """(kind, parameters, group) of a chunk's data-parallel reductions: its dense
    parameters over dp·cp, its routed experts over expert-DP."""
    return (
        ("dense", cost.dense_params, placements["dp-cp"]),
        ("expert", cost.expert_params, placements["edp"]),
    )


def grad_bucket_events(
    profile: HardwareProfile,
    plan: ParallelPlan,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    row: tuple[TimedAction, ...],
    placements: PlanPlacements,
    grad_bytes: int,
    layers_per_chunk: tuple[int, ...],
) -> list[tuple[float, str, float, float]]:
    """(ready time, name, duration, bytes) of every gradient bucket of one stage
    (``grad_bytes`` per element, `ExecutionOptions.main_grad_bytes`); Megatron-FSDP's
    per-backward reductions in `_fsdp_grad_events`."""
    if grads_reduced_every_backward(plan):
        return _fsdp_grad_events(profile, chunks, row, placements, grad_bytes, layers_per_chunk)
    op = "reduce_scatter" if grads_reduce_scattered(plan) else "all_reduce"
    overlapped = plan.overlap_grad_reduce or plan.use_megatron_fsdp
    end = row[-1].end_s
    events = []
    for chunk, cost in enumerate(chunks):
        bucketed = plan.overlap_grad_reduce and stage == 0 and chunk == 0
        bucket = plan.bucket_size_params() if bucketed else None
        last = _last_backward(row, chunk)
        for kind, params, group in _dp_groups(cost, placements):
            parts = bucket_params(params, bucket) if group.size > 1 else []
            done = 0.0
            for j, part in enumerate(parts):
                done += part
                ready = last.start_s + (last.end_s - last.start_s) * done / params
                size = part * grad_bytes
                events.append(
                    (
                        ready if overlapped else end,
                        f"dp {op} c{chunk} {kind} bucket {j}",
                        group_collective_s(profile, op, size, group),
                        size,
                    )
                )
    return sorted(events, key=lambda e: e[0])


def _fsdp_grad_events(
    profile: HardwareProfile,
    chunks: tuple[ChunkCost, ...],
    row: tuple[TimedAction, ...],
    placements: PlanPlacements,
    grad_bytes: int,
    layers_per_chunk: tuple[int, ...],
) -> list[tuple[float, str, float, float]]:
    """Megatron-FSDP sharding gradients (`megatron_fsdp.grads_reduced_every_backward`):
    every backward pass of a chunk reduce-scatters its gradients one unit module (layer) at
    a time, each as that layer's share of the backward ends (layers in equal shares of the
    chunk's parameters and of the pass)."""
    events = []
    for chunk, cost in enumerate(chunks):
        pieces = max(layers_per_chunk[chunk], 1)
        backwards = [t for t in row if t.action.phase == "B" and t.action.chunk == chunk]
        for kind, params, group in _dp_groups(cost, placements):
            if params <= 0 or group.size < 2:
                continue
            size = params / pieces * grad_bytes
            seconds = group_collective_s(profile, "reduce_scatter", size, group)
            for t in backwards:
                mb = t.action.microbatch
                for j in range(pieces):
                    ready = t.start_s + (t.end_s - t.start_s) * (j + 1) / pieces
                    name = f"dp reduce_scatter c{chunk} mb{mb} {kind} layer {j}"
                    events.append((ready, name, seconds, size))
    return sorted(events, key=lambda e: e[0])
