"""The exposed all-gather of the updated parameters of one pipeline stage in the ``megatron``
runtime (step 4 of `costmodel.runtimes.megatron.pricing`): per bucket after the distributed
optimizer's step, or under the next iteration's forwards with ``overlap_param_gather``;
Megatron-FSDP's per-layer gathers in every pass; the layer-wise gathers of an optimizer
that is not distributed (Muon, `costmodel.optimizer_muon.layerwise_gather_s`). Bytes per
parameter follow the weight storage (bf16, or FP8 parameters). Seconds.
"""

from __future__ import annotations

from costmodel.bf16_layers import bf16_layers, bf16_linear_params
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage
from costmodel.optimizer_muon import layerwise_gather_s
from costmodel.passes import ChunkCost
from costmodel.pipeline_sim import TimedAction
from costmodel.rank_params import position_params
from costmodel.runtimes.megatron.grad_reduction import bucket_params, group_collective_s
from costmodel.runtimes.megatron.megatron_fsdp import (
    ChunkGather,
    fsdp_param_gather_exposed_s,
    optimizer_sharded,
)
from costmodel.schedules import plan_stage_chunks
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def param_gather_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    stage: int,
    options: ExecutionOptions,
) -> tuple[tuple[float, float], ...]:
    """Mean bytes per (dense, expert) parameter of each chunk of ``stage`` in the
    parameter all-gather: the linear layers' weights at
    `costmodel.memory_allowances.Fp8WeightStorage.gather_bytes` (FP8 parameters), the rest (norms,
    router, embedding, output layer) and the linear weights of the layers kept in bf16
    (`costmodel.bf16_layers.bf16_linear_params`) at the job's weight size; routed experts
    are linear. A LoRA job gathers its 16-bit adapters only
    (`costmodel.rank_params.StageParams.trained`)."""
    weight = 4.0 if job.precision == "fp32" else 2.0
    linear_bytes = fp8_weight_storage(options).gather_bytes(job)
    chunks = plan_stage_chunks(model, plan, stage)
    if linear_bytes == weight:
        return tuple((weight, weight) for _ in chunks)
    bf16 = bf16_layers(model, job, options)
    out = []
    for at in chunks:
        held = position_params(model, plan, at, job.lora)
        trained = held.trained_dense
        kept = bf16_linear_params(model, plan, at.layers, bf16 if job.lora is None else frozenset())
        dense_linear = held.trained_linear - held.trained_expert - (kept.linear - kept.expert)
        dense = (weight * (trained - dense_linear) + linear_bytes * dense_linear) / max(
            trained, 1.0
        )
        experts = held.trained_expert
        expert = (linear_bytes * (experts - kept.expert) + weight * kept.expert) / max(experts, 1.0)
        out.append((dense, expert if kept.expert else linear_bytes))
    return tuple(out)


def param_gather_s(
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    placements: PlanPlacements,
    row: tuple[TimedAction, ...],
    layers_per_chunk: tuple[int, ...],
    gather_bytes: tuple[tuple[float, float], ...],
    smallest_shares: tuple[float, float],
    reduce_s: float = 0.0,
    backward_sweeps: float = 1.0,
) -> float:
    """Exposed all-gather of the updated parameters (distributed optimizer; Megatron-FSDP
    in `_fsdp_gather_s`, whose per-layer gathers share the group's links with ``reduce_s``
    seconds of per-backward gradient reduce-scatters and gather each chunk
    ``backward_sweeps`` times per backward pass,
    `costmodel.runtimes.megatron.zero3_schedule.backward_gather_sweeps` for DeepSpeed's
    stage-3 engine; ``dist_muon``'s uneven gather, with
    ``smallest_shares`` from `costmodel.muon_sharding.smallest_share_fractions`),
    ``gather_bytes`` per (dense, expert) parameter of each chunk (`param_gather_bytes`:
    bf16, or FP8 parameters). Without `overlap_param_gather` every bucket
    (`bucket_gathers`) is gathered after the optimizer step; with it, the exposed time is
    the largest lateness of a bucket (`overlapped_lateness_s`)."""
    if plan.use_megatron_fsdp:
        return _fsdp_gather_s(
            plan,
            profile,
            chunks,
            placements,
            row,
            gather_bytes,
            layers_per_chunk,
            reduce_s,
            backward_sweeps,
        )
    if not plan.distributed_optimizer:
        chunk_params = tuple((c.dense_params, c.expert_params) for c in chunks)
        groups = (placements["dp-cp"], placements["edp"])
        return layerwise_gather_s(profile, job, chunk_params, gather_bytes, groups, smallest_shares)
    needs = bucket_gathers(profile, plan, row, chunks, gather_bytes, placements, stage)
    if not plan.overlap_param_gather:
        return sum(seconds for _, seconds in needs)
    return overlapped_lateness_s(needs)


def bucket_gathers(
    profile: HardwareProfile,
    plan: ParallelPlan,
    row: tuple[TimedAction, ...],
    chunks: tuple[ChunkCost, ...],
    gather_bytes: tuple[tuple[float, float], ...],
    placements: PlanPlacements,
    stage: int,
) -> list[tuple[float, float]]:
    """(second at which the next iteration's forward needs it, gather seconds) of every
    parameter bucket of ``stage`` under the distributed optimizer, in forward order: per
    chunk, the dense buckets over dp·cp then the expert buckets over expert-DP, each
    bucket's remainder first (`grad_reduction.bucket_params`; Megatron buckets only the
    first chunk of the first stage under ``overlap_grad_reduce``, megatron-facts.md §5.1),
    needed when the chunk's first forward in ``row`` reaches it in proportion to the
    parameters before it; ``gather_bytes`` per (dense, expert) parameter of each chunk."""
    needs: list[tuple[float, float]] = []  # (needed at, gather seconds), forward order
    for chunk, cost in enumerate(chunks):
        bucketed = plan.overlap_grad_reduce and stage == 0 and chunk == 0
        bucket = plan.bucket_size_params() if bucketed else None
        first = next(t for t in row if t.action.phase == "F" and t.action.chunk == chunk)
        dense_bytes, expert_bytes = gather_bytes[chunk]
        for params, group, weight_bytes in (
            (cost.dense_params, placements["dp-cp"], dense_bytes),
            (cost.expert_params, placements["edp"], expert_bytes),
        ):
            parts = list(reversed(bucket_params(params, bucket))) if group.size > 1 else []
            done = 0.0
            for part in parts:
                needed = first.start_s + (first.end_s - first.start_s) * done / params
                done += part
                seconds = group_collective_s(profile, "all_gather", part * weight_bytes, group)
                needs.append((needed, seconds))
    return needs


def overlapped_lateness_s(needs: list[tuple[float, float]]) -> float:
    """Exposed seconds of the parameter all-gathers under ``overlap_param_gather``: the
    largest lateness of a bucket of ``needs`` (`bucket_gathers`) when the gathers run back
    to back in the order the forwards need them, on their own stream from the start of the
    next iteration (Megatron prefetches chunk 0 and launches chunk k+1 when chunk k starts,
    megatron-facts.md §5.3).

    Megatron-core r0.8.0 launches the first bucket's gather in ``optimizer.zero_grad()`` and
    each next one from the forward pre-hook that waits for its predecessor
    (``DistributedOptimizer._finish_param_sync_helper``, `megatron/core/optimizer/
    distrib_optimizer.py`; the bucket group's ``finish_param_sync`` from r0.9), so a gather
    starts no earlier than the forward reaches the bucket before it. That start is later
    than the chain's only when the previous gather ended before the forward needed it; with
    a chunk's buckets of one size (the smaller remainder gathered first) and needed in
    proportion to their parameters, such a gather is shorter than the forward over one
    bucket, so it stalls nothing and both give the same lateness."""
    clock = lateness = 0.0
    for needed, seconds in sorted(needs):
        clock += seconds
        lateness = max(lateness, clock - needed)
    return lateness


def _fsdp_gather_s(
    plan: ParallelPlan,
    profile: HardwareProfile,
    chunks: tuple[ChunkCost, ...],
    placements: PlanPlacements,
    row: tuple[TimedAction, ...],
    gather_bytes: tuple[tuple[float, float], ...],
    layers_per_chunk: tuple[int, ...],
    reduce_s: float = 0.0,
    backward_sweeps: float = 1.0,
) -> float:
    """Megatron-FSDP: per-layer parameter all-gathers in every forward pass and
    ``backward_sweeps`` times in every backward pass under `optim_grads_params`, chunk by
    chunk with each chunk's own layer count
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_param_gather_exposed_s`); they hide
    behind the passes' compute less the ``reduce_s`` seconds the same group's links spend
    on the per-backward gradient reduce-scatters. With the other strategies the updated
    shard is all-gathered once after the step."""
    gathers = [
        group_collective_s(
            profile, "all_gather", cost.dense_params * dense_bytes, placements["dp-cp"]
        )
        + group_collective_s(
            profile, "all_gather", cost.expert_params * expert_bytes, placements["edp"]
        )
        for cost, (dense_bytes, expert_bytes) in zip(chunks, gather_bytes, strict=True)
    ]
    if plan.data_parallel_sharding_strategy != "optim_grads_params":
        return sum(gathers) if optimizer_sharded(plan) else 0.0
    passes = [t for t in row if t.action.phase in ("F", "B")]
    per_chunk = [
        ChunkGather(
            gather_s=gather_s,
            num_layers=layers,
            num_passes=sum(
                1.0 if t.action.phase == "F" else backward_sweeps
                for t in passes
                if t.action.chunk == chunk
            ),
        )
        for chunk, (gather_s, layers) in enumerate(zip(gathers, layers_per_chunk, strict=True))
    ]
    compute_s = sum(t.end_s - t.start_s for t in passes)
    return fsdp_param_gather_exposed_s(chunks=per_chunk, compute_s=max(compute_s - reduce_s, 0.0))
