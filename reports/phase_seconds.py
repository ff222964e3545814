"""Phase seconds of one rank's timeline events: interval arithmetic and the phases that
`reports.compare` compares and `reports.calibrate_phases` fits.

Conventions:

- Phase seconds are per rank and per iteration (`rank_phase_seconds`).
- Phases: ``forward``, ``backward``, ``recompute`` and ``optimizer`` are the time covered by
  events of that kind. ``<lane>_exposed`` (lane = tp, cp, ep, pp, dp) is the time that lane is
  busy while no compute event (forward, backward, recompute, optimizer) runs on the same
  rank: overlapped communication costs nothing. ``bubble`` is what is left of the iteration
  when neither compute nor communication runs (iteration time minus the busy union), so
  compute + exposed communication + bubble add up to the iteration time whenever the comm
  lanes do not hide behind each other.
- A measured timeline may hold a few steady-state iterations: its number of iterations is
  its span over its iteration time, rounded with a 0.25 allowance so that one slow step is
  not read as two (`iterations_in`); totals are divided by it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from specs.timeline import Timeline, TimelineEvent

COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer")
"""Event kinds that keep the rank's compute stream busy and hide communication."""
COMM_LANES = ("tp", "cp", "ep", "pp", "dp")
"""Communication lanes whose exposed time is a phase of its own."""
PHASES = (
    "forward",
    "backward",
    "recompute",
    *(f"{lane}_exposed" for lane in COMM_LANES),
    "bubble",
    "optimizer",
)
"""Phase names of the comparison, in display order."""

Interval = tuple[float, float]


# ---- interval arithmetic -------------------------------------------------------------


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of ``(start, end)`` intervals as sorted, disjoint intervals."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered_s(merged: Sequence[Interval]) -> float:
    """Seconds covered by disjoint intervals."""
    return sum(end - start for start, end in merged)


def overlap_s(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Seconds covered by both of two sorted, disjoint interval lists (two-pointer sweep)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---- per-rank phases -----------------------------------------------------------------


def iterations_in(timeline: Timeline) -> int:
    """Iterations a timeline holds: its span over its iteration time, at least 1."""
    span_s = max((e.end_s for e in timeline.events), default=0.0)
    if timeline.iteration_time_s <= 0 or span_s <= 0:
        return 1
    return max(1, math.floor(span_s / timeline.iteration_time_s + 0.25))


def iteration_time_of(timeline: Timeline) -> float:
    """The timeline's iteration time, or the span of its events when it is unset (0)."""
    if timeline.iteration_time_s > 0:
        return timeline.iteration_time_s
    return max((e.end_s for e in timeline.events), default=0.0)


def rank_phase_seconds(
    events: Iterable[TimelineEvent], *, iteration_time_s: float, num_iterations: int = 1
) -> dict[str, float]:
    """Seconds per iteration of every phase in `PHASES` for the events of one rank."""
    real = [e for e in events if e.kind != "bubble"]
    per_kind = {
        kind: merge_intervals((e.start_s, e.end_s) for e in real if e.kind == kind)
        for kind in COMPUTE_KINDS
    }
    compute = merge_intervals(iv for ivs in per_kind.values() for iv in ivs)
    out = {kind: covered_s(ivs) / num_iterations for kind, ivs in per_kind.items()}
    for lane in COMM_LANES:
        comm = merge_intervals(
            (e.start_s, e.end_s) for e in real if e.lane == lane and e.kind not in COMPUTE_KINDS
        )
        out[f"{lane}_exposed"] = (covered_s(comm) - overlap_s(comm, compute)) / num_iterations
    busy_s = covered_s(merge_intervals((e.start_s, e.end_s) for e in real)) / num_iterations
    out["bubble"] = max(0.0, iteration_time_s - busy_s)
    return out
