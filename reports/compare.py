"""Predicted versus measured: align two `Timeline`s and compute the errors, phase by phase.

Conventions:

- Errors are signed and relative: ``(predicted - measured) / measured``; positive means the
  cost model predicted too much time (or memory). An error is None where the measured value
  is zero (the phase exists on the predicted side only).
- Phase seconds are per rank and per iteration, averaged over the ranks present in both
  timelines; `Comparison.rank_phases` keeps every rank's own values. The phases, and how a
  timeline's iterations are counted, are `reports.phase_seconds`'s.
- Events are aligned on (rank, lane, kind, microbatch, chunk); several events with one key
  (layers, buckets, repeated iterations) are summed and divided by the timeline's
  iterations (`reports.phase_seconds.iterations_in`).
- The collective ledger (`reports.ledger`) counts bytes and calls per rank and per
  iteration; the executor's ``metrics.json`` ``collectives`` replace the measured
  timeline's communication events when given.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reports.ledger import LedgerRow, join_ledgers, metrics_ledger, timeline_ledger
from reports.phase_seconds import PHASES, iteration_time_of, iterations_in, rank_phase_seconds
from specs.errors import SpecError
from specs.plan import ParallelPlan
from specs.timeline import Timeline, TimelineEvent

WITHIN_TIGHT = 0.05
"""Iteration-time error bound of the ``within 5%`` verdict."""
WITHIN_LOOSE = 0.15
"""Iteration-time error bound of the ``within 15%`` verdict."""


def relative_error(predicted: float, measured: float) -> float | None:
    """Signed relative error ``(predicted - measured) / measured``; None if measured is 0."""
    return (predicted - measured) / measured if measured else None


# ---- result types --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseError:
    """Predicted and measured seconds of one phase (per rank, per iteration)."""

    phase: str
    """One of `PHASES`."""
    predicted_s: float
    """Predicted seconds."""
    measured_s: float
    """Measured seconds."""
    error: float | None
    """``(predicted - measured) / measured``; None when measured is 0."""
    rank: int | None = None
    """The rank these values belong to; None for the average over ranks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AlignedSpan:
    """The events of one (rank, lane, kind, microbatch, chunk) key on both sides."""

    rank: int
    """Global rank."""
    lane: str
    """Lane of the events."""
    kind: str
    """Event kind."""
    microbatch: int | None
    """Microbatch index, or None for per-iteration work."""
    chunk: int | None
    """Model chunk, or None."""
    predicted_s: float | None
    """Summed predicted seconds per iteration; None when the prediction has no such event."""
    measured_s: float | None
    """Summed measured seconds per iteration; None when the measurement has no such event."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankMemory:
    """Peak memory of one rank, predicted (for its pipeline stage) and measured."""

    rank: int
    """Global rank."""
    stage: int
    """Pipeline stage of the rank (Megatron order tp-cp-ep-dp-pp: pp varies slowest)."""
    predicted_gib: float
    """Predicted peak of the stage, GiB."""
    measured_gib: float
    """Measured peak of the rank, GiB."""
    error: float | None
    """Signed relative error."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """How far the prediction was from the measurement, overall and phase by phase."""

    iteration_time_predicted_s: float
    """Predicted iteration time, seconds."""
    iteration_time_measured_s: float
    """Measured iteration time (median step), seconds."""
    iteration_time_error: float | None
    """Signed relative error of the iteration time."""
    verdict: str
    """``within 5%``, ``within 15%`` or ``off`` (from the iteration-time error)."""
    ranks: tuple[int, ...]
    """Ranks present in both timelines; phase values average over them."""
    measured_iterations: int
    """Iterations the measured timeline holds (its totals are divided by this)."""
    phases: tuple[PhaseError, ...]
    """Average over `ranks` of each phase present on either side, in `PHASES` order."""
    rank_phases: tuple[PhaseError, ...]
    """The same per rank."""
    alignment: tuple[AlignedSpan, ...]
    """Events aligned by (rank, lane, kind, microbatch, chunk), ranks in `ranks` only."""
    memory: tuple[RankMemory, ...] = ()
    """Peak memory per rank; empty without measured memory."""
    peak_memory_predicted_gib: float | None = None
    """Predicted peak memory of the fullest rank, GiB."""
    peak_memory_measured_gib: float | None = None
    """Measured peak memory of the fullest rank, GiB."""
    peak_memory_error: float | None = None
    """Signed relative error of the peak memory."""
    ledger: tuple[LedgerRow, ...] = ()
    """Collectives predicted vs measured, sorted by group then op."""


def _ranks_of(timeline: Timeline) -> set[int]:
    return {e.rank for e in timeline.events} | set(timeline.ranks_shown)


def _phase_errors(
    predicted: Timeline, measured: Timeline, ranks: Sequence[int], measured_iterations: int
) -> tuple[list[PhaseError], list[PhaseError]]:
    by_rank_p: dict[int, list[TimelineEvent]] = defaultdict(list)
    by_rank_m: dict[int, list[TimelineEvent]] = defaultdict(list)
    for e in predicted.events:
        by_rank_p[e.rank].append(e)
    for e in measured.events:
        by_rank_m[e.rank].append(e)
    per_rank: list[PhaseError] = []
    sums_p = dict.fromkeys(PHASES, 0.0)
    sums_m = dict.fromkeys(PHASES, 0.0)
    for rank in ranks:
        p = rank_phase_seconds(
            by_rank_p[rank],
            iteration_time_s=iteration_time_of(predicted),
            num_iterations=iterations_in(predicted),
        )
        m = rank_phase_seconds(
            by_rank_m[rank],
            iteration_time_s=iteration_time_of(measured),
            num_iterations=measured_iterations,
        )
        for phase in PHASES:
            sums_p[phase] += p[phase]
            sums_m[phase] += m[phase]
            if p[phase] or m[phase]:
                per_rank.append(_phase(phase, p[phase], m[phase], rank=rank))
    n = len(ranks)
    average = [
        _phase(phase, sums_p[phase] / n, sums_m[phase] / n)
        for phase in PHASES
        if sums_p[phase] or sums_m[phase]
    ]
    return average, per_rank


def _phase(phase: str, p: float, m: float, *, rank: int | None = None) -> PhaseError:
    return PhaseError(
        phase=phase, predicted_s=p, measured_s=m, error=relative_error(p, m), rank=rank
    )


# ---- alignment -----------------------------------------------------------------------


_Key = tuple[int, str, str, int, int]


def _span_key(e: TimelineEvent) -> _Key:
    # -1 stands for "not per microbatch / chunk" so keys sort; it never names a real index.
    mb = -1 if e.microbatch is None else e.microbatch
    return (e.rank, e.lane, e.kind, mb, -1 if e.chunk is None else e.chunk)


def align(
    predicted: Timeline, measured: Timeline, *, ranks: Iterable[int] | None = None
) -> tuple[AlignedSpan, ...]:
    """Pair the events of both timelines by (rank, lane, kind, microbatch, chunk).

    Durations with one key are summed and divided by the timeline's iterations; a key seen
    on one side only has None on the other. Bubble events (predicted only) are left out.
    """
    keep = set(_ranks_of(predicted) | _ranks_of(measured)) if ranks is None else set(ranks)
    sides: list[dict[_Key, float]] = []
    for timeline in (predicted, measured):
        n = iterations_in(timeline)
        totals: dict[_Key, float] = defaultdict(float)
        for e in timeline.events:
            if e.rank in keep and e.kind != "bubble":
                totals[_span_key(e)] += e.duration_s / n
        sides.append(totals)
    spans = []
    for key in sorted(sides[0].keys() | sides[1].keys()):
        rank, lane, kind, mb, chunk = key
        spans.append(
            AlignedSpan(
                rank=rank,
                lane=lane,
                kind=kind,
                microbatch=None if mb < 0 else mb,
                chunk=None if chunk < 0 else chunk,
                predicted_s=sides[0].get(key),
                measured_s=sides[1].get(key),
            )
        )
    return tuple(spans)


# ---- memory and collectives ----------------------------------------------------------


def memory_errors(
    estimate: Mapping[str, Any], peak_memory_gib: Sequence[float], plan: ParallelPlan | None
) -> tuple[RankMemory, ...]:
    """Measured peak of every rank against the predicted peak of its pipeline stage.

    Megatron's rank order tp-cp-ep-dp-pp puts pp slowest, so rank r sits on stage
    r // (tp·cp·dp) (megatron-facts.md §4.2). Without a plan or per-stage memory in the
    estimate, every rank is compared with the estimate's overall peak.
    """
    stage_totals: dict[int, float] = {}
    for entry in estimate.get("memory", ()):
        if not isinstance(entry, Mapping) or "stage" not in entry or "total_gib" not in entry:
            raise SpecError(
                f"estimate 'memory' entries need 'stage' and 'total_gib', got {entry!r:.80}"
            )
        stage_totals[int(entry["stage"])] = float(entry["total_gib"])
    per_stage = plan.tp * plan.cp * plan.dp if plan else 0
    rows = []
    for rank, measured in enumerate(peak_memory_gib):
        stage = min(rank // per_stage, plan.pp - 1) if plan else 0
        predicted = stage_totals.get(stage, float(estimate["peak_memory_gib"]))
        rows.append(
            RankMemory(
                rank=rank,
                stage=stage,
                predicted_gib=predicted,
                measured_gib=float(measured),
                error=relative_error(predicted, float(measured)),
            )
        )
    return tuple(rows)


# ---- the comparison ------------------------------------------------------------------


def verdict_for(error: float | None) -> str:
    """``within 5%``, ``within 15%`` or ``off``; ``unmeasured`` without a measured time."""
    if error is None:
        return "unmeasured"
    if abs(error) <= WITHIN_TIGHT:
        return "within 5%"
    return "within 15%" if abs(error) <= WITHIN_LOOSE else "off"


def compare(
    predicted: Timeline,
    measured: Timeline,
    *,
    plan: ParallelPlan | None = None,
    estimate: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> Comparison:
    """Compare a predicted and a measured timeline (plus memory and collectives when given).

    ``estimate`` supplies the predicted memory (``peak_memory_gib``, per-stage ``memory``);
    ``metrics`` the measured ``peak_memory_gib`` per rank and ``collectives``. Raises
    `SpecError` when the sources are swapped or the timelines share no rank.
    """
    ranks = _common_ranks(predicted, measured)
    n_measured = iterations_in(measured)
    phases, rank_phases = _phase_errors(predicted, measured, ranks, n_measured)
    predicted_s = iteration_time_of(predicted)
    measured_s = iteration_time_of(measured)
    error = relative_error(predicted_s, measured_s)
    memory: tuple[RankMemory, ...] = ()
    if estimate is not None and metrics is not None and metrics.get("peak_memory_gib"):
        memory = memory_errors(estimate, metrics["peak_memory_gib"], plan)
    peak_p = float(estimate["peak_memory_gib"]) if estimate is not None else None
    peak_m = max(r.measured_gib for r in memory) if memory else None
    return Comparison(
        iteration_time_predicted_s=predicted_s,
        iteration_time_measured_s=measured_s,
        iteration_time_error=error,
        verdict=verdict_for(error),
        ranks=tuple(ranks),
        measured_iterations=n_measured,
        phases=tuple(phases),
        rank_phases=tuple(rank_phases),
        alignment=align(predicted, measured, ranks=ranks),
        memory=memory,
        peak_memory_predicted_gib=peak_p,
        peak_memory_measured_gib=peak_m,
        peak_memory_error=(
            relative_error(peak_p, peak_m) if peak_p is not None and peak_m is not None else None
        ),
        ledger=_ledger(predicted, measured, metrics),
    )


def _common_ranks(predicted: Timeline, measured: Timeline) -> list[int]:
    for timeline, source in ((predicted, "predicted"), (measured, "measured")):
        if timeline.source != source:
            raise SpecError(
                f"compare: the {source} argument holds a {timeline.source!r} timeline; "
                "pass the predicted timeline first and the measured one second"
            )
    ranks = sorted(_ranks_of(predicted) & _ranks_of(measured))
    if not ranks:
        raise SpecError(
            f"compare: no rank in common: predicted shows {sorted(_ranks_of(predicted))}, "
            f"measured shows {sorted(_ranks_of(measured))}; record the measured timeline "
            "on the ranks the prediction shows (or predict every rank)"
        )
    return ranks


def _ledger(
    predicted: Timeline, measured: Timeline, metrics: Mapping[str, Any] | None
) -> tuple[LedgerRow, ...]:
    """Predicted ledger from the predicted timeline; measured from the executor's metrics
    when it counted collectives, else from the measured timeline."""
    sides = []
    for timeline in (predicted, measured):
        sides.append(
            timeline_ledger(
                timeline,
                num_ranks=max(1, len(_ranks_of(timeline))),
                num_iterations=iterations_in(timeline),
            )
        )
    if metrics is not None and "collectives" in metrics:
        sides[1] = metrics_ledger(metrics["collectives"])
    return join_ledgers(sides[0], sides[1])


def comparison_to_json(comparison: Comparison) -> dict[str, Any]:
    """Plain-JSON form of a comparison: what ``RUN/comparison.json`` holds."""
    c = comparison
    spans = c.alignment
    return {
        "iteration_time_predicted_s": c.iteration_time_predicted_s,
        "iteration_time_measured_s": c.iteration_time_measured_s,
        "iteration_time_error": c.iteration_time_error,
        "verdict": c.verdict,
        "ranks": list(c.ranks),
        "measured_iterations": c.measured_iterations,
        "peak_memory_predicted_gib": c.peak_memory_predicted_gib,
        "peak_memory_measured_gib": c.peak_memory_measured_gib,
        "peak_memory_error": c.peak_memory_error,
        "phases": [_phase_json(p) for p in c.phases],
        "rank_phases": [{"rank": p.rank, **_phase_json(p)} for p in c.rank_phases],
        "memory": [dataclasses.asdict(m) for m in c.memory],
        "ledger": [{**dataclasses.asdict(r), "bytes_error": r.bytes_error} for r in c.ledger],
        "alignment": {
            "matched": sum(s.predicted_s is not None and s.measured_s is not None for s in spans),
            "predicted_only": sum(s.measured_s is None for s in spans),
            "measured_only": sum(s.predicted_s is None for s in spans),
            "spans": [dataclasses.asdict(s) for s in spans],
        },
    }


def _phase_json(p: PhaseError) -> dict[str, Any]:
    return {
        "phase": p.phase,
        "predicted_s": p.predicted_s,
        "measured_s": p.measured_s,
        "error": p.error,
    }
