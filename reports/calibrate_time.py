"""Calibration of the executor model: one compute time scale (`reports.calibrate` for it).

On a CPU the compute of a step (operator dispatch, autograd and DTensor bookkeeping,
kernels, copies) runs on the rank's own core, so when the host runs slower or faster than
when it was profiled (a shared virtual machine drifts by tens of percent within an hour;
a training step's kernels and dispatches also run colder than the profiler's loops) every
part of it changes together. The executor model's calibration therefore fits one factor k
on the runs' median iteration times, not the five separate factors of the Megatron-LM
model: those are not identifiable from a few small runs, and the measured phases of a
profiled CPU step carry the profiler's own per-operator cost.

The collectives keep the profile's measured costs: calibration runs are compute-bound
(their collectives are a few percent of a step), so k says nothing about them, and the
profile times every collective the way a step waits for it (its mean, the two ranks'
scheduling included). Scaling them with k over-predicted the collective-bound plans: on
one bench (k = 1.86) context parallelism came out +54% and tensor parallelism +20%,
against +22% and +5% with the collectives as measured.

`reports.calibrate.time_scaled` multiplies every compute time of a profile by k: the op
overhead (every host rate of `costmodel.host_rates` is read relative to it), GEMM and
attention rates and memory-bound bandwidth (over k, through
`reports.calibrate.apply_factors`). `fit_time_scale` minimises the sum of squared
log-ratios of predicted to measured iteration time over the runs (scipy
``minimize_scalar``, bounded to `SCALE_BOUNDS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from scipy.optimize import minimize_scalar

from profiles.schema import HardwareProfile

SCALE_BOUNDS = (0.2, 5.0)
"""Range of the fitted time scale."""


def fit_time_scale(
    profile: HardwareProfile,
    measured_s: Sequence[float],
    predict_s: Callable[[HardwareProfile], Sequence[float]],
    scaled: Callable[[HardwareProfile, float], HardwareProfile],
) -> float:
    """The k that best maps ``predict_s(scaled(profile, k))`` onto ``measured_s`` (least
    squares of log-ratios); ``scaled`` is `reports.calibrate.time_scaled`."""

    def loss(log_k: float) -> float:
        predicted = predict_s(scaled(profile, math.exp(log_k)))
        return sum(math.log(p / m) ** 2 for p, m in zip(predicted, measured_s, strict=True))

    bounds = (math.log(SCALE_BOUNDS[0]), math.log(SCALE_BOUNDS[1]))
    result = minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": 1e-4})
    return float(math.exp(result.x))
