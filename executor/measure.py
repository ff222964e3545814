"""Turn per-rank profiler traces into the measured `specs.Timeline`, a collective ledger and
iteration statistics.

Source, per rank: the Chrome trace of ``torch.profiler``
(reference/torch-distributed-on-cpu.md §6). Named ranges (``user_annotation``) give the
compute phases: ``paraplan/step {i}`` around each training step, ``paraplan/forward mb{m}
c{c}``, ``paraplan/backward mb{m} c{c}`` and ``paraplan/optimizer``. Forward and backward
phases go on the ``compute`` lane, the optimizer step on the ``optimizer`` lane (where the
cost model's predicted timeline puts it, so the two align). Absolute time is
``baseTimeNanoseconds / 1000 + ts`` microseconds: one clock for every rank of a host. The
collectives of the trace, matched with the flight records of torch.distributed for their
process group, lane and bytes, are `executor.trace_collectives`'s.

Ledger entries are per rank and per iteration: ``{op, group, bytes, count}`` with
``bytes`` the total of the ``count`` calls (bytes in the nccl-tests convention,
`executor.trace_collectives`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from executor.rank_event import RankEvent
from executor.trace_collectives import executed_collectives, label_collectives
from specs.timeline import Timeline, TimelineEvent

STEP_RANGE = re.compile(r"^paraplan/step (\d+)$")
"""Name of the range the training loop puts around each step."""
PHASE_RANGE = re.compile(r"^paraplan/(forward|backward|recompute) mb(\d+) c(\d+)$")
"""Per-microbatch, per-chunk compute ranges of the engine."""
OPTIMIZER_RANGE = "paraplan/optimizer"
"""Range of the optimizer step."""
COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer")
"""Event kinds of the named compute ranges."""
TIMELINE_COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv")
"""Communication kinds the Timeline schema has; others (broadcast, barrier) stay in the
ledger only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankTrace:
    """What one rank's profiled window held, reduced to what the merge needs (small, so it
    can travel between ranks)."""

    rank: int
    """Global rank."""
    steps: Mapping[int, tuple[float, float]]
    """Training step -> (absolute start, absolute end) in seconds."""
    events: tuple[RankEvent, ...]
    """Compute phases and collectives inside the window."""
    memory_peak_bytes: int
    """Highest allocator total the profiler's memory events reported (0 without them)."""


# ---- one rank ----------------------------------------------------------------------------


def rank_trace(
    trace: Mapping[str, Any],
    *,
    rank: int,
    flight_records: Sequence[Mapping[str, Any]],
    group_labels: Mapping[str, str | Sequence[str]],
    context_parallel: bool,
) -> RankTrace:
    """Reduce one rank's Chrome trace (and its flight records) to a `RankTrace`."""
    base_s = float(trace.get("baseTimeNanoseconds", 0)) / 1e9
    spans = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]

    def start(e: Mapping[str, Any]) -> float:
        return base_s + float(e["ts"]) / 1e6

    steps: dict[int, tuple[float, float]] = {}
    compute: list[RankEvent] = []
    for e in spans:
        name = e.get("name", "")
        if m := STEP_RANGE.match(name):
            steps[int(m.group(1))] = (start(e), start(e) + e["dur"] / 1e6)
        elif (event := _compute_event(name, start(e), e["dur"] / 1e6)) is not None:
            compute.append(event)
    launches = [
        (start(e), start(e) + e["dur"] / 1e6, e["name"])
        for e in spans
        if e.get("cat") == "cpu_op" and e["name"].startswith(("c10d::", "_c10d_functional"))
    ]
    executed = executed_collectives(spans, start, compute)
    # Records from before the profiled window (engine build, earlier steps) cannot match.
    window_ns = min((start(e) for e in spans), default=0.0) * 1e9
    recent = [r for r in flight_records if r.get("time_created_ns", 0) >= window_ns]
    comm = label_collectives(
        executed, recent, launches, group_labels, context_parallel=context_parallel
    )
    memory = [
        int(e["args"].get("Total Allocated", 0))
        for e in trace.get("traceEvents", [])
        if e.get("name") == "[memory]" and "args" in e
    ]
    return RankTrace(
        rank=rank,
        steps=steps,
        events=tuple(sorted(compute + comm, key=lambda ev: ev.start_s)),
        memory_peak_bytes=max(memory, default=0),
    )


def _compute_event(name: str, start_s: float, duration_s: float) -> RankEvent | None:
    if name == OPTIMIZER_RANGE:
        return RankEvent(
            lane="optimizer",
            name="optimizer",
            kind="optimizer",
            start_s=start_s,
            duration_s=duration_s,
        )
    m = PHASE_RANGE.match(name)
    if m is None:
        return None
    kind, mb, chunk = m.group(1), int(m.group(2)), int(m.group(3))
    return RankEvent(
        lane="compute",
        name=f"{kind[0].upper()} mb{mb} c{chunk}",
        kind=kind,
        start_s=start_s,
        duration_s=duration_s,
        microbatch=mb,
        chunk=chunk,
    )


# ---- all ranks ---------------------------------------------------------------------------


def build_timeline(
    traces: Sequence[RankTrace], *, step: int, iteration_time_s: float, note: str = ""
) -> Timeline:
    """The measured `Timeline` of one training step on every rank that profiled it.

    Times are seconds from the earliest start of that step over the ranks; an event
    belongs to the step when it starts inside the rank's step range.
    """
    windows = {t.rank: t.steps[step] for t in traces if step in t.steps}
    if not windows:
        return Timeline(source="measured", iteration_time_s=iteration_time_s, note=note)
    t0 = min(start for start, _ in windows.values())
    events = []
    for trace in traces:
        if trace.rank not in windows:
            continue
        lo, hi = windows[trace.rank]
        for ev in trace.events:
            if not lo <= ev.start_s <= hi:
                continue
            if ev.kind not in COMPUTE_KINDS + TIMELINE_COMM_KINDS:
                continue
            events.append(
                TimelineEvent(
                    rank=trace.rank,
                    lane=ev.lane,  # type: ignore[arg-type]
                    name=ev.name,
                    kind=ev.kind,  # type: ignore[arg-type]
                    start_s=ev.start_s - t0,
                    duration_s=ev.duration_s,
                    microbatch=ev.microbatch,
                    chunk=ev.chunk,
                    bytes=ev.bytes,
                    group=ev.group,
                )
            )
    return Timeline(
        source="measured",
        events=tuple(events),
        iteration_time_s=iteration_time_s,
        ranks_shown=tuple(sorted(windows)),
        note=note,
    )


def collective_ledger(traces: Sequence[RankTrace], *, steps: Sequence[int]) -> list[dict[str, Any]]:
    """``[{op, group, bytes, count}]`` per rank per iteration, averaged over the ranks and
    the given steps (collectives of every kind, broadcasts and barriers included)."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    seen = 0
    for trace in traces:
        for step in steps:
            if step not in trace.steps:
                continue
            seen += 1
            lo, hi = trace.steps[step]
            for ev in trace.events:
                if ev.kind not in COMPUTE_KINDS and lo <= ev.start_s <= hi:
                    entry = sums[(ev.kind, ev.group or "world")]
                    entry[0] += ev.bytes
                    entry[1] += 1
    if not seen:
        return []
    return [
        {"op": op, "group": group, "bytes": b / seen, "count": c / seen}
        for (op, group), (b, c) in sorted(sums.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStats:
    """Throughput figures of a run's measured steps."""

    p50_s: float
    """Median iteration time, seconds."""
    p95_s: float
    """95th percentile iteration time (linear interpolation), seconds."""
    tokens_per_s: float
    """Tokens per iteration over the median iteration time, whole job."""
    mfu: float | None
    """Model FLOPs utilization: model FLOPs per iteration / (median time x ranks x peak
    FLOP/s per rank); None when the peak or the model FLOPs are not given."""


def step_stats(
    times_s: Sequence[float],
    *,
    tokens_per_iteration: int,
    world_size: int,
    model_flops_per_iteration: float | None,
    peak_flops_per_rank: float | None,
) -> StepStats:
    """p50, p95, tokens/s and MFU of the iteration times ``times_s`` (at least one)."""
    p50 = float(np.percentile(times_s, 50))
    p95 = float(np.percentile(times_s, 95))
    mfu = None
    if model_flops_per_iteration and peak_flops_per_rank:
        mfu = model_flops_per_iteration / (p50 * world_size * peak_flops_per_rank)
    return StepStats(p50_s=p50, p95_s=p95, tokens_per_s=tokens_per_iteration / p50, mfu=mfu)
