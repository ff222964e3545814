"""The predicted `Timeline` of a simulated iteration (`costmodel.runtimes.megatron.pricing`).

One rank per pipeline stage is shown (tp, cp and dp index 0): every rank of a stage runs
the same work at the same time in the cost model, so the others are symmetric. Each
timed action is laid out as its compute, then the exposed TP, CP and EP communication,
then its pipeline send (inside the action when sends block: 1F1B, or interleaved without
`ExecutionOptions.overlap_p2p`); a communication event spans its whole duration,
so its hidden part overlaps the compute before it. Idle compute time becomes `bubble`
events; gradient buckets, the optimizer step and the exposed parameter all-gather follow
the pipeline.
"""

from __future__ import annotations

from costmodel.iteration import IterationSimulation
from costmodel.passes import PassCost
from costmodel.pipeline_sim import TimedAction
from costmodel.schedules import Action, virtual_stage
from specs.plan import ParallelPlan
from specs.timeline import Timeline, TimelineEvent

_TP_KIND = {True: "all_gather", False: "all_reduce"}
TIMELINE_NOTE = (
    "predicted; one rank per pipeline stage (tp, cp and dp index 0); the other ranks of a "
    "stage are symmetric. Each action lays out compute, then exposed TP/CP/EP communication, "
    "then a blocking pipeline send; a communication event spans its whole duration, hidden "
    "part included."
)


def _pass_events(
    rank: int,
    start: float,
    cost: PassCost,
    kind: str,
    name: str,
    action: Action,
    sp: bool,
    cp_ring: bool,
) -> tuple[list[TimelineEvent], float]:
    """Events of one pass laid out from ``start``; returns them and the pass end."""
    common = {"rank": rank, "microbatch": action.microbatch, "chunk": action.chunk}
    events = []
    if cost.compute_s > 0:
        events.append(
            TimelineEvent(
                lane="compute",
                name=name,
                kind=kind,
                start_s=start,
                duration_s=cost.compute_s,
                **common,
            )
        )
    clock = start + cost.compute_s
    lanes = (
        ("tp", cost.tp_s, cost.tp_exposed_s, cost.tp_bytes, _TP_KIND[sp]),
        ("cp", cost.cp_s, cost.cp_exposed_s, cost.cp_bytes, "send" if cp_ring else "all_gather"),
        ("ep", cost.ep_s, cost.ep_exposed_s, cost.ep_bytes, "all_to_all"),
    )
    for lane, total, exposed, size, comm_kind in lanes:
        if total <= 0:
            continue
        begin = max(start, clock + exposed - total)
        events.append(
            TimelineEvent(
                lane=lane,
                name=f"{lane} {name}",
                kind=comm_kind,
                start_s=begin,
                duration_s=total,
                bytes=int(size),
                group=lane,
                **common,
            )
        )
        clock += exposed
    return events, clock


def _action_events(
    sim: IterationSimulation, plan: ParallelPlan, rank: int, timed: TimedAction
) -> list[TimelineEvent]:
    a = timed.action
    cost = sim.chunks[a.stage][a.chunk]
    label = f"mb{a.microbatch} c{a.chunk}"
    sp = plan.sequence_parallel and plan.tp > 1
    # paraplan's executor always all-gathers K/V (`executor.context_parallel`).
    ring = plan.cp_comm_type == "p2p" and sim.runtime != "torch"
    if a.phase == "F":
        events, clock = _pass_events(
            rank, timed.start_s, cost.forward, "forward", f"F {label}", a, sp, ring
        )
    else:
        events, clock = _pass_events(
            rank, timed.start_s, cost.recompute, "recompute", f"R {label}", a, sp, ring
        )
        more, clock = _pass_events(
            rank, clock, cost.backward, "backward", f"B {label}", a, sp, ring
        )
        events += more
    boundary = a.stage if a.phase == "F" else a.stage - 1
    v = virtual_stage(a.stage, a.chunk, plan.pp)
    sends = plan.pp > 1 and (v < plan.pp * plan.vpp - 1 if a.phase == "F" else v > 0)
    if sends:
        start = clock if sim.blocking_sends else timed.end_s
        events.append(
            TimelineEvent(
                rank=rank,
                lane="pp",
                name=f"send {a.phase} {label}",
                kind="send",
                start_s=start,
                duration_s=sim.send_s[boundary % plan.pp],
                microbatch=a.microbatch,
                chunk=a.chunk,
                group="pp",
            )
        )
    return events


def build_timeline(sim: IterationSimulation, plan: ParallelPlan) -> Timeline:
    """The predicted `Timeline` of a simulated iteration, one rank per pipeline stage."""
    stride = plan.tp * plan.cp * plan.dp
    events: list[TimelineEvent] = []
    for stage, row in enumerate(sim.timing.actions):
        rank = stage * stride
        clock = 0.0
        for timed in row:
            if timed.start_s > clock + 1e-12:
                events.append(
                    TimelineEvent(
                        rank=rank,
                        lane="compute",
                        name="bubble",
                        kind="bubble",
                        start_s=clock,
                        duration_s=timed.start_s - clock,
                    )
                )
            events += _action_events(sim, plan, rank, timed)
            clock = timed.end_s
        events += _tail_events(sim, plan, rank, stage)
    return Timeline(
        source="predicted",
        events=tuple(events),
        iteration_time_s=sim.iteration_time_s,
        ranks_shown=tuple(s * stride for s in range(plan.pp)),
        note=TIMELINE_NOTE,
    )


def _tail_events(
    sim: IterationSimulation, plan: ParallelPlan, rank: int, stage: int
) -> list[TimelineEvent]:
    tail = sim.tails[stage]
    op = "reduce_scatter" if plan.distributed_optimizer else "all_reduce"
    events = [
        TimelineEvent(
            rank=rank,
            lane="dp",
            name=name,
            kind="all_reduce" if "embedding" in name else op,
            start_s=start,
            duration_s=duration,
            bytes=int(size),
            group="dp-cp",
        )
        for name, start, duration, size in tail.dp_events
    ]
    if tail.norm_allreduce_s > 0:
        events.append(
            TimelineEvent(
                rank=rank,
                lane="tp",
                name="tp norm-grad all_reduce",
                kind="all_reduce",
                start_s=tail.grads_done_s - tail.norm_allreduce_s,
                duration_s=tail.norm_allreduce_s,
                group="tp",
            )
        )
    events.append(
        TimelineEvent(
            rank=rank,
            lane="optimizer",
            name="optimizer step",
            kind="optimizer",
            start_s=sim.sync_s,
            duration_s=tail.optimizer_s,
        )
    )
    if tail.param_gather_s > 0:
        events.append(
            TimelineEvent(
                rank=rank,
                lane="dp",
                name="param all_gather (exposed)",
                kind="all_gather",
                start_s=sim.sync_s + tail.optimizer_s,
                duration_s=tail.param_gather_s,
                group="dp-cp",
            )
        )
    return events
