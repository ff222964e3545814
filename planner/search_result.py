"""What a plan search returns: the simulated plans (`RankedPlan`), the search's summary
(`SearchResult`) and the keys of its rejection counts. `planner.search` fills them;
`planner.explain` and the command line read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from costmodel.estimate import Estimate
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

MEMORY_REJECTION = "memory"
"""Key of `SearchResult.rejected` for candidates over the memory limit."""
BOUND_REJECTION = "slower"
"""Key of `SearchResult.rejected` for candidates the time bound skipped: a lower bound of
their screened iteration time is above the ``top_k``-th screened plan's, so they could not
be among the plans handed to the simulator."""
TIME_LIMIT_REJECTION = "time_limit"
"""``rejected_by`` of the candidates the time limit left unscreened (not a rejection: they
were never priced; `SearchResult.num_unvisited` counts them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankedPlan:
    """One plan with its detailed estimate."""

    plan: ParallelPlan
    """The candidate."""
    estimate: Estimate
    """The event simulator's prediction."""
    screen_tokens_per_s: float
    """The closed-form estimate that selected it for simulation."""
    fits: bool
    """Peak memory within the search's memory limit (device memory less the headroom)."""


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class SearchResult:
    """What a search found; `planner.explain` turns it into text."""

    model: ModelSpec
    """The model searched for."""
    cluster: ClusterSpec
    """The cluster searched on."""
    job: TrainingJob
    """The job searched for."""
    best: RankedPlan | None
    """The fitting plan with the highest simulated throughput; None when nothing fits."""
    top: tuple[RankedPlan, ...]
    """Simulated plans that fit, best first."""
    closest: tuple[RankedPlan, ...]
    """When nothing fits: the simulated candidates closest to fitting, smallest peak first."""
    rejected: Mapping[str, int]
    """Rule id (and "memory") -> candidates rejected."""
    rule_examples: Mapping[str, str]
    """Rule id -> one violation message with its fix."""
    candidates: pd.DataFrame
    """Every screened candidate (plan columns, screened metrics, ``fits``, ``rejected_by``,
    ``simulated_*`` columns for the simulated ones), then one representative row per
    rule-rejected group (``rejected_by`` = rule ids, ``represents`` = candidates)."""
    num_enumerated: int
    """Candidates before any check, and those the screen derived with per-module recompute
    sets where memory binds (`planner.screening`)."""
    num_valid: int
    """Candidates that passed the rules (the derived ones included)."""
    num_screened: int
    """Candidates the closed-form estimate evaluated (valid ones under the model-state
    floor, less the larger micro-batches of plans that did not fit)."""
    memory_limit_bytes: float
    """Per-rank memory a plan may use: device memory x (1 - memory_headroom)."""
    memory_headroom: float
    """Fraction of device memory kept free."""
    elapsed_s: float
    """Wall time of the search."""
    time_limit_s: float | None = None
    """The search's time limit, seconds; None: none was set."""
    num_unvisited: int = 0
    """Valid candidates the screen never reached because the time limit passed (0 when it
    ran to the end): the plans found are the best of the others only."""
    num_simulated: int = 0
    """Plans the event simulator priced (those that passed the rule re-check)."""
    num_unsimulated: int = 0
    """Plans picked for the event simulator that the time limit left unsimulated."""

    @property
    def time_limit_reached(self) -> bool:
        """Whether the time limit cut the search short (candidates left unscreened or picks
        left unsimulated)."""
        return self.num_unvisited > 0 or self.num_unsimulated > 0
