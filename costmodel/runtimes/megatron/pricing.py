"""The ``megatron`` runtime's part of the event simulator (`costmodel.iteration`): one
training iteration of a plan, rank by rank, phase by phase.

Order of work, following Megatron-LM (megatron-facts.md §3, §5):

1. Chunk costs: each (stage, chunk) forward/backward per microbatch is the sum of its
   layers' `costmodel.runtimes.megatron.layer_costs` passes (plus the embedding on virtual
   stage 0 and the output layer and loss on the last), with recompute added to the backward.
2. The schedule (`costmodel.schedules.schedule_actions`) is timed by
   `costmodel.pipeline_sim.simulate_pipeline`. Pipeline sends carry [s/cp (/tp with SP),
   b, h] activations (§3.4): 1F1B sends are blocking (`batch_isend_irecv`), so they extend
   the sender's action; interleaved sends are asynchronous (`overlap_p2p_comm`, the
   default), so they only delay the receiver, unless `ExecutionOptions.overlap_p2p` is off
   (Megatron-LM 2021: blocking sends, optionally scattered over the tp ranks' NICs); the
   warmup forwards and cooldown backwards of an interleaved schedule send with blocking
   calls even then (`blocking_flush_sends`).
3. Gradient reduction per bucket over DP x CP (experts over expert-DP): reduce-scatter with
   the distributed optimizer, else all-reduce, of the main gradients (fp32 by default,
   `ExecutionOptions.main_grad_bytes`). With
   `overlap_grad_reduce` a bucket is launched once the last microbatch's backward has
   produced it (buckets fill in backward order during that action); Megatron buckets only
   the first chunk of the first stage and keeps one bucket per chunk elsewhere (§5.1).
   Without it, everything is reduced after the pipeline. Tied embeddings add the
   first/last-stage all-reduce; sequence parallelism adds the all-reduce of norm gradients
   over TP.
4. The optimizer step waits for every stage (the gradient-norm all-reduce for clipping is a
   barrier), then runs on each rank's shard; with the distributed optimizer the updated
   bf16 parameters are all-gathered, after the step or, with `overlap_param_gather`, under
   the next iteration's forwards (exposed as far as a bucket arrives after the forward
   that needs it).

Steps 1, 3 and 4 are priced here (`chunk_costs`, `pipeline_send_s`, `blocking_sends`,
`blocking_flush_sends`, `stage_tail`); the
event loop (`costmodel.iteration`) times step 2 and takes the breakdown below.

The breakdown is taken on the critical stage (the one that finishes its gradients last):
compute forward / backward / recompute, exposed TP / CP / EP communication, pipeline
sends (the delay they add over a run with free sends), the bubble (remaining idle time),
exposed gradient and parameter communication, and the optimizer step. The phases sum to
the iteration time.
"""

from __future__ import annotations

import math

from costmodel import compute as ops
from costmodel.activations import recomputed_layers
from costmodel.collectives import collective_time_s, p2p_time_s, pipeline_send_bytes
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.memory import plan_adam_state
from costmodel.optimizer_muon import is_muon, layerwise_gather_s
from costmodel.optimizer_offload import host_optimizer_step_s, offloaded_step_s
from costmodel.optimizer_passes import (
    grad_accumulation_time_s,
    grad_buffer_passes_time_s,
    optimizer_step_time_s,
)
from costmodel.passes import ZERO, ChunkCost, CommGroups, PassCost, StageTail
from costmodel.pipeline_sim import TimedAction
from costmodel.rank_params import chunk_params
from costmodel.runtimes.megatron.fp8_scaling import with_delayed_scaling
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.megatron_fsdp import (
    ChunkGather,
    fsdp_param_gather_exposed_s,
    grads_reduce_scattered,
    grads_reduced_every_backward,
    optimizer_sharded,
)
from costmodel.runtimes.megatron.muon_step import muon_optimizer_step_s
from costmodel.runtimes.megatron.vocab_costs import embedding_cost, logits_cost
from costmodel.schedules import (
    ChunkPosition,
    chunk_layers,
    plan_pipeline_chunks,
    plan_stage_chunks,
)
from costmodel.topology import GroupPlacement, PlanPlacements
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan


def chunk_costs(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[tuple[ChunkCost, ...], ...]:
    """Per stage, per chunk: the microbatch costs of its layers (step 1 of the module). In
    fp8 jobs under the ``delayed`` recipe (`ExecutionOptions.fp8_recipe`), each chunk's
    forward and backward also reduce the stage's amaxes over ``groups.tp_dp_cp`` and update
    the scales (`costmodel.runtimes.megatron.fp8_scaling.with_delayed_scaling`)."""
    grad_bytes = ops.element_bytes(job.precision)
    kinds = {
        k: layer_cost(model, job, plan, profile, is_moe=k, groups=groups, options=options)
        for k in set(model.moe_layer_mask())
    }
    emb = embedding_cost(model, job, plan, profile, groups, options)
    out = logits_cost(model, job, plan, profile, groups, options)
    mask = model.moe_layer_mask()
    redo = recomputed_layers(model, plan) if plan.recompute == "full" else None

    def cost(at: ChunkPosition) -> ChunkCost:
        fwd = bwd = rec = ZERO
        for i in at.layers:
            layer = kinds[mask[i]]
            fwd, bwd = fwd.plus(layer.forward), bwd.plus(layer.backward)
            if redo is None or i in redo:
                rec = rec.plus(layer.recompute)
        for _ in range(at.mtp_layers):  # a decoder layer plus its own output layer and loss
            layer = kinds[mask[-1]]
            fwd = fwd.plus(layer.forward).plus(out[0])
            bwd = bwd.plus(layer.backward).plus(out[1])
            rec = rec.plus(layer.recompute)
        if at.first:
            fwd, bwd = fwd.plus(emb[0]), bwd.plus(emb[1])
        if at.last:
            fwd, bwd = fwd.plus(out[0]), bwd.plus(out[1])
        held = chunk_params(
            model, plan, at.layers, first=at.first, last=at.last, mtp_layers=at.mtp_layers
        )
        dense, expert = held.dense, held.expert
        if not options.grad_accumulation_fusion:
            accumulate = grad_accumulation_time_s(
                profile, dense + expert, grad_bytes, options.main_grad_bytes
            )
            bwd = bwd.plus(PassCost(compute_s=accumulate))
        return ChunkCost(
            forward=fwd, backward=bwd, recompute=rec, dense_params=dense, expert_params=expert
        )

    grid = plan_pipeline_chunks(model, plan)
    costs = tuple(tuple(cost(at) for at in row) for row in grid)
    if job.precision != "fp8" or options.fp8_recipe != "delayed":
        return costs
    return tuple(
        with_delayed_scaling(row, at, model, profile, ep=plan.ep, group=groups.tp_dp_cp)
        for row, at in zip(costs, grid, strict=True)
    )


def pipeline_send_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    placements: PlanPlacements,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[float, ...]:
    """Seconds to send one microbatch's activation across each stage boundary (§3.4), the
    last entry from the last stage back to the first (interleaved schedules).

    With `ExecutionOptions.pipeline_scatter_gather` and no sequence parallelism, each tp
    rank sends 1/tp of the tensor over its own link and the receiving ranks all-gather it
    over their tensor-parallel group (Narayanan et al. 2021 §4.1)."""
    if plan.pp == 1:
        return (0.0,)
    size = pipeline_send_bytes(model, job, plan)
    sp = plan.tp if plan.sequence_parallel and plan.tp > 1 else 1
    if options.pipeline_scatter_gather and sp == 1 and plan.tp > 1:
        gather = collective_time_s(profile, "all_gather", size, placements["tp"])
        return tuple(
            p2p_time_s(profile, size / plan.tp, intra=intra) + gather
            for intra in placements.pp_hop_intra
        )
    return tuple(p2p_time_s(profile, size, intra=intra) for intra in placements.pp_hop_intra)


def blocking_sends(plan: ParallelPlan, options: ExecutionOptions = DEFAULT_OPTIONS) -> bool:
    """True when pipeline sends extend the sending action: always under 1F1B (blocking
    `batch_isend_irecv`), and for interleaved schedules without `overlap_p2p`."""
    return plan.pp > 1 and (plan.vpp == 1 or not options.overlap_p2p)


def blocking_flush_sends(plan: ParallelPlan, options: ExecutionOptions = DEFAULT_OPTIONS) -> bool:
    """True for interleaved schedules with asynchronous sends (`overlap_p2p`): their warmup
    forwards and cooldown backwards still send with blocking calls.

    Megatron-core `forward_backward_pipelining_with_interleaving` overlaps the pipeline
    sends of the steady state only: unless ``overlap_p2p_comm_warmup_flush`` is set (default
    False, ``--overlap-p2p-communication-warmup-flush``), each warmup forward ends with a
    blocking ``send_forward_recv_forward`` and each cooldown backward with a blocking
    ``send_backward_recv_backward``, so the sending stage waits for the transfer. Releases
    before the tunable schedule of 2024-11 (core_r0.8.0) send the cooldown the same way and
    post each warmup send asynchronously but wait for it at the top of the next warmup
    iteration, before its forward: the stage is held just as long."""
    return plan.pp > 1 and plan.vpp > 1 and options.overlap_p2p


def _group_time(profile: HardwareProfile, op: str, size: float, group: GroupPlacement) -> float:
    return collective_time_s(profile, op, size, group) if group.size > 1 else 0.0


def _buckets(params: float, bucket: float | None) -> list[float]:
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


def _grad_events(
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
            parts = _buckets(params, bucket) if group.size > 1 else []
            done = 0.0
            for j, part in enumerate(parts):
                done += part
                ready = last.start_s + (last.end_s - last.start_s) * done / params
                size = part * grad_bytes
                events.append(
                    (
                        ready if overlapped else end,
                        f"dp {op} c{chunk} {kind} bucket {j}",
                        _group_time(profile, op, size, group),
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
            seconds = _group_time(profile, "reduce_scatter", size, group)
            for t in backwards:
                mb = t.action.microbatch
                for j in range(pieces):
                    ready = t.start_s + (t.end_s - t.start_s) * (j + 1) / pieces
                    name = f"dp reduce_scatter c{chunk} mb{mb} {kind} layer {j}"
                    events.append((ready, name, seconds, size))
    return sorted(events, key=lambda e: e[0])


def _stage_norm_params(model: ModelSpec, plan: ParallelPlan, stage: int) -> float:
    """Norm parameters of a stage: replicated over TP, all-reduced there under SP."""
    counts = count_params(model)
    total = sum(
        counts.layers[i].norms
        for chunk in range(plan.vpp)
        for i in chunk_layers(model, plan, stage, chunk)
    )
    return total + (counts.final_norm if stage == plan.pp - 1 else 0)


def _optimizer_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    placements: PlanPlacements,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> float:
    """The optimizer step of one rank of a stage
    (`costmodel.optimizer_passes.optimizer_step_time_s`); about 8 parameter tensors per
    layer (weights, biases, norms) plus 2 per local expert.
    With it, the data-parallel wrapper's passes over the gradient buffer before its
    reduction (`costmodel.optimizer_passes.grad_buffer_passes_time_s`: the division by the
    data-parallel size when the group has more than one rank, the NaN check with
    `ExecutionOptions.grad_nan_check`), which occupy the same compute stream once per
    iteration. Adam's state is the options' (`costmodel.memory.plan_adam_state`: the
    default fp32 state under CPU offload). With optimizer CPU offload
    (`ExecutionOptions.optimizer_cpu_offload_fraction`) the offloaded share of the shard
    steps on the host beside the device's passes (`costmodel.optimizer_offload`)."""
    dense = sum(c.dense_params for c in chunks)
    expert = sum(c.expert_params for c in chunks)
    if optimizer_sharded(plan):
        shard = dense / placements["dp-cp"].size + expert / placements["edp"].size
    else:
        shard = dense + expert
    layers = sum(len(chunk_layers(model, plan, stage, c)) for c in range(plan.vpp))
    local_experts = model.num_experts // plan.ep if model.is_moe else 0
    tensors = layers * (8 + 2 * local_experts) + 2
    offloaded = options.optimizer_cpu_offload_fraction * shard
    step_s = optimizer_step_time_s(
        profile,
        shard_params=shard,
        local_params=dense + expert,
        mixed_precision=job.precision != "fp32",
        num_tensors=tensors,
        loss_scaling=options.loss_scaling,
        main_grad_bytes=options.main_grad_bytes,
        state=plan_adam_state(job, plan, options.optimizer_precision, options.fp8_weight_storage),
        offloaded_params=offloaded,
    )
    if offloaded > 0:
        host_s = host_optimizer_step_s(
            profile, offloaded, overlap=options.overlap_cpu_optimizer_d2h_h2d
        )
        step_s = offloaded_step_s(step_s, host_s)
    if is_muon(job):  # Muon on the 2-D weights, Adam on the rest (costmodel.optimizer_muon)
        grads = options.main_grad_bytes
        step_s = muon_optimizer_step_s(
            model, job, plan, profile, stage, dense=dense, expert=expert, main_grad_bytes=grads
        )
    buffer_s = sum(
        grad_buffer_passes_time_s(
            profile,
            params,
            options.main_grad_bytes,
            scale=group.size > 1,
            nan_check=options.grad_nan_check,
        )
        for params, group in ((dense, placements["dp-cp"]), (expert, placements["edp"]))
    )
    return step_s + buffer_s


def _gather_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    stage: int,
    options: ExecutionOptions,
) -> tuple[tuple[float, float], ...]:
    """Mean bytes per (dense, expert) parameter of each chunk of ``stage`` in the
    parameter all-gather: the linear layers' weights at
    `costmodel.memory_allowances.Fp8WeightStorage.gather_bytes` (FP8 parameters), the rest (norms,
    router, embedding, output layer) at the job's weight size; routed experts are linear."""
    weight = 4.0 if job.precision == "fp32" else 2.0
    linear_bytes = options.fp8_weight_storage.gather_bytes(job)
    chunks = plan_stage_chunks(model, plan, stage)
    if linear_bytes == weight:
        return tuple((weight, weight) for _ in chunks)
    out = []
    for at in chunks:
        held = chunk_params(
            model, plan, at.layers, first=at.first, last=at.last, mtp_layers=at.mtp_layers
        )
        dense_linear = held.linear - held.expert
        dense = (weight * (held.dense - dense_linear) + linear_bytes * dense_linear) / max(
            held.dense, 1.0
        )
        out.append((dense, linear_bytes))
    return tuple(out)


def _param_gather_s(
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    placements: PlanPlacements,
    row: tuple[TimedAction, ...],
    layers_per_chunk: tuple[int, ...],
    gather_bytes: tuple[tuple[float, float], ...],
    reduce_s: float = 0.0,
) -> float:
    """Exposed all-gather of the updated parameters (distributed optimizer; Megatron-FSDP
    in `_fsdp_gather_s`, whose per-layer gathers share the group's links with ``reduce_s``
    seconds of per-backward gradient reduce-scatters), ``gather_bytes`` per (dense,
    expert) parameter of each chunk (`_gather_bytes`: bf16, or FP8 parameters).

    Without `overlap_param_gather` every bucket is gathered after the optimizer step. With
    it, the gathers run in forward order on their own stream from the start of the next
    iteration (Megatron prefetches chunk 0 and launches chunk k+1 when chunk k starts,
    megatron-facts.md §5.3), and bucket i is needed when the first forward of its chunk
    reaches its layers; the exposed time is the largest lateness over the buckets.
    """
    if plan.use_megatron_fsdp:
        return _fsdp_gather_s(
            plan, profile, chunks, placements, row, gather_bytes, layers_per_chunk, reduce_s
        )
    if not plan.distributed_optimizer:
        chunk_params = tuple((c.dense_params, c.expert_params) for c in chunks)
        groups = (placements["dp-cp"], placements["edp"])
        return layerwise_gather_s(profile, job, chunk_params, gather_bytes, *groups)
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
            parts = list(reversed(_buckets(params, bucket))) if group.size > 1 else []
            done = 0.0
            for part in parts:
                needed = first.start_s + (first.end_s - first.start_s) * done / params
                done += part
                seconds = _group_time(profile, "all_gather", part * weight_bytes, group)
                needs.append((needed, seconds))
    if not plan.overlap_param_gather:
        return sum(seconds for _, seconds in needs)
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
) -> float:
    """Megatron-FSDP: per-layer parameter all-gathers in every forward and backward pass
    under `optim_grads_params`, chunk by chunk with each chunk's own layer count
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_param_gather_exposed_s`); they hide
    behind the passes' compute less the ``reduce_s`` seconds the same group's links spend
    on the per-backward gradient reduce-scatters. With the other strategies the updated
    shard is all-gathered once after the step."""
    gathers = [
        _group_time(profile, "all_gather", cost.dense_params * dense_bytes, placements["dp-cp"])
        + _group_time(profile, "all_gather", cost.expert_params * expert_bytes, placements["edp"])
        for cost, (dense_bytes, expert_bytes) in zip(chunks, gather_bytes, strict=True)
    ]
    if plan.data_parallel_sharding_strategy != "optim_grads_params":
        return sum(gathers) if optimizer_sharded(plan) else 0.0
    passes = [t for t in row if t.action.phase in ("F", "B")]
    per_chunk = [
        ChunkGather(
            gather_s=gather_s,
            num_layers=layers,
            num_passes=sum(1 for t in passes if t.action.chunk == chunk),
        )
        for chunk, (gather_s, layers) in enumerate(zip(gathers, layers_per_chunk, strict=True))
    ]
    compute_s = sum(t.end_s - t.start_s for t in passes)
    return fsdp_param_gather_exposed_s(chunks=per_chunk, compute_s=max(compute_s - reduce_s, 0.0))


def stage_tail(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    placements: PlanPlacements,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    row: tuple[TimedAction, ...],
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> StageTail:
    """Gradient buckets on the stage's communication stream, then the finalize all-reduces
    (embedding, SP norms), the optimizer step and the parameter all-gather."""
    pipeline_end = row[-1].end_s
    grad_bytes = options.main_grad_bytes
    layers_per_chunk = tuple(
        len(c.layers) + c.mtp_layers for c in plan_stage_chunks(model, plan, stage)
    )
    clock, dp_events = 0.0, []
    events = _grad_events(
        profile, plan, stage, chunks, row, placements, grad_bytes, layers_per_chunk
    )
    for ready, name, duration, size in events:
        start = max(clock, ready)
        clock = start + duration
        dp_events.append((name, start, duration, size))
    done = max(pipeline_end, clock)
    if model.tied_embeddings and plan.pp > 1 and stage in (0, plan.pp - 1):
        size = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
        pair = GroupPlacement(
            axes="embedding",
            size=2,
            num_nodes=1 if placements["pp"].num_nodes == 1 else 2,
            num_domains=1 if placements["pp"].num_domains == 1 else 2,
            ranks_per_node=1,
            ranks_per_domain=1,
            nics_per_node=1,
        )
        duration = collective_time_s(profile, "all_reduce", size * grad_bytes, pair)
        dp_events.append(("embedding all_reduce", done, duration, size * grad_bytes))
        done += duration
    norm_s = 0.0
    if plan.sequence_parallel and plan.tp > 1:
        size = _stage_norm_params(model, plan, stage) * grad_bytes
        norm_s = collective_time_s(profile, "all_reduce", size, placements["tp"])
        done += norm_s
    return StageTail(
        pipeline_end_s=pipeline_end,
        grads_done_s=done,
        norm_allreduce_s=norm_s,
        optimizer_s=_optimizer_s(model, job, plan, profile, stage, chunks, placements, options),
        param_gather_s=_param_gather_s(
            job,
            plan,
            profile,
            stage,
            chunks,
            placements,
            row,
            layers_per_chunk=layers_per_chunk,
            gather_bytes=_gather_bytes(model, job, plan, stage, options),
            reduce_s=sum(e[2] for e in events) if grads_reduced_every_backward(plan) else 0.0,
        ),
        dp_events=tuple(dp_events),
    )
