"""What calibration compares (`reports.calibrate`): a run's measured iteration and phase
seconds, the cost model's prediction of its plan, and the forward/backward split of each
run that can inform it (`split_factors`, each run's `reports.calibrate_time.backward_factor`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from costmodel.estimate import simulate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from profiles.schema import HardwareProfile
from reports.calibrate_time import backward_factor
from reports.phase_seconds import iterations_in, rank_phase_seconds
from reports.run_dir import RunDir
from specs.errors import SpecError
from specs.timeline import Timeline, TimelineEvent


def measured_iteration_s(run: RunDir) -> float:
    """Median of the unprofiled steps (``metrics.json`` ``timed_steps``, else every step);
    the measured timeline's iteration time without metrics."""
    metrics = run.metrics or {}
    steps = metrics.get("iteration_time_s") or []
    timed = metrics.get("timed_steps")
    if isinstance(timed, list) and timed and all(isinstance(i, int) for i in timed):
        steps = [steps[i] for i in timed if 0 <= i < len(steps)]
    if steps:
        return float(statistics.median(steps))
    if run.measured is None or run.measured.iteration_time_s <= 0:
        raise SpecError(f"{run.path}: no measured iteration time; run `paraplan execute` again")
    return run.measured.iteration_time_s


def _iterations_held(timeline: Timeline) -> int:
    """Iterations in a timeline: the fewest first forwards (microbatch 0, chunk 0) on a rank."""
    counts: dict[int, int] = {}
    for e in timeline.events:
        if e.kind == "forward" and e.microbatch == 0 and e.chunk in (0, None):
            counts[e.rank] = counts.get(e.rank, 0) + 1
    return min(counts.values()) if counts else iterations_in(timeline)


def timeline_phases(
    timeline: Timeline, *, iteration_time_s: float | None = None
) -> dict[str, float]:
    """Phase seconds per iteration (`reports.phase_seconds.PHASES`), averaged over the ranks.

    ``iteration_time_s`` rescales the phases to that iteration time (a profiled measured
    step to the unprofiled median); by default the timeline's own iteration is kept.
    """
    n = _iterations_held(timeline)
    span_s = max(e.end_s for e in timeline.events) - min(e.start_s for e in timeline.events)
    own_s = span_s / n if timeline.source == "measured" else timeline.iteration_time_s
    by_rank: dict[int, list[TimelineEvent]] = {}
    for e in timeline.events:
        by_rank.setdefault(e.rank, []).append(e)
    totals: dict[str, float] = {}
    for events in by_rank.values():
        phases = rank_phase_seconds(events, iteration_time_s=own_s, num_iterations=n)
        for name, seconds in phases.items():
            totals[name] = totals.get(name, 0.0) + seconds / len(by_rank)
    scale = iteration_time_s / own_s if iteration_time_s and own_s > 0 else 1.0
    return {name: seconds * scale for name, seconds in totals.items()}


def predict(
    profile: HardwareProfile, run: RunDir, options: ExecutionOptions = DEFAULT_OPTIONS
) -> tuple[float, Timeline]:
    """Predicted iteration seconds and timeline of the run's plan on ``profile``
    (``options`` as in `costmodel.estimate.simulate_plan`)."""
    b = run.bundle
    estimate, timeline = simulate_plan(b.model, b.cluster, b.job, b.plan, profile, options=options)
    if timeline is None:
        raise SpecError("simulate_plan returned no timeline; calibration needs one")
    return estimate.iteration_time_s, timeline


def split_factors(
    profile: HardwareProfile, runs: Sequence[RunDir], options: ExecutionOptions
) -> dict[str, float]:
    """Per run whose passes hold no layer collective (tp, cp and ep 1), the
    `reports.calibrate_time.backward_factor` of its measured timeline's phases against
    its prediction on ``profile``."""
    out = {}
    for run in runs:
        plan = run.bundle.plan
        if max(plan.tp, plan.cp, plan.ep) > 1 or run.measured is None:
            continue
        _, timeline = predict(profile, run, options)
        out[str(run.path)] = backward_factor(
            timeline_phases(run.measured), timeline_phases(timeline)
        )
    return out
