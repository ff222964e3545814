"""The event simulator: one training iteration of a plan, rank by rank, phase by phase.

Order of work, following Megatron-LM (megatron-facts.md §3, §5):

1. Chunk costs: each (stage, chunk) forward/backward per microbatch is the sum of its
   layers' `costmodel.layer_costs` passes (plus the embedding on virtual stage 0 and the
   output layer and loss on the last), with recompute added to the backward.
2. The schedule (`costmodel.schedules.schedule_actions`) is timed by
   `costmodel.pipeline_sim.simulate_pipeline`. Pipeline sends carry [s/cp (/tp with SP),
   b, h] activations (§3.4): 1F1B sends are blocking (`batch_isend_irecv`), so they extend
   the sender's action; interleaved sends are asynchronous (`overlap_p2p_comm`, the
   default), so they only delay the receiver, unless `ExecutionOptions.overlap_p2p` is off
   (Megatron-LM 2021: blocking sends, optionally scattered over the tp ranks' NICs).
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

With `ExecutionOptions.runtime` ``torch`` (paraplan's executor) steps
1, 3 and 4 come from `costmodel.native_sim` instead, and the job runs in fp32
(`costmodel.execution.executed_job`).

The breakdown is taken on the critical stage (the one that finishes its gradients last):
compute forward / backward / recompute, exposed TP / CP / EP communication, pipeline
sends (the delay they add over a run with free sends), the bubble (remaining idle time),
exposed gradient and parameter communication, and the optimizer step. The phases sum to
the iteration time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from costmodel import compute as ops
from costmodel.activations import recomputed_layers
from costmodel.collectives import collective_time_s, p2p_time_s
from costmodel.execution import (
    DEFAULT_OPTIONS,
    ExecutionOptions,
    executed_job,
    framework_profile,
)
from costmodel.layer_costs import (
    ZERO,
    CommGroups,
    PassCost,
    embedding_cost,
    layer_cost,
    logits_cost,
)
from costmodel.pipeline_sim import PipelineTiming, TimedAction, simulate_pipeline
from costmodel.schedules import (
    Action,
    ChunkPosition,
    chunk_layers,
    plan_pipeline_chunks,
    schedule_actions,
    virtual_stage,
)
from costmodel.topology import GroupPlacement, PlanPlacements, plan_placements
from profiles.schema import HardwareProfile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class Breakdown:
    """Where the iteration time goes on the critical stage (seconds; sums to the total)."""

    compute_forward_s: float
    """Forward kernels (layers, embedding, output layer and loss)."""
    compute_backward_s: float
    """Backward kernels (dgrad and wgrad)."""
    compute_recompute_s: float
    """Forward kernels rerun by activation recompute."""
    bubble_s: float
    """Idle pipeline time with free pipeline sends."""
    tp_exposed_s: float
    """Tensor-parallel collectives the compute stream waits for."""
    cp_exposed_s: float
    """Context-parallel K/V exchange not hidden under attention."""
    ep_exposed_s: float
    """Expert-parallel dispatch/combine."""
    pp_exposed_s: float
    """Delay pipeline sends add (blocking sends and arrival waits)."""
    dp_exposed_s: float
    """Gradient reduction and parameter all-gather not hidden under compute."""
    optimizer_s: float
    """The optimizer step."""

    @property
    def total_s(self) -> float:
        """Sum of the phases: the iteration time."""
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        """Phase name (without the ``_s`` suffix) to seconds."""
        return {f.name.removesuffix("_s"): getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkCost:
    """One model chunk of one stage, one microbatch."""

    forward: PassCost
    """Forward pass of the chunk's layers (with embedding / output layer where held)."""
    backward: PassCost
    """Backward pass, without recompute."""
    recompute: PassCost
    """Forward work rerun before the backward."""
    dense_params: float
    """Parameters on one rank reduced over DP x CP."""
    expert_params: float
    """Routed-expert parameters on one rank reduced over expert DP."""

    @property
    def backward_with_recompute(self) -> PassCost:
        """What a backward action runs: recompute, then the backward."""
        return self.recompute.plus(self.backward)


@dataclass(frozen=True, kw_only=True, slots=True)
class StageTail:
    """Per-stage work after the pipeline."""

    pipeline_end_s: float
    """End of the stage's last backward."""
    grads_done_s: float
    """End of gradient reduction, embedding and norm all-reduces."""
    norm_allreduce_s: float
    """SP norm-gradient all-reduce over TP (part of grads_done_s)."""
    optimizer_s: float
    """Optimizer step on the rank's shard."""
    param_gather_s: float
    """Exposed parameter all-gather."""
    dp_events: tuple[tuple[str, float, float, float], ...]
    """(name, start, duration, bytes) of each gradient collective, for the timeline."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IterationSimulation:
    """The simulated iteration: time, breakdown, and the inputs of the timeline."""

    iteration_time_s: float
    """End of the slowest rank's optimizer step (and exposed parameter gather)."""
    breakdown: Breakdown
    """Phases on the critical stage."""
    critical_stage: int
    """Stage whose gradients finish last."""
    timing: PipelineTiming
    """The timed schedule (with pipeline sends)."""
    chunks: tuple[tuple[ChunkCost, ...], ...]
    """Per stage, per chunk costs."""
    tails: tuple[StageTail, ...]
    """Per stage, post-pipeline work."""
    sync_s: float
    """When every stage has its gradients (optimizer start)."""
    send_s: tuple[float, ...]
    """Pipeline send time across each stage boundary (index s: stage s to s+1)."""
    blocking_sends: bool
    """True when sends extend the sender's action (1F1B, or interleaved without
    `ExecutionOptions.overlap_p2p`)."""
    runtime: str = "megatron"
    """`ExecutionOptions.runtime` the iteration was simulated for."""


def comm_groups(placements: PlanPlacements) -> CommGroups:
    """The layer-level groups of a plan's placements."""
    return CommGroups(
        tp=placements["tp"], cp=placements["cp"], ep=placements["ep"], etp=placements["etp"]
    )


def _chunk_params(
    model: ModelSpec, plan: ParallelPlan, layers: range, first: bool, last: bool
) -> tuple[float, float]:
    """(dense, expert) parameters one rank holds for one chunk: `costmodel.memory.stage_params`
    split per chunk, the embedding on the first virtual stage and the output layer on the
    last."""
    counts = count_params(model)
    dense = expert = 0.0
    for i in layers:
        layer = counts.layers[i]
        dense += (layer.attention + layer.mlp) / plan.tp + layer.norms + layer.router
        expert += layer.routed_experts / (plan.ep * plan.expert_tp)
    matrix = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
    if first:
        dense += matrix + (counts.embedding - model.vocab_size * model.hidden_size)
    if last:
        dense += counts.final_norm
        if not model.tied_embeddings or plan.pp > 1:
            dense += matrix
    return dense, expert


def chunk_costs(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[tuple[ChunkCost, ...], ...]:
    """Per stage, per chunk: the microbatch costs of its layers (step 1 of the module)."""
    grad_bytes = ops.element_bytes(job.precision)
    kinds = {
        k: layer_cost(model, job, plan, profile, is_moe=k, groups=groups, options=options)
        for k in set(model.moe_layer_mask())
    }
    emb = embedding_cost(model, job, plan, profile, groups)
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
        dense, expert = _chunk_params(model, plan, at.layers, at.first, at.last)
        if not options.grad_accumulation_fusion:
            accumulate = ops.grad_accumulation_time_s(
                profile, dense + expert, grad_bytes, options.main_grad_bytes
            )
            bwd = bwd.plus(PassCost(compute_s=accumulate))
        return ChunkCost(
            forward=fwd, backward=bwd, recompute=rec, dense_params=dense, expert_params=expert
        )

    grid = plan_pipeline_chunks(model, plan)
    return tuple(tuple(cost(at) for at in row) for row in grid)


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
    sp = plan.tp if plan.sequence_parallel and plan.tp > 1 else 1
    size = (
        plan.micro_batch_size
        * job.seq_length
        / plan.cp
        * model.hidden_size
        / sp
        * ops.element_bytes(job.precision)
    )
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


def _time_schedule(
    plan: ParallelPlan,
    chunks: tuple[tuple[ChunkCost, ...], ...],
    send_s: tuple[float, ...],
    m: int,
    *,
    with_sends: bool,
    blocking: bool,
) -> PipelineTiming:
    """Time the schedule. Blocking sends extend the sending action: a forward sends to the
    next virtual stage (none from the last), a backward to the previous one (none from
    virtual stage 0), the wrap-around hop being send_s[pp - 1]. Asynchronous sends only
    delay the receiver."""
    schedule = schedule_actions(plan.pp, plan.vpp, m)
    last_virtual = plan.pp * plan.vpp - 1
    durations: dict[tuple[int, int, str], float] = {}  # (stage, chunk, phase) -> seconds
    for stage, row in enumerate(chunks):
        for chunk, cost in enumerate(row):
            forward, backward = cost.forward.duration_s, cost.backward_with_recompute.duration_s
            if with_sends and blocking:
                v = virtual_stage(stage, chunk, plan.pp)
                forward += send_s[stage] if v < last_virtual else 0.0
                backward += send_s[(stage - 1) % plan.pp] if v > 0 else 0.0
            durations[stage, chunk, "F"] = forward
            durations[stage, chunk, "B"] = backward

    def compute_s(action: Action) -> float:
        return durations[action.stage, action.chunk, action.phase]

    def p2p_s(src: int, dst: int, phase: str) -> float:
        if not with_sends or blocking or plan.pp == 1:
            return 0.0
        return send_s[min(src, dst) % plan.pp]

    return simulate_pipeline(schedule, compute_s, p2p_s)


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


def _grad_events(
    profile: HardwareProfile,
    plan: ParallelPlan,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    row: tuple[TimedAction, ...],
    placements: PlanPlacements,
    grad_bytes: int,
) -> list[tuple[float, str, float, float]]:
    """(ready time, name, duration, bytes) of every gradient bucket of one stage
    (``grad_bytes`` per element, `ExecutionOptions.main_grad_bytes`)."""
    op = "reduce_scatter" if plan.distributed_optimizer else "all_reduce"
    end = row[-1].end_s
    events = []
    for chunk, cost in enumerate(chunks):
        bucketed = plan.overlap_grad_reduce and stage == 0 and chunk == 0
        bucket = plan.bucket_size_params() if bucketed else None
        last = _last_backward(row, chunk)
        for kind, params, group in (
            ("dense", cost.dense_params, placements["dp-cp"]),
            ("expert", cost.expert_params, placements["edp"]),
        ):
            parts = _buckets(params, bucket) if group.size > 1 else []
            done = 0.0
            for j, part in enumerate(parts):
                done += part
                ready = last.start_s + (last.end_s - last.start_s) * done / params
                size = part * grad_bytes
                events.append(
                    (
                        ready if plan.overlap_grad_reduce else end,
                        f"dp {op} c{chunk} {kind} bucket {j}",
                        _group_time(profile, op, size, group),
                        size,
                    )
                )
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
    """The optimizer step of one rank of a stage (`costmodel.compute.optimizer_step_time_s`);
    about 8 parameter tensors per layer (weights, biases, norms) plus 2 per local expert."""
    dense = sum(c.dense_params for c in chunks)
    expert = sum(c.expert_params for c in chunks)
    if plan.distributed_optimizer:
        shard = dense / placements["dp-cp"].size + expert / placements["edp"].size
    else:
        shard = dense + expert
    layers = sum(len(chunk_layers(model, plan, stage, c)) for c in range(plan.vpp))
    local_experts = model.num_experts // plan.ep if model.is_moe else 0
    tensors = layers * (8 + 2 * local_experts) + 2
    return ops.optimizer_step_time_s(
        profile,
        shard_params=shard,
        local_params=dense + expert,
        mixed_precision=job.precision != "fp32",
        num_tensors=tensors,
        loss_scaling=options.loss_scaling,
        main_grad_bytes=options.main_grad_bytes,
    )


def _param_gather_s(
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    placements: PlanPlacements,
    row: tuple[TimedAction, ...],
) -> float:
    """Exposed all-gather of the updated bf16 parameters (distributed optimizer only).

    Without `overlap_param_gather` every bucket is gathered after the optimizer step. With
    it, the gathers run in forward order on their own stream from the start of the next
    iteration (Megatron prefetches chunk 0 and launches chunk k+1 when chunk k starts,
    megatron-facts.md §5.3), and bucket i is needed when the first forward of its chunk
    reaches its layers; the exposed time is the largest lateness over the buckets.
    """
    if not plan.distributed_optimizer:
        return 0.0
    weight_bytes = 4 if job.precision == "fp32" else 2
    needs: list[tuple[float, float]] = []  # (needed at, gather seconds), forward order
    for chunk, cost in enumerate(chunks):
        bucketed = plan.overlap_grad_reduce and stage == 0 and chunk == 0
        bucket = plan.bucket_size_params() if bucketed else None
        first = next(t for t in row if t.action.phase == "F" and t.action.chunk == chunk)
        for params, group in (
            (cost.dense_params, placements["dp-cp"]),
            (cost.expert_params, placements["edp"]),
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


def _stage_tail(
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
    clock, dp_events = 0.0, []
    events = _grad_events(profile, plan, stage, chunks, row, placements, grad_bytes)
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
        param_gather_s=_param_gather_s(job, plan, profile, stage, chunks, placements, row),
        dp_events=tuple(dp_events),
    )


def _stage_sums(
    row: tuple[TimedAction, ...], chunks: tuple[ChunkCost, ...]
) -> tuple[float, float, float, PassCost]:
    """(forward compute, backward compute, recompute compute, all passes summed)."""
    fwd = bwd = rec = 0.0
    total = ZERO
    for timed in row:
        cost = chunks[timed.action.chunk]
        if timed.action.phase == "F":
            fwd += cost.forward.compute_s
            total = total.plus(cost.forward)
        else:
            bwd += cost.backward.compute_s
            rec += cost.recompute.compute_s
            total = total.plus(cost.backward_with_recompute)
    return fwd, bwd, rec, total


def _breakdown(
    sim_rows: tuple[PipelineTiming, PipelineTiming],
    chunks: tuple[tuple[ChunkCost, ...], ...],
    tails: tuple[StageTail, ...],
    stage: int,
    tail_stage: int,
) -> Breakdown:
    with_sends, free = sim_rows
    fwd, bwd, rec, total = _stage_sums(with_sends.actions[stage], chunks[stage])
    end_with = with_sends.actions[stage][-1].end_s
    end_free = free.actions[stage][-1].end_s
    busy = fwd + bwd + rec + total.exposed_comm_s
    tail, last = tails[stage], tails[tail_stage]
    return Breakdown(
        compute_forward_s=fwd,
        compute_backward_s=bwd,
        compute_recompute_s=rec,
        bubble_s=max(0.0, end_free - busy),
        tp_exposed_s=total.tp_exposed_s + tail.norm_allreduce_s,
        cp_exposed_s=total.cp_exposed_s,
        ep_exposed_s=total.ep_exposed_s,
        pp_exposed_s=max(0.0, end_with - end_free),
        dp_exposed_s=tail.grads_done_s - tail.norm_allreduce_s - end_with + last.param_gather_s,
        optimizer_s=last.optimizer_s,
    )


def _native_tail(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    placements: PlanPlacements,
    stage: int,
    row: tuple[TimedAction, ...],
) -> StageTail:
    from costmodel.native_sim import native_stage_tail

    return native_stage_tail(model, plan, profile, placements, stage, row)


def simulate_iteration(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    gpus_per_node: int | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> IterationSimulation:
    """Simulate one iteration of ``plan`` (steps 1-4 of the module docstring).

    The plan is assumed valid (`specs.rules.check_plan`); a global batch that gives no
    microbatch, or an interleaved schedule whose microbatches are not a multiple of pp,
    raises `SpecError`.
    """
    m = plan.num_microbatches(job.global_batch_size)
    if m < 1:
        raise SpecError(
            f"global_batch_size ({job.global_batch_size}) gives no microbatch for "
            f"micro_batch_size ({plan.micro_batch_size}) x dp ({plan.dp}); raise the batch"
        )
    profile = framework_profile(profile, options)
    placements = plan_placements(profile, plan, gpus_per_node)
    native = options.runtime == "torch"
    job = executed_job(job, options, profile)
    if native:
        from costmodel.native_sim import native_chunk_costs

        groups = comm_groups(placements)
        chunks = native_chunk_costs(model, job, plan, profile, groups, placements)
    else:
        chunks = chunk_costs(model, job, plan, profile, comm_groups(placements), options)
    send_s = pipeline_send_s(model, job, plan, profile, placements, options)
    if native and plan.pp > 1:
        from costmodel.host_rates import host_rates

        excess = host_rates(profile).excess_s("send_recv", 2)
        send_s = tuple(s + excess for s in send_s)
    blocking = blocking_sends(plan, options)
    timed = _time_schedule(plan, chunks, send_s, m, with_sends=True, blocking=blocking)
    free = (
        _time_schedule(plan, chunks, send_s, m, with_sends=False, blocking=blocking)
        if any(send_s)
        else timed
    )
    tails = tuple(
        _native_tail(model, plan, profile, placements, s, timed.actions[s])
        if native
        else _stage_tail(
            model, job, plan, profile, placements, s, chunks[s], timed.actions[s], options
        )
        for s in range(plan.pp)
    )
    critical = max(range(plan.pp), key=lambda s: (tails[s].grads_done_s, -s))
    tail_stage = max(range(plan.pp), key=lambda s: tails[s].optimizer_s + tails[s].param_gather_s)
    sync_s = tails[critical].grads_done_s
    last = tails[tail_stage]
    return IterationSimulation(
        iteration_time_s=sync_s + last.optimizer_s + last.param_gather_s,
        breakdown=_breakdown((timed, free), chunks, tails, critical, tail_stage),
        critical_stage=critical,
        timing=timed,
        chunks=chunks,
        tails=tails,
        sync_s=sync_s,
        send_s=send_s,
        blocking_sends=blocking,
        runtime=options.runtime,
    )
