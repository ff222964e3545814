"""Event simulator that times a pipeline schedule (`costmodel.schedules`).

Each stage runs its action list strictly in order on one compute stream. An action starts
when its stage is free and its dependencies have ended (plus the P2P transfer time):

- F of virtual stage k, microbatch j waits for F of virtual stage k - 1, microbatch j;
- B of virtual stage k, microbatch j waits for B of virtual stage k + 1, microbatch j and for
  F of virtual stage k, microbatch j (same stage, no transfer).

An optional hold keeps a stage busy for some seconds after an action ends without delaying
the actions that depend on it: a blocking send, whose transfer the receiver waits for
through the P2P time while the sender waits for it on its own stream.

Virtual stage k = chunk·pp + stage (Megatron-LM). Times are in seconds from the start of
the schedule (the first forward of virtual stage 0 starts at 0). Durations come from the
caller, so the same loop times uniform textbook costs, cost-model estimates or measurements.
A schedule whose order can never be satisfied raises `ScheduleDeadlockError` naming the
blocked actions. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from costmodel.schedules import Action, Phase, PipelineSchedule, virtual_stage
from specs.errors import SpecError

ComputeTime = Callable[[Action], float]
"""Duration in seconds of one action on its stage's compute stream."""
P2PTime = Callable[[int, int, Phase], float]
"""Seconds to move an activation (F) or gradient (B) from one virtual stage to another."""

_Key = tuple[int, int, Phase]
"""(virtual stage, microbatch, phase): identifies one action across the whole pipeline."""


class ScheduleDeadlockError(SpecError):
    """An action order that can never run to completion (a cycle or a missing action)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimedAction:
    """One action with the interval it occupies on its stage's compute stream."""

    action: Action
    """The scheduled forward or backward."""
    start_s: float
    """Start time in seconds from the start of the schedule."""
    end_s: float
    """End time in seconds from the start of the schedule."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineTiming:
    """Timed schedule: when every action ran, and how busy each stage was."""

    actions: tuple[tuple[TimedAction, ...], ...]
    """Per stage, the timed actions in list (= execution) order."""
    stage_busy_s: tuple[float, ...]
    """Per stage, seconds of compute (sum of its action durations)."""
    stage_idle_s: tuple[float, ...]
    """Per stage, idle (bubble) seconds between its first start and its last end."""
    makespan_s: float
    """Seconds from the start of the schedule to the end of its last action."""

    @property
    def ideal_s(self) -> float:
        """Busy time of the busiest stage: the makespan of a pipeline with no bubble."""
        return max(self.stage_busy_s, default=0.0)

    @property
    def bubble_ratio(self) -> float:
        """Bubble time over ideal time, ``(makespan - ideal) / ideal``.

        For uniform stages and free P2P this is (p-1)/m for 1F1B and (p-1)/(v·m) for
        interleaved 1F1B (Narayanan et al. 2021, arXiv 2104.04473, §2.2).
        """
        ideal = self.ideal_s
        return (self.makespan_s - ideal) / ideal if ideal > 0 else 0.0


def free_p2p_s(src_virtual: int, dst_virtual: int, phase: Phase) -> float:
    """P2P time model for free communication: always 0 seconds."""
    return 0.0


def _key(action: Action, pp: int) -> _Key:
    return virtual_stage(action.stage, action.chunk, pp), action.microbatch, action.phase


def _dependencies(action: Action, pp: int, num_virtual: int) -> list[tuple[_Key, int | None]]:
    """Keys the action waits for, each with the source virtual stage (None: same stage)."""
    here, mb, _ = _key(action, pp)
    if action.phase == "F":
        return [((here - 1, mb, "F"), here - 1)] if here > 0 else []
    deps: list[tuple[_Key, int | None]] = [((here, mb, "F"), None)]
    if here < num_virtual - 1:
        deps.append(((here + 1, mb, "B"), here + 1))
    return deps


def _num_virtual(schedule: PipelineSchedule) -> int:
    """pp · vpp, with vpp one more than the largest chunk index in the schedule."""
    chunks = max((a.chunk for actions in schedule for a in actions), default=0)
    return len(schedule) * (1 + chunks)


def _checked_s(value: float, source: str, action: Action) -> float:
    """``value`` when it is a valid duration; the error message is built only on failure
    (this runs for every action, and formatting the action dominated the loop)."""
    if math.isfinite(value) and value >= 0:
        return value
    what = f"p2p_s into {action}" if source == "p2p" else f"{source}_s({action})"
    raise SpecError(f"{what} must be a finite number of seconds >= 0, got {value!r}")


def _positions(schedule: PipelineSchedule) -> dict[_Key, tuple[int, int]]:
    """Map each action's key to (stage, index); reject misplaced or repeated actions."""
    pp = len(schedule)
    positions: dict[_Key, tuple[int, int]] = {}
    for stage, actions in enumerate(schedule):
        for index, action in enumerate(actions):
            if action.stage != stage or action.chunk < 0 or action.microbatch < 0:
                raise SpecError(
                    f"action #{index} of stage {stage} is {action}: its stage must be {stage} "
                    "and chunk, microbatch must be >= 0; put each action in its stage's list"
                )
            key = _key(action, pp)
            if key in positions:
                raise SpecError(
                    f"{action} appears twice (stage {stage}, positions {positions[key][1]} and "
                    f"{index}); each (chunk, microbatch, phase) must run once per stage"
                )
            positions[key] = (stage, index)
    return positions


def no_hold_s(action: Action) -> float:
    """Hold model without blocking sends: a stage is free as soon as its action ends."""
    return 0.0


def simulate_pipeline(
    schedule: PipelineSchedule,
    compute_s: ComputeTime,
    p2p_s: P2PTime = free_p2p_s,
    hold_s: ComputeTime = no_hold_s,
) -> PipelineTiming:
    """Time ``schedule`` with per-action ``compute_s`` and inter-stage ``p2p_s``.

    ``hold_s`` gives the seconds a stage stays busy after an action's end before its next
    action may start (the stage is idle then: the time counts in ``stage_idle_s``, not in
    ``stage_busy_s``); actions on other stages still see the action's end.

    A heap of action end times drives the loop (vidur-style): when an action ends, its
    stage tries its next action and any stage blocked on it is retried. An action's start
    is fixed once all its inputs are known, so each action is pushed exactly once.
    ``p2p_s`` is called for every cross-virtual-stage dependency, including chunks on the
    same stage (pp == 1 with vpp > 1); return 0 there if that hop is free.
    Raises `ScheduleDeadlockError` when some action can never start.
    """
    positions = _positions(schedule)
    pp = len(schedule)
    num_virtual = _num_virtual(schedule)
    end_of: dict[_Key, float] = {}
    waiting: dict[_Key, list[int]] = {}
    cursor, free_at = [0] * pp, [0.0] * pp
    starts: list[list[float]] = [[] for _ in range(pp)]
    heap: list[tuple[float, int, int]] = []
    order = itertools.count()  # breaks end-time ties in push order, for determinism

    def try_start(stage: int) -> None:
        if cursor[stage] == len(schedule[stage]) or len(starts[stage]) > cursor[stage]:
            return  # finished, or its current action is already running
        action = schedule[stage][cursor[stage]]
        here = virtual_stage(action.stage, action.chunk, pp)
        ready_s = free_at[stage]
        for key, src in _dependencies(action, pp, num_virtual):
            if key not in end_of:
                waiting.setdefault(key, []).append(stage)
                return
            hop_s = 0.0 if src is None else p2p_s(src, here, action.phase)
            ready_s = max(ready_s, end_of[key] + _checked_s(hop_s, "p2p", action))
        end_s = ready_s + _checked_s(compute_s(action), "compute", action)
        starts[stage].append(ready_s)
        heapq.heappush(heap, (end_s, next(order), stage))

    for stage in range(pp):
        try_start(stage)
    while heap:
        end_s, _, stage = heapq.heappop(heap)
        key = _key(schedule[stage][cursor[stage]], pp)
        end_of[key] = end_s
        free_at[stage] = end_s + _checked_s(
            hold_s(schedule[stage][cursor[stage]]), "hold", schedule[stage][cursor[stage]]
        )
        cursor[stage] += 1
        try_start(stage)
        for waiter in waiting.pop(key, []):
            try_start(waiter)
    if any(cursor[s] < len(schedule[s]) for s in range(pp)):
        raise ScheduleDeadlockError(_deadlock_message(schedule, cursor, end_of, positions))
    return _timing(schedule, starts, end_of)


def _deadlock_message(
    schedule: PipelineSchedule,
    cursor: list[int],
    end_of: dict[_Key, float],
    positions: dict[_Key, tuple[int, int]],
) -> str:
    """Name every blocked stage, the action it is stuck on and the input it lacks."""
    pp = len(schedule)
    num_virtual = _num_virtual(schedule)
    lines = []
    for stage, actions in enumerate(schedule):
        if cursor[stage] == len(actions):
            continue
        action = actions[cursor[stage]]
        missing = [k for k, _ in _dependencies(action, pp, num_virtual) if k not in end_of]
        reasons = []
        for vs, mb, phase in missing:
            where = positions.get((vs, mb, phase))
            text = f"{phase} of virtual stage {vs} mb{mb}"
            if where is None:
                reasons.append(f"{text}, which no stage schedules")
            else:
                reasons.append(
                    f"{text}, which stage {where[0]} runs at position {where[1]}, behind its "
                    f"own blocked position {cursor[where[0]]}"
                )
        lines.append(
            f"stage {stage} is blocked at position {cursor[stage]} on {action}, waiting for "
            + "; ".join(reasons)
        )
    return (
        "pipeline schedule deadlocks: "
        + " | ".join(lines)
        + ". Reorder the lists so each F follows the F of the previous virtual stage and each "
        "B follows its own F and the B of the next virtual stage (costmodel.schedules builds "
        "valid orders)"
    )


def _timing(
    schedule: PipelineSchedule, starts: list[list[float]], end_of: dict[_Key, float]
) -> PipelineTiming:
    pp = len(schedule)
    timed, busy, idle = [], [], []
    for stage, actions in enumerate(schedule):
        row = tuple(
            TimedAction(action=a, start_s=start, end_s=end_of[_key(a, pp)])
            for a, start in zip(actions, starts[stage], strict=True)
        )
        busy_s = math.fsum(t.end_s - t.start_s for t in row)
        span_s = row[-1].end_s - row[0].start_s if row else 0.0
        timed.append(row)
        busy.append(busy_s)
        idle.append(max(span_s - busy_s, 0.0))
    return PipelineTiming(
        actions=tuple(timed),
        stage_busy_s=tuple(busy),
        stage_idle_s=tuple(idle),
        makespan_s=max(end_of.values(), default=0.0),
    )
