"""The event loop: one training iteration of a plan, rank by rank, phase by phase, for
any runtime (`costmodel.runtime.RuntimeModel`).

1. Chunk costs: the runtime prices each (stage, chunk) forward, backward and recompute per
   microbatch (`costmodel.passes.ChunkCost`) and the pipeline send across each stage
   boundary.
2. The schedule (`costmodel.schedules.schedule_actions`, Megatron-LM's action order, which
   torch.distributed.pipelining's 1F1B and interleaved 1F1B share) is timed by
   `costmodel.pipeline_sim.simulate_pipeline`, twice: with the sends and with free sends.
   Blocking sends extend the sending action; asynchronous ones only delay the receiver
   (the runtime says which, `RuntimeModel.blocking_sends`), and an interleaved schedule's
   warmup and cooldown sends may hold the sender as well (`RuntimeModel.blocking_flush_sends`).
3. After the pipeline, the runtime prices each stage's tail (`costmodel.passes.StageTail`):
   gradient reductions, the finalize all-reduces, the optimizer step and any exposed
   parameter all-gather.
4. The optimizer step waits for every stage (the gradient-norm all-reduce for clipping is a
   barrier): the iteration ends at the latest gradient completion plus the longest
   optimizer step and parameter gather.

The breakdown is taken on the critical stage (the one that finishes its gradients last):
compute forward / backward / recompute, exposed TP / CP / EP communication, pipeline
sends (the delay they add over a run with free sends), the bubble (remaining idle time),
exposed gradient and parameter communication, and the optimizer step. The phases sum to
the iteration time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from costmodel.passes import ZERO, ChunkCost, PassCost, StageTail
from costmodel.pipeline_sim import PipelineTiming, TimedAction, simulate_pipeline
from costmodel.runtime import RuntimeModel
from costmodel.scale_up import PROFILE_PACKING, RankPacking
from costmodel.schedules import Action, flush_actions, schedule_actions, virtual_stage
from costmodel.topology import plan_placements
from profiles.schema import HardwareProfile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
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
    blocking_flush_sends: bool = False
    """True when the sends of an interleaved schedule's warmup forwards and cooldown
    backwards hold the sender until they complete (Megatron-core's default; the steady
    state's sends stay asynchronous)."""
    runtime: str = "megatron"
    """Name of the runtime the iteration was simulated for
    (`costmodel.execution_rules.RUNTIMES`)."""


def _time_schedule(
    plan: ParallelPlan,
    chunks: tuple[tuple[ChunkCost, ...], ...],
    send_s: tuple[float, ...],
    m: int,
    *,
    with_sends: bool,
    blocking: bool,
    flush_blocking: bool = False,
) -> PipelineTiming:
    """Time the schedule. Blocking sends extend the sending action: a forward sends to the
    next virtual stage (none from the last), a backward to the previous one (none from
    virtual stage 0), the wrap-around hop being send_s[pp - 1]. Asynchronous sends only
    delay the receiver. With ``flush_blocking`` (interleaved schedules only) the sends of
    the warmup forwards and cooldown backwards are asynchronous for the receiver but hold
    the sender's stage until they complete (`RuntimeModel.blocking_flush_sends`)."""
    schedule = schedule_actions(plan.pp, plan.vpp, m)
    last_virtual = plan.pp * plan.vpp - 1

    def outgoing_s(stage: int, chunk: int, phase: str) -> float:
        """The send an action ends with: a forward to the next virtual stage, a backward
        to the previous one."""
        v = virtual_stage(stage, chunk, plan.pp)
        if phase == "F":
            return send_s[stage] if v < last_virtual else 0.0
        return send_s[(stage - 1) % plan.pp] if v > 0 else 0.0

    durations: dict[tuple[int, int, str], float] = {}  # (stage, chunk, phase) -> seconds
    for stage, row in enumerate(chunks):
        for chunk, cost in enumerate(row):
            forward, backward = cost.forward.duration_s, cost.backward_with_recompute.duration_s
            if with_sends and blocking:
                forward += outgoing_s(stage, chunk, "F")
                backward += outgoing_s(stage, chunk, "B")
            durations[stage, chunk, "F"] = forward
            durations[stage, chunk, "B"] = backward

    def compute_s(action: Action) -> float:
        return durations[action.stage, action.chunk, action.phase]

    def p2p_s(src: int, dst: int, phase: str) -> float:
        if not with_sends or blocking or plan.pp == 1:
            return 0.0
        return send_s[min(src, dst) % plan.pp]

    if not (with_sends and flush_blocking and not blocking and plan.pp > 1 and plan.vpp > 1):
        return simulate_pipeline(schedule, compute_s, p2p_s)
    flush = set(flush_actions(schedule, plan.pp, plan.vpp, m))

    def hold_s(action: Action) -> float:
        if action not in flush:
            return 0.0
        return outgoing_s(action.stage, action.chunk, action.phase)

    return simulate_pipeline(schedule, compute_s, p2p_s, hold_s)


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


def simulate_iteration(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    runtime: RuntimeModel,
    packing: RankPacking = PROFILE_PACKING,
) -> IterationSimulation:
    """Simulate one iteration of ``plan`` as ``runtime`` runs it (module docstring), its
    ranks packed on servers and NVLink segments as ``packing`` (`RankPacking.of` a
    `ClusterSpec`; the profile's servers and the launcher's segment by default).

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
    profile = runtime.priced_profile(profile)
    placements = plan_placements(profile, plan, packing)
    job = runtime.executed_job(job, profile)
    chunks = runtime.chunk_costs(model, job, plan, profile, placements)
    send_s = runtime.send_s(model, job, plan, profile, placements)
    blocking = runtime.blocking_sends(plan)
    flush_blocking = runtime.blocking_flush_sends(plan)
    timed = _time_schedule(
        plan, chunks, send_s, m, with_sends=True, blocking=blocking, flush_blocking=flush_blocking
    )
    free = (
        _time_schedule(plan, chunks, send_s, m, with_sends=False, blocking=blocking)
        if any(send_s)
        else timed
    )
    tails = tuple(
        runtime.stage_tail(model, job, plan, profile, placements, s, chunks[s], timed.actions[s])
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
        blocking_flush_sends=flush_blocking,
        runtime=runtime.name,
    )
