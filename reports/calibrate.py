"""Calibrate a `HardwareProfile` from executed runs, so the cost model predicts what they
measured (`paraplan calibrate`).

Input: a base profile and run folders (`reports.run_dir.RunDir`) holding a plan and its
measurement. Output (`CalibrationResult`): a new profile (provenance ``calibrated``, sources
the run folders, notes the fitted factors) and every run's iteration-time error before and
after. Runs passed as ``held_out`` are evaluated, never fitted: the check that a profile
fitted on some plans predicts another one better.

Method, in two stages:

1. Collectives (`reports.calibrate_comm`): latency and bus bandwidth of every (op, group
   size, placement) the runs' measured collectives sample, from each call's wire time (the
   shortest duration over its group's ranks), medians per message size and a relative α-β
   least-squares line.
2. Compute and pipeline sends (`reports.calibrate_kernels`): with the stage-1 fits in
   place, five factors (GEMM, attention and memory-bandwidth scales, the op overhead and a
   ``send_recv`` time scale) are fitted by `scipy.optimize.least_squares` over all runs at
   once, on log-ratios of predicted and measured phases (iteration, model passes,
   optimizer, pipeline idle).

Scales that would push an efficiency above 1 move the excess into the device peak
(`peak_tflops` or `hbm_GBps`), keeping peak x efficiency, and thus every predicted time,
the fitted one. Times are seconds (``_s``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from costmodel.compute import activation_dtype, gemm_dtype
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.runtimes.registry import runtime_model
from costmodel.runtimes.torch.host_rates import backward_scale
from profiles.schema import HardwareProfile
from profiles.schema_network import CollectiveFit
from profiles.schema_provenance import Provenance
from reports.calibrate_comm import comm_samples, fit_collectives, with_fits
from reports.calibrate_factors import (
    Factors,
    apply_factors,
    time_factors,
    time_scaled,
    with_backward_scale,
)
from reports.calibrate_kernels import fit_factors
from reports.calibrate_layers import fit_layer_scale, has_layer_collectives, layer_note, predictor
from reports.calibrate_phases import measured_iteration_s, predict, split_factors
from reports.calibrate_time import fit_backward_scale, fit_time_scale, scale_at_bound
from reports.run_dir import RunDir, run_device_kind
from specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class RunError:
    """Iteration time of one run, measured and predicted before and after calibration."""

    path: str
    """The run folder."""
    plan: str
    """The plan's label, e.g. ``tp1 pp2 dp1 mbs1``."""
    fitted: bool
    """True when the run was fitted; False for a held-out run (evaluated only)."""
    measured_s: float
    """Median of the run's unprofiled steps, seconds."""
    predicted_before_s: float
    """Prediction with the base profile."""
    predicted_after_s: float
    """Prediction with the calibrated profile."""

    @property
    def error_before(self) -> float:
        """Signed relative error with the base profile."""
        return (self.predicted_before_s - self.measured_s) / self.measured_s

    @property
    def error_after(self) -> float:
        """Signed relative error with the calibrated profile."""
        return (self.predicted_after_s - self.measured_s) / self.measured_s


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationResult:
    """The calibrated profile and how well it fits."""

    profile: HardwareProfile
    """The calibrated profile."""
    base: HardwareProfile
    """The profile calibration started from."""
    factors: Factors
    """Stage-2 factors."""
    collectives: tuple[CollectiveFit, ...]
    """Stage-1 `CollectiveFit`s written into the profile (empty when no run had sampled
    collectives)."""
    runs: tuple[RunError, ...]
    """Fitted runs first, then held-out runs, in the order given."""
    warnings: tuple[str, ...] = ()
    """What limited the fit (`reports.calibrate_time.scale_at_bound`), for the user."""


def _run_error(
    run: RunDir,
    before: HardwareProfile,
    after: HardwareProfile,
    fitted: bool,
    options: ExecutionOptions,
) -> RunError:
    return RunError(
        path=str(run.path),
        plan=run.bundle.plan.label(),
        fitted=fitted,
        measured_s=measured_iteration_s(run),
        predicted_before_s=predict(before, run, options)[0],
        predicted_after_s=predict(after, run, options)[0],
    )


def _notes(
    base: HardwareProfile,
    factors: Factors,
    fits: Sequence[CollectiveFit],
    errors: Sequence[RunError],
) -> tuple[str, ...]:
    notes = [
        f"calibrated from profile {base.name!r} ({base.provenance.method}, "
        f"{base.provenance.date}) with reports.calibrate: collective fits from measured "
        "wire times, then least squares on log-ratios of predicted and measured phases",
        f"gemm efficiency x{factors.gemm_scale:.4g}, attention throughput "
        f"x{factors.attention_scale:.4g}, memory bandwidth x{factors.memory_bandwidth_scale:.4g}, "
        f"op overhead {base.compute.op_overhead_s:.4g} -> {factors.op_overhead_s:.4g} s, "
        f"send_recv time x{factors.p2p_time_scale:.4g}",
    ]
    notes += [
        f"{f.op} {f.placement} x{f.group_size}: latency {f.latency_s:.4g} s, "
        f"busbw {f.busbw_GBps:.4g} GB/s (from measured wire times)"
        for f in fits
    ]
    notes += [
        f"{'fitted' if e.fitted else 'held-out'} run {e.path} ({e.plan}): iteration error "
        f"{e.error_before:+.1%} -> {e.error_after:+.1%} (measured {e.measured_s:.4g} s)"
        for e in errors
    ]
    return tuple(notes)


def _provenance(
    base: HardwareProfile, runs: Sequence[RunDir], command: str, notes: tuple[str, ...]
) -> Provenance:
    """``calibrated`` provenance; the machine fields and the measured spreads, the record of
    the base profile's measurement, stay the base profile's (what a calibration fits goes
    into the profile's figures and its host section)."""
    p = base.provenance
    return Provenance(
        method="calibrated",
        sources=tuple(str(run.path) for run in runs),
        date=date.today().isoformat(),
        command=command,
        tool_version=p.tool_version,
        torch_version=p.torch_version,
        collective_library_version=p.collective_library_version,
        driver_version=p.driver_version,
        host=p.host,
        notes=notes,
        spread=p.spread,
    )


def _calibrate_time(
    profile: HardwareProfile,
    runs: Sequence[RunDir],
    held_out: Sequence[RunDir],
    command: str,
    options: ExecutionOptions,
) -> CalibrationResult:
    """The executor model's calibration: the backward scale, one time scale, then the
    layer collectives' scale (`reports.calibrate_time`); the two scales go into the host
    section, so a profile without one (a GPU's, priced kernel-bound) gets the time scale
    alone."""
    host = profile.host is not None
    split = split_factors(profile, runs, options) if host else {}
    profile_split = (
        with_backward_scale(profile, fit_backward_scale(backward_scale(profile), split))
        if split
        else profile
    )

    layered = [r for r in runs if has_layer_collectives(r)] if host else []
    compute_runs = [r for r in runs if not has_layer_collectives(r)] if host else []
    k_runs = compute_runs if compute_runs and layered else list(runs)
    k = fit_time_scale(
        profile_split,
        [measured_iteration_s(r) for r in k_runs],
        predictor(k_runs, options),
        time_scaled,
    )
    fitted = time_scaled(profile_split, k)
    if compute_runs and layered:
        fitted = fit_layer_scale(fitted, layered, options)
    factors = time_factors(profile, k)
    errors = tuple(
        [_run_error(r, profile, fitted, True, options) for r in runs]
        + [_run_error(r, profile, fitted, False, options) for r in held_out]
    )
    notes = (
        f"executor model: every compute time of profile {profile.name!r} x{k:.4g}, fitted "
        f"on {len(k_runs)} run(s) (reports.calibrate_time, least squares of log "
        "iteration-time ratios)",
        *(
            (
                layer_note(profile, fitted, len(layered), len(compute_runs)),
                _split_note(profile, fitted, split),
            )
            if host
            else (NO_HOST_NOTE,)
        ),
        *_notes(profile, factors, (), errors)[2:],
    )
    bound = scale_at_bound(k)
    warnings = () if bound is None else (bound,)
    provenance = _provenance(profile, runs, command, (*notes, *warnings))
    name = profile.name if profile.name.endswith("-calibrated") else f"{profile.name}-calibrated"
    return CalibrationResult(
        profile=dataclasses.replace(fitted, name=name, provenance=provenance),
        base=profile,
        factors=factors,
        collectives=(),
        runs=errors,
        warnings=warnings,
    )


NO_HOST_NOTE = (
    "backward and layer-collective scales not fitted: the profile has no host section "
    "(a GPU profile, whose torch runtime is priced kernel-bound)"
)
"""The provenance note of an executor calibration on a profile without a host section."""


def _split_note(base: HardwareProfile, fitted: HardwareProfile, split: dict[str, float]) -> str:
    """The provenance note of the backward scale."""
    if not split:
        return (
            "backward scale kept at "
            f"{backward_scale(fitted):.4g}: no run without tensor, context or "
            "expert parallelism to read the forward/backward split from"
        )
    return (
        f"backward scale {backward_scale(base):.4g} -> "
        f"{backward_scale(fitted):.4g} from the forward/backward split of "
        f"{len(split)} run(s) (reports.calibrate_time.fit_backward_scale)"
    )


CALIBRATION_DEVICE_RULE = "calibration_device_kind"
"""Rule id: a profile is refitted only from runs on its own kind of device."""


def check_same_device(profile: HardwareProfile, run: RunDir) -> None:
    """Raise `SpecError` when ``run`` ran on another kind of device (`run_device_kind`)
    than ``profile`` describes: the fit would scale one machine's rates to another's."""
    kind = run_device_kind(run.metrics)
    if kind is None or kind == profile.device.kind:
        return
    raise SpecError(
        f"[{CALIBRATION_DEVICE_RULE}] {run.path} ran on {kind} ranks but the base profile "
        f"{profile.name!r} describes a {profile.device.kind} ({profile.device.name}); "
        "calibrate against the profile of the machine the run ran on (its plan's "
        f"cluster.hardware is {run.bundle.cluster.hardware!r}): leave out --hardware, or "
        "pass that profile"
    )


def calibrate(
    profile: HardwareProfile,
    runs: Sequence[RunDir],
    *,
    held_out: Sequence[RunDir] = (),
    command: str = "reports.calibrate.calibrate",
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> CalibrationResult:
    """Refit ``profile`` on ``runs`` (method in the module docstring).

    ``held_out`` runs are only evaluated. ``options`` is the framework model every
    prediction uses (`costmodel.estimate.simulate_plan`): Megatron-LM's defaults unless
    given; the ``torch`` runtime (paraplan's executor) is calibrated by a backward scale,
    one time scale and a layer-collective scale instead (`reports.calibrate_time`,
    `reports.calibrate_layers`). Raises `SpecError` without runs, for a run
    without a measurement, or for a run on another kind of device than ``profile``'s
    (`check_same_device`).
    """
    if not runs:
        raise SpecError("calibrate needs at least one run folder with a measurement")
    for run in (*runs, *held_out):
        if run.measured is None:
            raise SpecError(
                f"{run.path}: no measured.json; calibrate from folders written by "
                "`paraplan execute PLAN.json --out RUN`"
            )
        check_same_device(profile, run)
    if runtime_model(options).calibration == "time_scale":
        return _calibrate_time(profile, runs, held_out, command, options)
    fits = fit_collectives(profile, (s for run in runs for s in comm_samples(run, profile)))
    stage1 = dataclasses.replace(
        profile,
        communication=dataclasses.replace(profile.communication, fits=with_fits(profile, fits)),
    )
    factors = fit_factors(stage1, runs, options)
    fitted = apply_factors(
        stage1,
        factors,
        gemm_dtypes={gemm_dtype(r.bundle.job.precision) for r in runs},
        attention_dtypes={activation_dtype(r.bundle.job.precision) for r in runs},
    )
    errors = tuple(
        [_run_error(r, profile, fitted, True, options) for r in runs]
        + [_run_error(r, profile, fitted, False, options) for r in held_out]
    )
    provenance = _provenance(profile, runs, command, _notes(profile, factors, fits, errors))
    name = profile.name if profile.name.endswith("-calibrated") else f"{profile.name}-calibrated"
    return CalibrationResult(
        profile=dataclasses.replace(fitted, name=name, provenance=provenance),
        base=profile,
        factors=factors,
        collectives=fits,
        runs=errors,
    )
