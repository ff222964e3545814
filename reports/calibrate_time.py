"""Calibration of the executor model: the split of a microbatch between its forward and
its backward, then one compute time scale (`reports.calibrate` for it).

On a CPU the compute of a step (operator dispatch, autograd and DTensor bookkeeping,
kernels, copies) runs on the rank's own core, so when the host runs slower or faster than
when it was profiled (a shared virtual machine drifts by tens of percent within an hour;
a training step's kernels and dispatches also run colder than the profiler's loops) every
part of it changes together. The executor model's calibration therefore fits one factor k
on the runs' median iteration times, not the five separate factors of the Megatron-LM
model: those are not identifiable from a few small runs, and the measured phases of a
profiled CPU step carry the profiler's own per-operator cost.

The collectives keep the profile's measured costs: k is fitted on runs without layer
collectives (their collectives are a few percent of a step), so it says nothing about
them, and the profile times every collective the way a step waits for it (its mean, the
two ranks' scheduling included); scaling them with k would carry the compute's drift into
the collective-bound plans. The layer collectives get a factor of their own, fitted after
k on runs that have them (`reports.calibrate_layers`).

`reports.calibrate_factors.time_scaled` multiplies every compute time of a profile by k: the op
overhead (every host rate of `costmodel.runtimes.torch.host_rates` is read relative to it), GEMM and
attention rates and memory-bound bandwidth (over k, through
`reports.calibrate_factors.apply_factors`). `fit_time_scale` minimises the sum of squared
log-ratios of predicted to measured iteration time over the runs (scipy
``minimize_scalar``, bounded to `SCALE_BOUNDS`).

Before k, the split: one scale on every backward pass (`HostOverheads.backward_scale`),
from the runs' own timelines rather than their iteration times, which only fix the sum of
the passes. The profile prices the backward from loops (autograd nodes, GEMMs of the
forward's layout), whose ratio to the forward need not be a training step's; a scale on
the sum alone then misprices what a recompute adds, since its rerun is a forward
(`bench/pass_split.py`). Runs whose passes hold layer collectives (tensor, context or
expert parallelism) do not inform it: the executor's pass ranges enclose those calls, the
model lays them out apart. The split is a ratio within one run, so k does not move it and
it is fitted first (`backward_factor`, `fit_backward_scale`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

from scipy.optimize import minimize_scalar

from profiles.schema import HardwareProfile
from specs.errors import SpecError

SCALE_BOUNDS = (0.2, 5.0)
"""Range of the fitted time scale."""


def fit_time_scale(
    profile: HardwareProfile,
    measured_s: Sequence[float],
    predict_s: Callable[[HardwareProfile], Sequence[float]],
    scaled: Callable[[HardwareProfile, float], HardwareProfile],
) -> float:
    """The k that best maps ``predict_s(scaled(profile, k))`` onto ``measured_s`` (least
    squares of log-ratios); ``scaled`` is `reports.calibrate_factors.time_scaled`."""

    def loss(log_k: float) -> float:
        predicted = predict_s(scaled(profile, math.exp(log_k)))
        return sum(math.log(p / m) ** 2 for p, m in zip(predicted, measured_s, strict=True))

    bounds = (math.log(SCALE_BOUNDS[0]), math.log(SCALE_BOUNDS[1]))
    result = minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": 1e-4})
    return float(math.exp(result.x))


def scale_at_bound(k: float) -> str | None:
    """A warning when the fitted time scale ``k`` sits on a bound of `SCALE_BOUNDS` (within
    0.1%): the runs ask for more than the fit may give, so the calibrated profile still
    predicts them too fast or too slow; None inside the range."""
    for bound in SCALE_BOUNDS:
        if abs(math.log(k / bound)) < 1e-3:
            return (
                f"the compute time scale stopped at its bound x{bound:g} (range "
                f"x{SCALE_BOUNDS[0]:g} to x{SCALE_BOUNDS[1]:g}): the runs are further from the "
                "profile than calibration corrects; profile this machine again (`paraplan "
                "profile`), or bring runs of different spells to one host speed (--host-speed)"
            )
    return None


BACKWARD_SCALE_BOUNDS = (0.25, 4.0)
"""Range of the fitted backward scale; outside it the runs' split is not the model's
passes (a timeline from another plan, or passes that hold their collectives)."""


def backward_factor(measured: dict[str, float], predicted: dict[str, float]) -> float:
    """The factor on a run's predicted backward that gives its measured backward over its
    measured forward (phase seconds, `reports.calibrate_phases.timeline_phases`):

        β = (B_m / F_m · F_p − R_p) / B_p

    where the measured backward B_m holds the recompute (the executor times the rerun
    inside its backward) and the predicted recompute R_p, a forward, keeps its price. A
    ratio of one run's phases, so the profiler's slowdown of the timed step and the host's
    speed cancel."""
    f_m, f_p = measured["forward"], predicted["forward"]
    b_m = measured["backward"] + measured.get("recompute", 0.0)
    b_p, r_p = predicted["backward"], predicted.get("recompute", 0.0)
    if min(f_m, f_p, b_m, b_p) <= 0:
        return math.nan
    return (b_m / f_m * f_p - r_p) / b_p


def fit_backward_scale(base_scale: float, factors: dict[str, float]) -> float:
    """The profile's new ``backward_scale``: ``base_scale`` (the one the predictions were
    made with) times the geometric mean of the runs' `backward_factor` (run name ->
    factor). Raises `SpecError` for a factor that is not positive or a scale outside
    `BACKWARD_SCALE_BOUNDS`."""
    bad = {name: f for name, f in factors.items() if not f > 0}
    if bad:
        raise SpecError(
            f"backward scale: runs {sorted(bad)} give no positive backward factor ({bad}): "
            "their measured or predicted forward or backward is empty or the predicted "
            "recompute exceeds the measured backward; calibrate on runs of plain or "
            "recomputed plans whose timelines hold every pass"
        )
    scale = base_scale * statistics.geometric_mean(factors.values())
    low, high = BACKWARD_SCALE_BOUNDS
    if not low <= scale <= high:
        raise SpecError(
            f"backward scale {scale:.3g} (runs' factors {factors}) is outside [{low}, {high}]: "
            "the runs' backward over forward is far from the model's; check that each "
            "folder's measured.json belongs to its plan.json"
        )
    return scale
