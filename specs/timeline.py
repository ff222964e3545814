"""`Timeline`: one schema for the predicted and the measured iteration, rank by rank.

The cost model's event simulator and the executor's profiler both produce a `Timeline`;
`reports` compares two of them. `to_chrome_trace` writes the Chrome trace event format
(one process per rank, one thread per lane), which Perfetto and chrome://tracing open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_non_negative

Lane = Literal["compute", "tp", "cp", "ep", "pp", "dp", "optimizer"]
EventKind = Literal[
    "forward",
    "backward",
    "recompute",
    "optimizer",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "send",
    "recv",
    "bubble",
]
TimelineSource = Literal["predicted", "measured"]

LANES: tuple[str, ...] = ("compute", "tp", "cp", "ep", "pp", "dp", "optimizer")
"""Lane order used for display and for Chrome trace thread ids."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineEvent:
    """One span of work or communication on one rank."""

    rank: int
    """Global rank the event ran on."""
    lane: Lane
    """Where it ran: the compute stream or the lane of one communication group."""
    name: str
    """Human-readable name, e.g. ``F mb3 c0`` or ``dp reduce_scatter bucket 2``."""
    kind: EventKind
    """What it is: a compute phase, a collective, a P2P send/recv, or a bubble."""
    start_s: float
    """Start time in seconds from the start of the iteration."""
    duration_s: float
    """Duration in seconds."""
    microbatch: int | None = None
    """Microbatch index for per-microbatch work; None otherwise."""
    chunk: int | None = None
    """Model chunk (virtual pipeline stage) index; None when not per chunk."""
    bytes: int = 0
    """Bytes moved per rank for communication events; 0 for compute."""
    group: str | None = None
    """Process group of a communication event, e.g. ``tp`` or ``dp-cp``."""

    def __post_init__(self) -> None:
        require_non_negative(self, "rank", "bytes")
        require_choice(self, "lane", Lane)
        require_choice(self, "kind", EventKind)
        if self.duration_s < 0:
            raise SpecError(f"TimelineEvent {self.name!r}: duration_s must be >= 0")

    @property
    def end_s(self) -> float:
        """End time in seconds."""
        return self.start_s + self.duration_s


@dataclass(frozen=True, kw_only=True, slots=True)
class Timeline:
    """All events of one iteration (or a few steady-state iterations) for a set of ranks."""

    source: TimelineSource
    """`predicted` (cost model) or `measured` (executor)."""
    events: tuple[TimelineEvent, ...] = ()
    """Events, in any order."""
    iteration_time_s: float = 0.0
    """Iteration time the timeline stands for (the slowest rank's end for predictions,
    the median step for measurements)."""
    ranks_shown: tuple[int, ...] = ()
    """Ranks whose events are present."""
    note: str = ""
    """Free text, e.g. "one rank per pipeline stage; other ranks are symmetric"."""

    def __post_init__(self) -> None:
        require_choice(self, "source", TimelineSource)

    def for_rank(self, rank: int) -> tuple[TimelineEvent, ...]:
        """Events of one rank, sorted by start time."""
        return tuple(sorted((e for e in self.events if e.rank == rank), key=lambda e: e.start_s))

    def total_s(self, *, rank: int | None = None, kind: str | None = None) -> float:
        """Summed duration of the events that match a rank and/or a kind."""
        return sum(
            e.duration_s
            for e in self.events
            if (rank is None or e.rank == rank) and (kind is None or e.kind == kind)
        )

    def to_chrome_trace(self) -> dict[str, Any]:
        """Chrome trace event JSON: process = rank, thread = lane, times in microseconds."""
        trace: list[dict[str, Any]] = []
        ranks = sorted({e.rank for e in self.events} | set(self.ranks_shown))
        for rank in ranks:
            trace.append(_meta("process_name", rank, 0, f"rank {rank}"))
            for tid, lane in enumerate(LANES):
                trace.append(_meta("thread_name", rank, tid, lane))
        for e in self.events:
            args: dict[str, Any] = {"kind": e.kind}
            if e.microbatch is not None:
                args["microbatch"] = e.microbatch
            if e.chunk is not None:
                args["chunk"] = e.chunk
            if e.bytes:
                args["bytes"] = e.bytes
            if e.group:
                args["group"] = e.group
            trace.append(
                {
                    "name": e.name,
                    "cat": e.kind,
                    "ph": "X",
                    "pid": e.rank,
                    "tid": LANES.index(e.lane),
                    "ts": e.start_s * 1e6,
                    "dur": e.duration_s * 1e6,
                    "args": args,
                }
            )
        return {
            "traceEvents": trace,
            "displayTimeUnit": "ms",
            "otherData": {"source": self.source, "note": self.note},
        }


def _meta(name: str, pid: int, tid: int, value: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}}
