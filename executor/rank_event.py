"""One event of one rank's profiled window (`RankEvent`): a compute phase or a collective
on the absolute clock, as `executor.measure` reads it from the profiler trace and
`executor.trace_collectives` labels it, before the merge into the measured `Timeline`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RankEvent:
    """One event of one rank on the absolute clock (seconds since the epoch)."""

    lane: str
    """Timeline lane."""
    name: str
    """Display name, e.g. ``F mb0 c0`` or ``dp all_reduce``."""
    kind: str
    """forward/backward/recompute/optimizer, or the collective's operation."""
    start_s: float
    """Absolute start, seconds."""
    duration_s: float
    """Duration, seconds."""
    microbatch: int | None = None
    """Microbatch of a compute phase."""
    chunk: int | None = None
    """Model chunk of a compute phase."""
    bytes: int = 0
    """Message bytes of a collective (see the module doc)."""
    group: str | None = None
    """Group label of a collective, e.g. ``tp``."""
