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
2. Compute and pipeline sends: with the stage-1 fits in place, five factors are fitted by
   `scipy.optimize.least_squares` over all runs at once: a scale on the GEMM efficiency
   curve, a scale on the attention throughput curves (of the runs' dtypes only), a scale on
   `memory_bandwidth_efficiency`, the absolute `op_overhead_s`, and a time scale on the
   ``send_recv`` fits (latency times k, bandwidth over k; free only when a run has
   pipeline or context-parallel ring sends, whose gloo events carry no bytes). Every
   candidate profile is run through `costmodel.estimate.simulate_plan`, and the residuals
   are log-ratios ``ln((predicted + ε) / (measured + ε))`` of these targets per run:

   - ``iteration``: the median of the unprofiled steps' times (``metrics.json``), weight 2;
   - ``model``: forward, backward and recompute seconds plus the exposed tensor-, context-
     and expert-parallel traffic (the executor's pass ranges enclose their layer
     collectives, the cost model lays them out after the compute, so only the sum
     compares; a forward/backward split would be fitted through the attention scale, whose
     backward costs 2.5 forwards, while on a CPU the asymmetry is autograd's per-operator
     cost), weight 1;
   - ``optimizer``, weight 0.5 (torch's multi-tensor Adam launches fewer operators than the
     cost model's four passes per tensor, so it must not pin the op overhead alone);
   - ``idle`` (pipeline exposure plus bubble) when pp > 1, weight 1.

   Measured phases come from the profiled step(s) of ``measured.json`` (phase definitions
   of `reports.compare.rank_phase_seconds`, averaged over ranks), scaled by the ratio of the
   unprofiled median step to the profiled step, since profiling slows a CPU step by tens of
   percent. ε is 1% of the run's measured iteration, so phases of a few milliseconds in
   noise do not dominate. The soft-L1 loss (scale 0.1) bounds the pull of any one target
   that no factor explains, and a weak prior (0.1 per unit of log-scale) keeps scales that
   the runs cannot separate at their base value; the op overhead has no prior, so a fit on
   one small run explains extra time per operator rather than slower kernels.

Scales that would push an efficiency above 1 move the excess into the device peak
(`peak_tflops` or `hbm_GBps`), keeping peak x efficiency, and thus every predicted time,
the fitted one. Times are seconds (``_s``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np
from scipy.optimize import least_squares

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
from reports.calibrate_layers import fit_layer_scale, has_layer_collectives, layer_note, predictor
from reports.calibrate_phases import (
    measured_iteration_s,
    predict,
    split_factors,
    timeline_phases,
)
from reports.calibrate_time import fit_backward_scale, fit_time_scale, scale_at_bound
from reports.run_dir import RunDir
from specs.errors import SpecError

TARGET_WEIGHTS = {
    "iteration": 2.0,
    "model": 1.0,
    "optimizer": 0.5,
    "idle": 1.0,
}
"""Weight of each target's log-ratio residual."""
EPSILON_FRACTION = 0.01
"""ε of the log-ratios, as a fraction of the run's measured iteration time."""
PRIOR_WEIGHT = 0.1
"""Residual per unit of log-scale that pulls every scale toward its base value."""
SOFT_L1_SCALE = 0.1
"""Residual size beyond which a target's pull grows linearly instead of quadratically."""
LOG_SCALE_BOUND = math.log(100.0)
"""Scales stay within [1/100, 100] of the base profile."""
OVERHEAD_RANGE_S = (0.0, 0.5)
"""Bounds of the fitted op overhead, seconds."""
OVERHEAD_UNIT_S = 1e-4
"""Unit of the op overhead in the parameter vector: linear, so its gradient does not vanish
near zero as a logarithm's would, and of the order of a CPU operator's cost."""
FACTOR_NAMES = ("gemm", "attention", "memory", "overhead", "p2p")
"""Stage-2 parameters, in vector order (see `Factors`)."""
LAYER_COMM_PHASES = ("tp_exposed", "cp_exposed", "ep_exposed")
"""Exposed communication of the layers, inside the executor's forward/backward ranges."""


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


@dataclass(frozen=True, kw_only=True, slots=True)
class _Case:
    """One fitted run: the plan and its measured targets."""

    run: RunDir
    """The run folder."""
    targets: dict[str, float]
    """Measured seconds per target name (`targets`)."""
    epsilon_s: float
    """ε of the run's log-ratios, seconds."""


# ---- measured and predicted targets ---------------------------------------------------
def targets(phases: dict[str, float], iteration_s: float, run: RunDir) -> dict[str, float]:
    """The fitted quantities of one run (module docstring) from its phase seconds."""
    plan = run.bundle.plan
    passes = ("forward", "backward", "recompute", *LAYER_COMM_PHASES)
    out = {
        "iteration": iteration_s,
        "model": sum(phases[p] for p in passes),
        "optimizer": phases["optimizer"],
    }
    if plan.pp > 1:
        out["idle"] = phases["pp_exposed"] + phases["bubble"]
    return out


def _case(run: RunDir) -> _Case:
    if run.measured is None or not run.measured.events:
        raise SpecError(
            f"{run.path}: no measured timeline to calibrate from; run "
            "`paraplan execute PLAN.json --out RUN` and pass that folder"
        )
    iteration_s = measured_iteration_s(run)
    phases = timeline_phases(run.measured, iteration_time_s=iteration_s)
    return _Case(
        run=run,
        targets=targets(phases, iteration_s, run),
        epsilon_s=EPSILON_FRACTION * iteration_s,
    )


# ---- stage 2: the least-squares fit -----------------------------------------------------


def _free_factors(profile: HardwareProfile, runs: Sequence[RunDir]) -> list[str]:
    """Factors the runs can inform: attention only with curves of the runs' dtypes, p2p only
    with pipeline or context-parallel ring sends and a send_recv fit."""
    att = {activation_dtype(r.bundle.job.precision) for r in runs}
    names = ["gemm", "memory", "overhead"]
    if any(c.dtype in att for c in profile.compute.attention):
        names.append("attention")
    sends = any(
        r.bundle.plan.pp > 1 or (r.bundle.plan.cp > 1 and r.bundle.plan.cp_comm_type == "p2p")
        for r in runs
    )
    if sends and any(f.op == "send_recv" for f in profile.communication.fits):
        names.append("p2p")
    return [n for n in FACTOR_NAMES if n in names]


def _factors_at(x: np.ndarray, free: Sequence[str], base_overhead_s: float) -> Factors:
    values = dict(zip(free, x, strict=True))
    overhead_s = base_overhead_s
    if "overhead" in values:
        overhead_s = float(values["overhead"]) * OVERHEAD_UNIT_S
    return Factors(
        gemm_scale=math.exp(values.get("gemm", 0.0)),
        attention_scale=math.exp(values.get("attention", 0.0)),
        memory_bandwidth_scale=math.exp(values.get("memory", 0.0)),
        op_overhead_s=overhead_s,
        p2p_time_scale=math.exp(values.get("p2p", 0.0)),
    )


def _residuals(
    cases: Sequence[_Case],
    factors_at: Callable[[np.ndarray], Factors],
    profile_at: Callable[[Factors], HardwareProfile],
    prior_mask: np.ndarray,
    options: ExecutionOptions,
) -> Callable[[np.ndarray], np.ndarray]:
    """The weighted log-ratio residuals of every case's targets, then the prior's."""

    def residuals(x: np.ndarray) -> np.ndarray:
        profile = profile_at(factors_at(x))
        out = []
        for case in cases:
            iteration_s, timeline = predict(profile, case.run, options)
            predicted = targets(timeline_phases(timeline), iteration_s, case.run)
            eps = case.epsilon_s
            for name, measured in case.targets.items():
                ratio = (predicted[name] + eps) / (measured + eps)
                out.append(TARGET_WEIGHTS[name] * math.log(ratio))
        return np.concatenate([out, PRIOR_WEIGHT * x[prior_mask]])

    return residuals


def fit_factors(
    profile: HardwareProfile, runs: Sequence[RunDir], options: ExecutionOptions = DEFAULT_OPTIONS
) -> Factors:
    """Stage 2 of the module docstring on ``profile`` (stage-1 fits already applied)."""
    cases = [_case(run) for run in runs]
    gemm = {gemm_dtype(r.bundle.job.precision) for r in runs}
    att = {activation_dtype(r.bundle.job.precision) for r in runs}
    free = _free_factors(profile, runs)
    is_overhead = np.array([n == "overhead" for n in free])
    low = np.where(is_overhead, OVERHEAD_RANGE_S[0] / OVERHEAD_UNIT_S, -LOG_SCALE_BOUND)
    high = np.where(is_overhead, OVERHEAD_RANGE_S[1] / OVERHEAD_UNIT_S, LOG_SCALE_BOUND)
    base_overhead_s = profile.compute.op_overhead_s
    x0 = np.clip(np.where(is_overhead, base_overhead_s / OVERHEAD_UNIT_S, 0.0), low, high)

    def factors_at(x: np.ndarray) -> Factors:
        return _factors_at(x, free, base_overhead_s)

    def profile_at(factors: Factors) -> HardwareProfile:
        return apply_factors(profile, factors, gemm_dtypes=gemm, attention_dtypes=att)

    fit = least_squares(
        _residuals(cases, factors_at, profile_at, ~is_overhead, options),
        x0,
        bounds=(low, high),
        loss="soft_l1",
        f_scale=SOFT_L1_SCALE,
        diff_step=1e-3,
        max_nfev=300,
    )
    return factors_at(fit.x)


# ---- the whole calibration --------------------------------------------------------------


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
    `reports.calibrate_layers`). Raises `SpecError` without runs or for a run
    without a measurement.
    """
    if not runs:
        raise SpecError("calibrate needs at least one run folder with a measurement")
    for run in (*runs, *held_out):
        if run.measured is None:
            raise SpecError(
                f"{run.path}: no measured.json; calibrate from folders written by "
                "`paraplan execute PLAN.json --out RUN`"
            )
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
