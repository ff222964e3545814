"""Host speed: how a shared host's drift shows in a run, read by the host probe.

On a shared virtual machine the same run takes different times from one minute to the
next: other tenants take the cores for tens of seconds at a time. Each run can time a fixed
piece of host work after every timed step (`profiles.host_probe`); its median over the run
tells how fast the host ran. Three uses, all in the fidelity benchmark:

- `host_elasticity`: how a plan's iteration time follows the probe, fitted on repeated
  runs of the same plans (the calibration runs: fitting on the runs being judged is not
  allowed). On the 2-core reference VM, 430 runs of 18 plans over five benches gave a
  slope of 0.83 for two ranks: the probe (dispatch and small GEMMs) slows more than a
  training step, whose collectives wait partly on the peer rather than the host.
- `host_typical`: the middle run of a plan once each run's time is brought to one host
  speed (time over probe to the elasticity): the run that stands for the plan, chosen by
  the plan's own cost rather than by the spell its run fell in.
- `at_host_speed`: each prediction, made for the host speed of a reference probe, moved to
  the speed of the run it is compared with (the measured times stay as measured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from reports.fidelity import FidelityRow, median_run
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


def at_host_speed(
    rows: Sequence[FidelityRow], references_s: Mapping[int, float], elasticity: float = 1.0
) -> list[FidelityRow]:
    """``rows`` predicted at the host speed of their own runs: each prediction, made at the
    speed where the host probe of a run of its world size takes ``references_s[world]``,
    times (the run's probe over that) to the power ``elasticity``. Raises `SpecError` for a
    row whose run did not probe or whose world size has no positive reference."""
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
        replace(
            r,
            predicted_time_s=None
            if r.predicted_time_s is None
            else r.predicted_time_s * (r.host_probe_s / references_s[r.world_size]) ** elasticity,  # type: ignore[operator]
        )
        for r in rows
    ]
