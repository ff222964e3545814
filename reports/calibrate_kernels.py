"""Stage 2 of the Megatron-LM model's calibration (`reports.calibrate`, the runtime's
``kernel_factors`` calibration): five factors fitted by least squares on the runs' phases.

With the stage-1 collective fits (`reports.calibrate_comm`) in place, five factors are
fitted by `scipy.optimize.least_squares` over all runs at once: a scale on the GEMM
efficiency curve, a scale on the attention throughput curves (of the runs' dtypes only), a
scale on `memory_bandwidth_efficiency`, the absolute `op_overhead_s`, and a time scale on
the ``send_recv`` fits (latency times k, bandwidth over k; free only when a run has pipeline
or context-parallel ring sends, whose gloo events carry no bytes). Every candidate profile
(`reports.calibrate_factors.apply_factors`) is run through
`costmodel.estimate.simulate_plan`, and the residuals are log-ratios
``ln((predicted + ε) / (measured + ε))`` of these targets per run:

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
of `reports.phase_seconds.rank_phase_seconds`, averaged over ranks), scaled by the ratio of the
unprofiled median step to the profiled step, since profiling slows a CPU step by tens of
percent. ε is 1% of the run's measured iteration, so phases of a few milliseconds in
noise do not dominate. The soft-L1 loss (scale 0.1) bounds the pull of any one target
that no factor explains, and a weak prior (0.1 per unit of log-scale) keeps scales that
the runs cannot separate at their base value; the op overhead has no prior, so a fit on
one small run explains extra time per operator rather than slower kernels. Times are
seconds (``_s``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from costmodel.compute import activation_dtype, gemm_dtype
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from profiles.schema import HardwareProfile
from reports.calibrate_factors import Factors, apply_factors
from reports.calibrate_phases import measured_iteration_s, predict, timeline_phases
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
