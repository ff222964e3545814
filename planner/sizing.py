"""Cluster sizing: how many GPUs, for how long, at what cost, to train on a token budget.

For each cluster size the best plan comes from `planner.search.search_plans`; its
throughput gives the training time (days = tokens / tokens_per_s / 86,400), the GPU-hours
(GPUs x days x 24) and the cost (GPU-hours x price per GPU-hour).

Cluster sizes are whole nodes, a power of two of them (1, 2, 4, ... nodes x GPUs per
node): the sizes schedulers hand out and the ones a power-of-two global batch divides.
The ladder starts at the first size that can hold the model state at all
(`planner.explain_fit.min_gpus_for_model_state`). Three goals:

- ``days``: the smallest cluster whose best plan meets the deadline (the ladder stops two
  sizes past it, to show the trend); the cheapest one meeting it is reported too;
- ``max_gpus``: every size up to the limit (and the limit itself when it is whole nodes);
  the fastest wins;
- ``budget_usd`` with ``gpu_hour_usd``: sizes until the cost exceeds the budget; the
  fastest within budget wins.

A time limit (``time_limit_s``) bounds the whole sizing run: each size's search gets the
seconds left divided by the sizes left to search at most (`size_time_limit_s`), so the time
a quick search leaves goes to the sizes after it and a search that overruns its share
takes from them. Once the limit has passed no further size is searched; the result lists
the sizes searched, those whose search the limit cut short (their plans are the best of
the candidates they priced) and those not searched (`sizing_time_limit_note`), and the
goal is judged on the sizes searched only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from planner.defaults import DEFAULT_HEADROOM
from planner.explain import no_plan_reason
from planner.explain_fit import min_gpus_for_model_state
from planner.pacing import Clock, SearchPace
from planner.search import memory_limit_bytes, search_plans
from planner.search_result import RankedPlan
from planner.space import SearchSpace
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec

SECONDS_PER_DAY = 86_400.0
DEFAULT_MAX_GPUS = 131_072
"""Largest cluster tried when only a deadline or a budget bounds the search."""
PAST_DEADLINE_SIZES = 2
"""Sizes evaluated past the first that meets the deadline, for the table and the plot."""

SizeProgress = Callable[[int, int, int], None]
"""Progress callback: (num_gpus, sizes done, sizes planned at most); called before each size
and again at every progress step of that size's search."""


def training_days(token_budget: float, tokens_per_s: float) -> float:
    """Days to process ``token_budget`` tokens at ``tokens_per_s``."""
    if tokens_per_s <= 0:
        raise SpecError(f"tokens_per_s must be > 0, got {tokens_per_s}")
    return token_budget / tokens_per_s / SECONDS_PER_DAY


def gpu_hours(num_gpus: int, days: float) -> float:
    """GPUs x days x 24."""
    return num_gpus * days * 24.0


def cluster_sizes(gpus_per_node: int, min_gpus: int, max_gpus: int) -> list[int]:
    """Power-of-two node counts times ``gpus_per_node``, from the first that holds
    ``min_gpus`` up to ``max_gpus``; ``max_gpus`` itself is added when it is whole nodes."""
    if gpus_per_node < 1 or max_gpus < 1:
        raise SpecError(
            f"gpus_per_node ({gpus_per_node}) and max_gpus ({max_gpus}) must be positive"
        )
    sizes = []
    nodes = 1
    while nodes * gpus_per_node <= max_gpus:
        if nodes * gpus_per_node >= min_gpus:
            sizes.append(nodes * gpus_per_node)
        nodes *= 2
    if max_gpus % gpus_per_node == 0 and max_gpus >= min_gpus and max_gpus not in sizes:
        sizes.append(max_gpus)
    return sizes


@dataclass(frozen=True, kw_only=True, slots=True)
class SizingRow:
    """The best plan on one cluster size."""

    num_gpus: int
    """Cluster size."""
    best: RankedPlan | None
    """Best plan found; None when nothing fits."""
    reason: str | None = None
    """Why no plan was found on this size (`planner.explain.no_plan_reason`); None with a plan."""
    days: float
    """Training days for the token budget (inf when nothing fits)."""
    gpu_hours: float
    """GPUs x days x 24 (inf when nothing fits)."""
    cost_usd: float | None
    """GPU-hours x price; None without a price."""
    time_limit_s: float | None = None
    """This size's share of the sizing run's time limit, seconds; None: no limit."""
    time_limit_reached: bool = False
    """Whether the time limit cut this size's search short (`SearchResult.time_limit_reached`)."""

    @property
    def tokens_per_s(self) -> float:
        """Simulated throughput of the best plan (0 when nothing fits)."""
        return self.best.estimate.tokens_per_s if self.best else 0.0

    @property
    def mfu(self) -> float:
        """MFU of the best plan (0 when nothing fits)."""
        return self.best.estimate.mfu if self.best else 0.0

    @property
    def mfu_bf16(self) -> float | None:
        """MFU of the best plan over the dense bf16 peak (`Estimate.mfu_bf16`); None when
        nothing fits or the profile has no bf16 peak."""
        return self.best.estimate.mfu_bf16 if self.best else None


@dataclass(frozen=True, kw_only=True, slots=True)
class SizingResult:
    """Every evaluated cluster size and the chosen one."""

    rows: tuple[SizingRow, ...]
    """One row per evaluated size, smallest first."""
    chosen: SizingRow | None
    """The size that meets the goal (see the module docstring); None if none does."""
    cheapest: SizingRow | None
    """Among the sizes meeting the goal, the fewest GPU-hours; None if none does."""
    goal: str
    """The goal in words, e.g. ``finish 15e12 tokens within 90 days``."""
    time_limit_s: float | None = None
    """The sizing run's time limit, seconds; None: none was set."""
    not_searched: tuple[int, ...] = ()
    """Cluster sizes the ladder would still have searched when the time limit passed."""

    @property
    def time_limit_reached(self) -> bool:
        """Whether the time limit cut the run short: sizes not searched, or a size's search
        cut short."""
        return bool(self.not_searched) or any(r.time_limit_reached for r in self.rows)


def _row(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    gpu_hour_usd: float | None,
    search_kw: dict[str, Any],
) -> SizingRow:
    tokens = job.token_budget or 0
    result = search_plans(model, cluster, job, profile, **search_kw)
    if result.best is None:
        return SizingRow(
            num_gpus=cluster.num_gpus,
            best=None,
            reason=no_plan_reason(result),
            days=float("inf"),
            gpu_hours=float("inf"),
            cost_usd=None if gpu_hour_usd is None else float("inf"),
            time_limit_s=result.time_limit_s,
            time_limit_reached=result.time_limit_reached,
        )
    days = training_days(tokens, result.best.estimate.tokens_per_s)
    hours = gpu_hours(cluster.num_gpus, days)
    return SizingRow(
        num_gpus=cluster.num_gpus,
        best=result.best,
        days=days,
        gpu_hours=hours,
        cost_usd=None if gpu_hour_usd is None else hours * gpu_hour_usd,
        time_limit_s=result.time_limit_s,
        time_limit_reached=result.time_limit_reached,
    )


def _goal(
    tokens: int, days: float | None, max_gpus: int | None, budget_usd: float | None
) -> tuple[str, Callable[[SizingRow], bool]]:
    """Goal text and the test a row must pass."""
    if days is not None:
        return f"finish {tokens:.3g} tokens within {days:g} days", lambda r: r.days <= days
    if budget_usd is not None:
        return (
            f"finish {tokens:.3g} tokens for at most ${budget_usd:,.0f}",
            lambda r: r.cost_usd is not None and r.cost_usd <= budget_usd,
        )
    return (
        f"finish {tokens:.3g} tokens fastest on at most {max_gpus} GPUs",
        lambda r: r.best is not None,
    )


def _size_step(
    progress: SizeProgress, gpus: int, done: int, total: int
) -> Callable[[str, int, int], None]:
    """A search progress callback that reports the size being searched to ``progress``."""

    def step(phase: str, phase_done: int, phase_total: int) -> None:
        progress(gpus, done, total)

    return step


def size_time_limit_s(pace: SearchPace, sizes_left: int, first: bool) -> float | None:
    """One size's share of the sizing run's time limit: the seconds left on ``pace``
    divided by ``sizes_left``, the sizes the ladder may still search (the ``first`` size
    gets the whole limit divided so); None without a limit."""
    if pace.time_limit_s is None:
        return None
    left = pace.time_limit_s if first else pace.remaining_s()
    return left / sizes_left


def _sizes_text(sizes: tuple[int, ...], *, ladder: bool = True) -> str:
    """``8, 16 and 32 GPUs``; with ``ladder`` (consecutive sizes of the ladder) and more
    than three, ``64 to 131,072 GPUs (12 sizes)``."""
    if ladder and len(sizes) > 3:
        return f"{sizes[0]:,} to {sizes[-1]:,} GPUs ({len(sizes)} sizes)"
    named = [f"{n:,}" for n in sizes]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"{listed} GPUs"


def sizing_time_limit_note(result: SizingResult) -> str:
    """One sentence on a sizing run the time limit cut short: the sizes searched, those
    whose search was cut short and those not searched; empty when the limit was not
    reached or not set."""
    if not result.time_limit_reached:
        return ""
    searched = tuple(r.num_gpus for r in result.rows)
    cut = tuple(r.num_gpus for r in result.rows if r.time_limit_reached)
    parts = [f"searched {_sizes_text(searched)}"]
    if cut:
        parts.append(
            f"cut short: {_sizes_text(cut, ladder=False)} (the plan of each is the best of "
            "the candidates its search priced)"
        )
    if result.not_searched:
        parts.append(f"not searched: {_sizes_text(result.not_searched)}")
    return (
        f"Time limit of {result.time_limit_s:g} s reached over the sizing run (each size "
        f"searched for the seconds left over the sizes left): {'; '.join(parts)}; the goal "
        "is judged on the sizes searched (raise the time limit, or lower the largest size "
        "searched)."
    )


def _check_goal(
    job: TrainingJob,
    days: float | None,
    max_gpus: int | None,
    budget_usd: float | None,
    gpu_hour_usd: float | None,
    gpus_per_node: int | None,
) -> None:
    """SpecError unless the job has a token budget and one goal is given, a budget with a
    price, every value given > 0."""
    if not job.token_budget:
        raise SpecError("cluster sizing needs a token budget: set TrainingJob.token_budget")
    if days is None and budget_usd is None and max_gpus is None:
        raise SpecError("cluster sizing needs a goal: days, max_gpus, or budget_usd")
    if budget_usd is not None and gpu_hour_usd is None:
        raise SpecError("a budget needs a price: give gpu_hour_usd (USD per GPU-hour)")
    given = {
        "days": days,
        "max_gpus": max_gpus,
        "budget_usd": budget_usd,
        "gpu_hour_usd": gpu_hour_usd,
        "gpus_per_node": gpus_per_node,
    }
    for name, value in given.items():
        if value is not None and not value > 0:  # `not >` also refuses NaN
            raise SpecError(
                f"cluster sizing: {name} must be > 0, got {value}; give a positive value, or "
                "leave it unset"
            )


def size_cluster(
    model: ModelSpec,
    hardware: str,
    job: TrainingJob,
    profile: HardwareProfile,
    *,
    days: float | None = None,
    max_gpus: int | None = None,
    budget_usd: float | None = None,
    gpu_hour_usd: float | None = None,
    gpus_per_node: int | None = None,
    space: SearchSpace | None = None,
    top_k: int = 3,
    memory_headroom: float = DEFAULT_HEADROOM,
    progress: SizeProgress | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    time_limit_s: float | None = None,
    clock: Clock = time.perf_counter,
) -> SizingResult:
    """Evaluate cluster sizes for ``job.token_budget`` tokens and pick one (module docstring).

    Exactly one goal is needed: ``days``, ``max_gpus``, or ``budget_usd`` (which needs
    ``gpu_hour_usd``); ``max_gpus`` may also bound the other two. ``time_limit_s`` bounds
    the whole run on ``clock`` (module docstring); not > 0 is a SpecError
    (`planner.pacing.SearchPace`).
    """
    pace = SearchPace(time_limit_s=time_limit_s, clock=clock)
    _check_goal(job, days, max_gpus, budget_usd, gpu_hour_usd, gpus_per_node)
    per_node = gpus_per_node or profile.topology.gpus_per_node
    limit = memory_limit_bytes(profile, memory_headroom)
    floor = min_gpus_for_model_state(model, job, limit)
    sizes = cluster_sizes(per_node, floor, max_gpus or DEFAULT_MAX_GPUS)
    text, meets = _goal(job.token_budget, days, max_gpus, budget_usd)
    search_kw: dict[str, Any] = {
        "space": space,
        "top_k": top_k,
        "memory_headroom": memory_headroom,
        "options": options,
        "clock": clock,
    }
    goal = SizingGoal(days=days, budget_usd=budget_usd, gpu_hour_usd=gpu_hour_usd, meets=meets)
    clusters = (hardware, gpus_per_node)
    rows, not_searched = _size_rows(
        model, job, profile, clusters, sizes, goal, pace, progress, search_kw
    )
    chosen, cheapest = _pick(rows, goal)
    return SizingResult(
        rows=tuple(rows),
        chosen=chosen,
        cheapest=cheapest,
        goal=text,
        time_limit_s=time_limit_s,
        not_searched=not_searched,
    )


@dataclass(frozen=True, kw_only=True)
class SizingGoal:
    """The goal of `size_cluster`: a deadline in ``days`` or a ``budget_usd`` at
    ``gpu_hour_usd`` USD per GPU-hour (None: not that goal), and the test a row must pass
    (``meets``, `_goal`)."""

    days: float | None
    budget_usd: float | None
    gpu_hour_usd: float | None
    meets: Callable[[SizingRow], bool]


def _pick(rows: list[SizingRow], goal: SizingGoal) -> tuple[SizingRow | None, SizingRow | None]:
    """(the chosen row, the cheapest row) among the rows that meet the goal, None when none
    does: under a deadline the first (fewest GPUs), else the fastest; the cheapest by
    GPU-hours; ties to fewer GPUs."""
    passing = [r for r in rows if goal.meets(r)]
    if goal.days is not None:
        chosen = passing[0] if passing else None
    else:
        chosen = min(passing, key=lambda r: (r.days, r.num_gpus), default=None)
    cheapest = min(passing, key=lambda r: (r.gpu_hours, r.num_gpus), default=None)
    return chosen, cheapest


def _size_rows(
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    clusters: tuple[str, int | None],
    sizes: list[int],
    goal: SizingGoal,
    pace: SearchPace,
    progress: SizeProgress | None,
    search_kw: dict[str, Any],
) -> tuple[list[SizingRow], tuple[int, ...]]:
    """(the rows searched, the GPU counts left unsearched when ``pace`` ran out): one
    `_row` per GPU count of ``sizes`` in order, on ``clusters`` (the `ClusterSpec`
    ``hardware`` and ``gpus_per_node``), each search given its share of the time
    left (`planner.pacing.size_time_limit_s`) and, with ``progress``, a callback naming its
    size (`_size_step`). A deadline met leaves only the next `PAST_DEADLINE_SIZES` sizes to
    search; under a budget the walk stops at the first row that misses the goal after one
    that met it. ``search_kw`` (the search's arguments) gains ``time_limit_s`` and
    ``progress`` per size."""
    hardware, gpus_per_node = clusters
    rows: list[SizingRow] = []
    not_searched: tuple[int, ...] = ()
    past = 0
    for i, gpus in enumerate(sizes):
        # a deadline met already leaves only the sizes up to PAST_DEADLINE_SIZES past it
        left = len(sizes) - i if goal.days is None or not past else PAST_DEADLINE_SIZES + 1 - past
        ladder = sizes[i : i + left]
        if rows and pace.expired():
            not_searched = tuple(ladder)
            break
        search_kw["time_limit_s"] = size_time_limit_s(pace, len(ladder), first=not rows)
        if progress is not None:
            progress(gpus, i, len(sizes))
            search_kw["progress"] = _size_step(progress, gpus, i, len(sizes))
        cluster = ClusterSpec(hardware=hardware, num_gpus=gpus, gpus_per_node=gpus_per_node)
        row = _row(model, cluster, job, profile, goal.gpu_hour_usd, search_kw)
        rows.append(row)
        met_before = any(goal.meets(r) for r in rows[:-1])
        if goal.days is not None and any(goal.meets(r) for r in rows):
            past += 1
            if past > PAST_DEADLINE_SIZES:
                break
        if goal.budget_usd is not None and met_before and not goal.meets(row):
            break
    return rows, not_searched
