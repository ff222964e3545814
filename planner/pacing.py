"""Pace of one plan search: its progress report and its time limit.

The screen (`planner.screening`) prices the candidates in rounds of whole groups (a group:
one combination of the knobs the pipeline phase depends on, with every micro-batch size
and switch). After each round `SearchPace` reports how many candidates the search has dealt
with and says whether the time limit has passed; the search then stops starting rounds,
and the plans it ranks are the best of those priced so far.

Round sizes: on a runtime whose screen has a time bound (megatron, a closed form over the
whole table) the rounds are those of the bounded screen (`planner.screening`,
`FIRST_ROUND_ROWS`, four times larger each round), so a round may take as long as all the
rounds before it together. On a runtime without one (torch, an event simulation per
candidate) each round is sized from the last one's rate to take about `ROUND_TARGET_S`
(`next_round_rows`): the progress moves about once a second and the time limit is overrun
by about one round.

Past the limit the simulator still simulates the picks in order until fitting plans of
`SIMULATED_PAST_LIMIT` distinct labels are simulated (or the picks run out), so that a search
cut short ranks a best plan and a runner-up that differs from it to compare it with.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.candidates import Progress
from specs.errors import SpecError

Clock = Callable[[], float]
"""Seconds on a monotonic clock (`time.perf_counter` unless a test passes its own)."""

ROUND_TARGET_S = 1.0
"""Wall time a round of a screen without a time bound aims at, seconds."""
FIRST_PACED_ROUND_ROWS = 64
"""Candidates in the first round of a screen without a time bound (about 0.5 s of the torch
runtime's screen on an 8B model)."""
MIN_PACED_ROUND_ROWS = 16
"""Fewest candidates a later round of such a screen asks for (it takes whole groups, so it
may hold more)."""
SIMULATED_PAST_LIMIT = 2
"""Distinct labels (`ParallelPlan.label`: degrees, micro-batch, sequence parallelism,
recompute, optimizer sharding) of the fitting plans the event simulator prices even once
the time limit has passed: the best and a runner-up that differs from it, for
`planner.explain` to compare (two picks that differ only in a switch such as the bucket
size compare as identical breakdowns). Each costs one simulation (seconds on a model of
hundreds of layers on thousands of GPUs), which the limit may be overrun by."""


@dataclass(kw_only=True, slots=True)
class SearchPace:
    """Progress and time limit of one search. It counts, for the progress callback, the
    candidates the screen has dealt with (priced, or set aside by the memory floor or the
    time bound) out of those it knows of; `expired` tells whether ``time_limit_s`` seconds
    have passed since it was made. Mutable: one search owns it and nothing else reads it."""

    progress: Progress | None = None
    """Callback (phase, done, total); None reports nothing."""
    time_limit_s: float | None = None
    """Seconds the search may take before it stops starting new work; None: no limit."""
    clock: Clock = time.perf_counter
    """The clock the limit is measured on."""
    total: int = 0
    """Candidates the screen knows of: the valid ones, then those derived with per-module
    recompute sets as the screen makes them."""
    done: int = 0
    """Candidates of ``total`` dealt with so far."""
    start_s: float = field(default=math.nan)
    """Clock reading when the search started (set on creation)."""

    def __post_init__(self) -> None:
        if self.time_limit_s is not None and not self.time_limit_s > 0:  # `not >`: NaN too
            raise SpecError(
                f"SearchPace.time_limit_s must be > 0 seconds, got {self.time_limit_s:g}; "
                "leave it unset for no limit"
            )
        self.start_s = self.clock()

    def add(self, count: int) -> None:
        """``count`` more candidates to screen (rows derived during the screen)."""
        self.total += count

    def report(self) -> None:
        """Reports ("screen", done, total) to ``progress``."""
        if self.progress is not None:
            self.progress("screen", self.done, self.total)

    def advance(self, count: int) -> None:
        """``count`` more candidates dealt with; reports them when ``count`` > 0."""
        self.done += count
        if count > 0:
            self.report()

    def elapsed_s(self) -> float:
        """Seconds since the search started, on ``clock``."""
        return self.clock() - self.start_s

    def expired(self) -> bool:
        """Whether the time limit has passed (never without a limit)."""
        return self.time_limit_s is not None and self.elapsed_s() >= self.time_limit_s

    def remaining_s(self) -> float:
        """Seconds left before the time limit (negative once overrun); infinite without a
        limit."""
        if self.time_limit_s is None:
            return math.inf
        return self.time_limit_s - self.elapsed_s()


def next_round_rows(rows: int, elapsed_s: float) -> int:
    """Candidates for the next round of a screen without a time bound: as many as the last
    round's rate (``rows`` in ``elapsed_s`` seconds) prices in `ROUND_TARGET_S`, at most four
    times ``rows`` and at least `MIN_PACED_ROUND_ROWS`."""
    if elapsed_s <= 0:
        return max(4 * rows, MIN_PACED_ROUND_ROWS)
    paced = rows * ROUND_TARGET_S / elapsed_s
    return int(max(min(paced, 4 * rows), MIN_PACED_ROUND_ROWS))


def next_chunk_rows(rows: int, elapsed_s: float) -> int:
    """Rows for the next chunk of a round of the torch runtime's screen
    (`planner.micro_batch_screen.ScreenChunk`): as many as the last chunk's rate (``rows``
    in ``elapsed_s`` seconds) prices in `ROUND_TARGET_S`, at most four times ``rows`` and at
    least one, so that the progress moves about once a second even where one row takes
    seconds."""
    if elapsed_s <= 0:
        return 4 * rows
    return int(max(min(rows * ROUND_TARGET_S / elapsed_s, 4 * rows), 1))
