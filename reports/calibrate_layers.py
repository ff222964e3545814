"""The executor model's scale on its layer collectives (`reports.calibrate`'s last step
for a CPU profile): `HostOverheads.layer_collective_scale` of the host section, fitted
after the compute time scale of `reports.calibrate_time`.

A tensor-, context- or expert-parallel step on a CPU waits for every one of its layers'
collectives: the wire time, the ranks' arrival skew after their host work and the
functional form's extra (`costmodel.runtimes.torch.passes`). The profile times those with probes
of a few seconds each; what a step pays at each call follows the ranks' scheduling on a
shared host, which the probes catch only in part, so the same plan's wait per call moves
from one set of runs to the next by more than the probes' figures do.

So when the runs hold both kinds, the compute time scale k is fitted on the runs without
layer collectives alone (their collectives are a few percent of a step), and then one
factor c on every layer collective's time is fitted on the runs with them, k fixed: the
same least squares of log iteration-time ratios (`reports.calibrate_time.fit_time_scale`,
bounded to its `SCALE_BOUNDS`). With runs of one kind only, k is fitted on all of them and
c is kept, since one iteration time cannot tell a slow collective from slow compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from costmodel.execution import ExecutionOptions
from costmodel.runtimes.torch.host_rates import layer_collective_scale
from profiles.schema import HardwareProfile
from reports.calibrate_factors import with_layer_collective_scale
from reports.calibrate_phases import measured_iteration_s, predict
from reports.calibrate_time import fit_time_scale
from reports.run_dir import RunDir


def has_layer_collectives(run: RunDir) -> bool:
    """The run's plan issues collectives inside its layers (tensor, context or expert
    parallelism), which `HostOverheads.layer_collective_scale` prices."""
    plan = run.bundle.plan
    return max(plan.tp, plan.cp, plan.ep) > 1


def predictor(
    runs: Sequence[RunDir], options: ExecutionOptions
) -> Callable[[HardwareProfile], list[float]]:
    """Predicted iteration seconds of ``runs`` on a candidate profile."""

    def predicted(candidate: HardwareProfile) -> list[float]:
        return [predict(candidate, r, options)[0] for r in runs]

    return predicted


def fit_layer_scale(
    profile: HardwareProfile, runs: Sequence[RunDir], options: ExecutionOptions
) -> HardwareProfile:
    """``profile`` (compute already scaled) with the layer-collective scale that best maps
    the ``runs``' predicted iteration times onto their measured ones."""
    base_scale = layer_collective_scale(profile)
    c = fit_time_scale(
        profile,
        [measured_iteration_s(r) for r in runs],
        predictor(runs, options),
        lambda p, x: with_layer_collective_scale(p, base_scale * x),
    )
    return with_layer_collective_scale(profile, base_scale * c)


def layer_note(base: HardwareProfile, fitted: HardwareProfile, layered: int, rest: int) -> str:
    """The provenance note of the layer-collective scale."""
    old = layer_collective_scale(base)
    new = layer_collective_scale(fitted)
    if layered and rest:
        return (
            f"layer collectives x{old:.4g} -> x{new:.4g}, fitted on {layered} run(s) with "
            "tensor-, context- or expert-parallel collectives after the compute scale"
        )
    missing = "with" if not layered else "without"
    return (
        f"layer collectives kept at x{old:.4g}: no run {missing} tensor-, context- or "
        "expert-parallel collectives to tell them from the compute"
    )
