"""Host speed: how a shared host's drift shows in a run, read by the host probe.

On a shared virtual machine the same run takes different times from one minute to the
next: other tenants take the cores for tens of seconds at a time. Each run can time a fixed
piece of host work after every timed step (`profiles.host_probe`); its median over the run
tells how fast the host ran. Three uses in the fidelity benchmark, and one in
`paraplan calibrate --host-speed` (`runs_at_one_host_speed`):

- `host_elasticity`: how a plan's iteration time follows the probe, fitted on repeated
  runs of the same plans (the calibration runs: fitting on the runs being judged is not
  allowed). The slope is below 1 where the probe (dispatch and small GEMMs) slows more
  than a training step, whose collectives wait partly on the peer rather than the host.
- `host_typical`: the middle run of a plan once each run's time is brought to one host
  speed (time over probe to the elasticity): the run that stands for the plan, chosen by
  the plan's own cost rather than by the spell its run fell in.
- `at_host_speed`: each prediction, made for the host speed of a reference probe, moved to
  the speed of the run it is compared with (the measured times stay as measured);
  `measured_at_reference` the other way round, for the pick rule: whether the planner's
  pick is within 5% of the fastest plan compares plans, so their runs, each taken in its
  own spell, are brought to one host speed first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from reports.fidelity import FidelityRow, median_run
from reports.run_dir import RunDir
from specs.errors import SpecError

ELASTICITY_RANGE = (0.0, 2.0)
"""Elasticities `host_elasticity` accepts: time cannot fall as the host slows, and a slope
above 2 means the probe did not see the spell the run did."""


def host_elasticity(runs: Mapping[str, Sequence[tuple[float, float]]]) -> float:
    """Slope of log(iteration time) on log(host probe) over ``runs`` (plan name -> its runs'
    (median step s, probe s)), each plan's logs centred on their own means: the pooled
    within-plan least-squares slope, so plans of different cost share one slope.

    Raises `SpecError` for a non-positive figure, when the probes do not vary within any
    plan (a host without drift gives no slope), or for a slope outside `ELASTICITY_RANGE`."""
    xy = xx = 0.0
    for name, pairs in runs.items():
        bad = [(t, p) for t, p in pairs if not (t > 0 and p > 0)]
        if bad:
            raise SpecError(
                f"host elasticity: plan {name} has runs without a positive time and host "
                f"probe: {bad}; execute with RunConfig(host_probe=profiles.host_probe.host_probe)"
            )
        if len(pairs) < 2:
            continue
        log_t = [math.log(t) for t, _ in pairs]
        log_p = [math.log(p) for _, p in pairs]
        mean_t, mean_p = sum(log_t) / len(log_t), sum(log_p) / len(log_p)
        xy += sum((p - mean_p) * (t - mean_t) for t, p in zip(log_t, log_p, strict=True))
        xx += sum((p - mean_p) ** 2 for p in log_p)
    if xx <= 0:
        raise SpecError(
            f"host elasticity: the host probe did not vary within any plan of {sorted(runs)} "
            "(one run each, or a host without drift); run each plan at least twice"
        )
    slope = xy / xx
    low, high = ELASTICITY_RANGE
    if not low <= slope <= high:
        raise SpecError(
            f"host elasticity {slope:.2f} is outside [{low}, {high}]: the probe does not "
            f"follow these runs' times ({sorted(runs)}); repeat the runs on a quieter host"
        )
    return slope


def host_typical(seconds: Sequence[float], probes_s: Sequence[float], elasticity: float) -> int:
    """Index of the middle run (`reports.fidelity.median_run`) once each run's time is
    divided by its probe to the power ``elasticity``: the run of typical cost at any host
    speed. Raises `SpecError` when the lengths differ or a probe is not positive."""
    if len(seconds) != len(probes_s):
        raise SpecError(
            f"host_typical needs one probe per run, got {len(seconds)} times and "
            f"{len(probes_s)} probes"
        )
    if any(not p > 0 for p in probes_s):
        raise SpecError(f"host_typical needs positive host probes, got {list(probes_s)}")
    return median_run([t / p**elasticity for t, p in zip(seconds, probes_s, strict=True)])


def speed_factors(
    rows: Sequence[FidelityRow], references_s: Mapping[int, float], elasticity: float = 1.0
) -> list[float]:
    """Per row, (its run's probe over the reference probe of its world size) to the power
    ``elasticity``: how much slower than the reference speed its run ran. Raises
    `SpecError` for a row whose run did not probe or whose world size has no positive
    reference."""
    unprobed = [r.name for r in rows if r.host_probe_s is None]
    if unprobed:
        raise SpecError(
            f"runs without a host probe: {', '.join(unprobed)}; execute with "
            "RunConfig(host_probe=profiles.host_probe.host_probe)"
        )
    missing = sorted({r.world_size for r in rows if not references_s.get(r.world_size, 0) > 0})
    if missing:
        raise SpecError(
            f"no positive reference probe for world sizes {missing} (have "
            f"{dict(references_s)}); profile those world sizes with this version"
        )
    return [
        (r.host_probe_s / references_s[r.world_size]) ** elasticity  # type: ignore[operator]
        for r in rows
    ]


def at_host_speed(
    rows: Sequence[FidelityRow], references_s: Mapping[int, float], elasticity: float = 1.0
) -> list[FidelityRow]:
    """``rows`` predicted at the host speed of their own runs: each prediction, made at the
    speed where the host probe of a run of its world size takes ``references_s[world]``,
    times `speed_factors` (the measured times stay as measured)."""
    return [
        replace(
            r,
            predicted_time_s=None if r.predicted_time_s is None else r.predicted_time_s * f,
        )
        for r, f in zip(rows, speed_factors(rows, references_s, elasticity), strict=True)
    ]


def measured_at_reference(
    rows: Sequence[FidelityRow], references_s: Mapping[int, float], elasticity: float = 1.0
) -> list[FidelityRow]:
    """``rows`` with each measured time brought to the reference speed (divided by its
    `speed_factors`): plans measured in different spells compared at one host speed, as the
    pick rule compares them."""
    return [
        replace(r, measured_time_s=r.measured_time_s / f)
        for r, f in zip(rows, speed_factors(rows, references_s, elasticity), strict=True)
    ]


def runs_at_one_host_speed(
    runs: Sequence[RunDir], elasticity: float, reference_s: float | None = None
) -> list[RunDir]:
    """``runs`` with every step time brought to one host speed, where the host probe takes
    ``reference_s`` (default: the geometric mean of the runs' probes, ``metrics.json``
    ``host_probe_p50_s``): each step times (the reference over the run's probe) to the
    power ``elasticity``; the probe recorded becomes the reference. What `paraplan calibrate
    --host-speed` fits on, so that runs taken in a fast and a slow spell describe one host.
    Raises `SpecError` for a run without a probe or an elasticity outside
    `ELASTICITY_RANGE`."""
    if not runs:
        return []
    low, high = ELASTICITY_RANGE
    if not low <= elasticity <= high:
        raise SpecError(
            f"host-speed elasticity {elasticity} is outside [{low}, {high}]; fit it with "
            "reports.host_speed.host_elasticity on repeated runs, or use 1 (time follows "
            "the probe)"
        )
    probes = [(run.metrics or {}).get("host_probe_p50_s") for run in runs]
    unprobed = [str(run.path) for run, p in zip(runs, probes, strict=True) if not p or p <= 0]
    if unprobed:
        raise SpecError(
            f"runs without a host probe: {', '.join(unprobed)}; execute them with "
            "`paraplan execute --host-probe`, or calibrate without --host-speed"
        )
    untimed = [str(run.path) for run in runs if not (run.metrics or {}).get("iteration_time_s")]
    if untimed:
        raise SpecError(f"runs without step times in metrics.json: {', '.join(untimed)}")
    reference = reference_s or statistics.geometric_mean(probes)  # type: ignore[arg-type]
    out = []
    for run, probe in zip(runs, probes, strict=True):
        factor = (reference / probe) ** elasticity  # type: ignore[operator]
        metrics = dict(run.metrics or {})
        metrics["iteration_time_s"] = [t * factor for t in metrics.get("iteration_time_s", [])]
        metrics["host_probe_p50_s"] = reference
        out.append(replace(run, metrics=metrics))
    return out
