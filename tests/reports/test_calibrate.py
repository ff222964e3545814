"""Calibration (`reports.calibrate`, `paraplan calibrate`; the collective fits of
`reports.calibrate_comm`: `test_calibrate_comm.py`).

Synthetic runs: the "measured" timeline is the cost model's own prediction on a profile
perturbed by known factors, so calibration must recover those factors. The slow test runs
two real plans with `paraplan execute` on this CPU and checks that a profile fitted on one
predicts the other better than the profile it started from.

The runs start from ``data/cpu-quick-tiny.json`` (`tests.reports.calibrate_runs`), whose
compute figures are CPU time of one thread per rank, which is why real runs on a shared host
measure slower.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS
from paraplan.cli import main
from paraplan.commands import calibrate as command
from paraplan.commands import execute as execute_command
from profiles.lookup import (
    collective_fit,
    gemm_efficiency,
    memory_bandwidth_Bps,
    peak_flops,
)
from profiles.schema import HardwareProfile
from profiles.schema_device import BandwidthPoint
from profiles.store import load_profile
from reports.calibrate import (
    Factors,
    apply_factors,
    calibrate,
    measured_iteration_s,
    time_scaled,
)
from reports.calibrate_comm import (
    with_fits,
)
from reports.calibrate_phases import timeline_phases
from reports.run_dir import RunDir, load_run
from specs import serde
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.plan import ParallelPlan
from specs.timeline import Timeline, TimelineEvent
from tests.reports.calibrate_runs import (
    PROFILE,
    dp_all_reduce_call,
    hand_made_run,
    synthetic_run,
    tiny_bundle,
)

FP32 = {"gemm_dtypes": ["fp32"], "attention_dtypes": ["fp32"]}


def _perturbed(base: HardwareProfile, factors: Factors, latency: float, busbw: float):
    """``base`` with ``factors`` and the 2-rank all-reduce fit scaled by latency / busbw."""
    truth = apply_factors(base, factors, **FP32)
    fit = collective_fit(base, "all_reduce", 2, "intra")
    scaled = dataclasses.replace(
        fit, latency_s=fit.latency_s * latency, busbw_GBps=fit.busbw_GBps * busbw
    )
    comm = dataclasses.replace(truth.communication, fits=with_fits(truth, [scaled]))
    return dataclasses.replace(truth, communication=comm)


# ---- applying factors ---------------------------------------------------------------


def test_scaling_past_full_efficiency_moves_the_excess_into_the_peak(base) -> None:
    scaled = apply_factors(base, Factors(gemm_scale=3.0, op_overhead_s=0.0), **FP32)
    curve, old = scaled.compute.gemm_efficiency["fp32"], base.compute.gemm_efficiency["fp32"]
    assert max(p.efficiency for p in curve) == 1.0
    for new_point, old_point in zip(curve, old, strict=True):
        rate = peak_flops(scaled, "fp32") * new_point.efficiency
        assert rate == pytest.approx(3.0 * peak_flops(base, "fp32") * old_point.efficiency)
    # bf16 was not in the runs' dtypes: untouched.
    assert scaled.compute.gemm_efficiency["bf16"] == base.compute.gemm_efficiency["bf16"]
    assert scaled.device.peak_tflops["bf16"] == base.device.peak_tflops["bf16"]


def test_memory_scale_past_one_raises_the_bandwidth_peak(base) -> None:
    scale = 2.0 / base.compute.memory_bandwidth_efficiency
    scaled = apply_factors(base, Factors(memory_bandwidth_scale=scale, op_overhead_s=1e-5), **FP32)
    assert scaled.compute.memory_bandwidth_efficiency == 1.0
    assert scaled.device.hbm_GBps == pytest.approx(2.0 * base.device.hbm_GBps)
    assert scaled.compute.op_overhead_s == 1e-5


# ---- measured targets -----------------------------------------------------------------


def test_measured_iteration_is_the_median_of_the_unprofiled_steps(base) -> None:
    run = dataclasses.replace(
        hand_made_run([dp_all_reduce_call(0, 0.0, 0.01, 4)]),
        metrics={"iteration_time_s": [7.7, 0.2, 0.21, 0.19, 0.6, 0.5], "timed_steps": [0, 1, 2, 3]},
    )
    assert measured_iteration_s(run) == pytest.approx(0.205)


def test_profiled_phases_are_rescaled_to_the_unprofiled_iteration() -> None:
    def ev(kind: str, start: float, seconds: float, mb: int | None) -> TimelineEvent:
        lane = "optimizer" if kind == "optimizer" else "compute"
        return TimelineEvent(
            rank=0, lane=lane, name=kind, kind=kind, start_s=start, duration_s=seconds,
            microbatch=mb, chunk=None if mb is None else 0,
        )  # fmt: skip

    # One profiled step of 0.4 s: F 0.1, gap 0.05, B 0.2, optimizer 0.05.
    events = (
        ev("forward", 0.0, 0.1, 0),
        ev("backward", 0.15, 0.2, 0),
        ev("optimizer", 0.35, 0.05, None),
    )
    timeline = Timeline(source="measured", events=events, iteration_time_s=0.2)
    phases = timeline_phases(timeline, iteration_time_s=0.2)
    assert phases["forward"] == pytest.approx(0.05)
    assert phases["backward"] == pytest.approx(0.1)
    assert phases["optimizer"] == pytest.approx(0.025)
    assert phases["bubble"] == pytest.approx(0.025)


# ---- calibration on synthetic runs ----------------------------------------------------


def test_calibration_recovers_known_factors(base, tmp_path: Path) -> None:
    options = DEFAULT_OPTIONS  # the Megatron-LM model's five factors
    truth = _perturbed(base, Factors(gemm_scale=0.5, op_overhead_s=40e-6), 3.0, 0.5)
    bucketed = ParallelPlan(dp=2, ddp_bucket_size=150_000, overlap_grad_reduce=True)
    plans = [
        tiny_bundle(ParallelPlan()),
        tiny_bundle(ParallelPlan(micro_batch_size=4)),
        tiny_bundle(bucketed, seq=512, batch=4),
    ]
    runs = [synthetic_run(tmp_path / str(i), b, base, truth, options) for i, b in enumerate(plans)]
    held_bundle = tiny_bundle(ParallelPlan(dp=2), seq=256)
    held = synthetic_run(tmp_path / "held", held_bundle, base, truth, options)
    result = calibrate(base, runs, held_out=[held], options=options)
    f = result.factors
    assert f.gemm_scale == pytest.approx(0.5, rel=0.03)
    assert f.op_overhead_s == pytest.approx(40e-6, rel=0.03)
    assert f.attention_scale == pytest.approx(1.0, rel=0.03)
    assert f.memory_bandwidth_scale == pytest.approx(1.0, rel=0.03)
    (fit,) = result.collectives
    old = collective_fit(base, "all_reduce", 2, "intra")
    assert fit.latency_s == pytest.approx(3.0 * old.latency_s, rel=0.01)
    assert fit.busbw_GBps == pytest.approx(0.5 * old.busbw_GBps, rel=0.01)
    for e in result.runs:
        assert abs(e.error_before) > 0.2 and abs(e.error_after) < 0.01, e
    assert [e.fitted for e in result.runs] == [True, True, True, False]
    p = result.profile.provenance
    assert p.method == "calibrated" and p.sources == tuple(str(r.path) for r in runs)
    assert any("gemm efficiency x0.5" in note for note in p.notes)


def test_calibration_recovers_the_pipeline_send_time(base, tmp_path: Path) -> None:
    options = DEFAULT_OPTIONS
    truth = apply_factors(base, Factors(op_overhead_s=20e-6, p2p_time_scale=4.0), **FP32)
    plans = [tiny_bundle(ParallelPlan(pp=2)), tiny_bundle(ParallelPlan(micro_batch_size=2))]
    runs = [synthetic_run(tmp_path / str(i), b, base, truth, options) for i, b in enumerate(plans)]
    held_bundle = tiny_bundle(ParallelPlan(pp=2), seq=256)
    held = synthetic_run(tmp_path / "held", held_bundle, base, truth, options)
    result = calibrate(base, runs, held_out=[held], options=options)
    assert result.factors.p2p_time_scale == pytest.approx(4.0, rel=0.05)
    assert result.factors.op_overhead_s == pytest.approx(20e-6, rel=0.05)
    assert abs(result.runs[-1].error_after) < 0.02 < abs(result.runs[-1].error_before)


def test_executor_model_calibration_recovers_one_time_scale(base, tmp_path: Path) -> None:
    # A host 1.4 times slower than when profiled: every compute time of the profile x1.4.
    truth = time_scaled(base, 1.4)
    plans = [tiny_bundle(ParallelPlan(dp=2)), tiny_bundle(ParallelPlan(pp=2))]
    runs = [
        synthetic_run(tmp_path / str(i), b, base, truth, TORCH_OPTIONS) for i, b in enumerate(plans)
    ]
    held_bundle = tiny_bundle(ParallelPlan(tp=2, sequence_parallel=True), seq=256)
    held = synthetic_run(tmp_path / "held", held_bundle, base, truth, TORCH_OPTIONS)
    result = calibrate(base, runs, held_out=[held], options=TORCH_OPTIONS)
    assert result.factors.op_overhead_s == pytest.approx(1.4 * base.compute.op_overhead_s, rel=1e-3)
    assert result.factors.p2p_time_scale == 1.0  # the collectives keep their measured costs
    assert result.collectives == ()
    for e in result.runs:
        assert abs(e.error_after) < 0.02 < 0.1 < abs(e.error_before), e
    k = result.factors.op_overhead_s / base.compute.op_overhead_s
    assert any(f"x{k:.4g}" in note for note in result.profile.provenance.notes)
    # The executor model reads host costs from the measured spreads: they must carry over.
    assert base.provenance.spread
    assert result.profile.provenance.spread == base.provenance.spread


def test_time_scale_multiplies_every_compute_time_and_no_collective(base) -> None:
    for k in (0.5, 2.0):  # 0.5 pushes efficiencies past 1: the excess moves into the peaks
        scaled = time_scaled(base, k)
        assert scaled.compute.op_overhead_s == pytest.approx(k * base.compute.op_overhead_s)
        for m in (64, 512):
            rate = peak_flops(scaled, "fp32") * gemm_efficiency(scaled, m, m, m, "fp32")
            old = peak_flops(base, "fp32") * gemm_efficiency(base, m, m, m, "fp32")
            assert rate == pytest.approx(old / k)
        assert memory_bandwidth_Bps(scaled, 1e6) == pytest.approx(
            memory_bandwidth_Bps(base, 1e6) / k
        )
        assert scaled.communication == base.communication
        assert scaled.provenance.spread == base.provenance.spread  # excess, functional extra


def test_calibrate_needs_runs_with_a_measurement(base, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="at least one run"):
        calibrate(base, [])
    run = dataclasses.replace(hand_made_run([]), measured=None)
    with pytest.raises(SpecError, match=r"no measured\.json"):
        calibrate(base, [run])


# ---- the command ----------------------------------------------------------------------


def _command(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="paraplan calibrate")
    command.add_arguments(parser)
    return command.run(parser.parse_args(list(argv)))


def test_command_writes_the_profile_and_prints_both_errors(base, tmp_path: Path, capsys) -> None:
    assert command.NAME == "calibrate" and command.HELP
    truth = apply_factors(base, Factors(gemm_scale=0.7, op_overhead_s=30e-6), **FP32)
    fit = synthetic_run(tmp_path / "fit", tiny_bundle(ParallelPlan()), base, truth)
    held = synthetic_run(tmp_path / "held", tiny_bundle(ParallelPlan(dp=2)), base, truth)
    out = tmp_path / "cal.json"
    assert _command(str(fit.path), "-o", str(out), "--check", str(held.path)) == 0
    text = capsys.readouterr().out
    assert "(fitted)" in text and "(held out)" in text and f"calibrated profile: {out}" in text
    profile = load_profile(str(out))
    assert profile.provenance.method == "calibrated"
    assert profile.provenance.sources == (str(fit.path),)
    assert profile.name == "cpu-quick-tiny-calibrated"


def test_command_fits_runs_of_two_host_speeds_at_one(base, tmp_path: Path, capsys) -> None:
    plan = tiny_bundle(ParallelPlan())
    runs = []
    for name, speed in (("fast", 0.5), ("usual", 1.0)):  # the fast spell: half the time
        run = synthetic_run(tmp_path / name, plan, base, base)
        steps = [t * speed for t in run.metrics["iteration_time_s"]]
        metrics = {"iteration_time_s": steps, "host_probe_p50_s": 1e-3 * speed}
        (run.path / "metrics.json").write_text(json.dumps(metrics))
        runs.append(str(run.path))
    out = tmp_path / "cal.json"
    assert _command(*runs, "-o", str(out)) == 0
    apart = capsys.readouterr().out
    assert _command(*runs, "-o", str(out), "--host-speed", "1") == 0
    text = capsys.readouterr().out
    # both runs at the probes' geometric mean, 0.707 ms: 0.707x the prediction each
    assert "step times at one host speed: host probe 0.707 ms" in text
    after = [line.rsplit("(", 1)[1] for line in text.splitlines() if "(fitted)" in line]
    assert after == ["+0.0%)", "+0.0%)"]
    assert "+41.4%)" in apart and "-29.3%)" in apart  # one scale cannot fit both speeds
    assert load_profile(str(out)).provenance.command.endswith("--host-speed 1.0")


def test_command_refuses_runs_of_different_hardware(base, tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "a", tiny_bundle(ParallelPlan()), base, base)
    other = dataclasses.replace(
        run,
        bundle=dataclasses.replace(
            run.bundle, cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=1)
        ),
    )
    with pytest.raises(SpecError, match="--hardware"):
        command.base_profile(None, [run, other])
    assert command.base_profile(str(PROFILE), [run, other]).name == base.name


# ---- the calibration test: real runs on this CPU -------------------------------


def _execute(tmp_path: Path, name: str, plan: ParallelPlan) -> RunDir:
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan_file = tmp_path / f"{name}.json"
    plan_file.write_text(serde.dumps(tiny_bundle(plan, seq=32)))
    parser = argparse.ArgumentParser(prog="paraplan execute")
    execute_command.add_arguments(parser)
    out = tmp_path / name
    args = [str(plan_file), "--steps", "8", "--warmup", "1", "--out", str(out), "--host-probe"]
    assert execute_command.run(parser.parse_args(args)) == 0
    return load_run(out)


SAME_HOST_SPEED = 1.25
"""Largest ratio of two runs' host probes (`profiles.host_probe`) read as one host speed."""


def _execute_at_one_host_speed(
    tmp_path: Path, plans: dict[str, ParallelPlan], attempts: int = 3
) -> list[RunDir]:
    """The runs of ``plans``, executed again (up to ``attempts`` times) until their host
    probes agree within `SAME_HOST_SPEED`: the 2-core VM switches between a fast and a slow
    state (probe about 0.45 or 0.75 ms), and a fit on a run of one state checked on a run
    of the other tells the host's switch, not the calibration."""
    for attempt in range(attempts):
        runs = [_execute(tmp_path / str(attempt), name, plan) for name, plan in plans.items()]
        probes = [float(r.metrics["host_probe_p50_s"]) for r in runs]
        if max(probes) / min(probes) <= SAME_HOST_SPEED:
            return runs
    pytest.skip(f"the host changed speed between the runs in {attempts} attempts: {probes}")


@pytest.mark.slow
def test_a_profile_fitted_on_one_run_predicts_another_plan_better(base, tmp_path: Path) -> None:
    # Both runs have 2 ranks, like the profile (a 1-rank run gets both cores' threads: a
    # different machine per rank). Fit on a 2-stage pipeline, which informs compute and
    # the pipeline sends; check on data parallelism: the same per-rank work laid out
    # differently. Each run is measured once, and both errors of the held-out run use that
    # one measurement. Sequences of 32 tokens keep both plans dominated by per-operator
    # framework cost, which the base profile (kernel CPU time) leaves out, so the base
    # error is large, and the ratio of the two runs' times, which host load on this shared
    # machine moves, stays near the predicted one, provided both runs see one host speed
    # (`_execute_at_one_host_speed`; a pair of a fast and a slow state once gave -52% before
    # and +54% after). Four pairs at one speed on the 2-core VM: held-out error -56%..-77%
    # before, -22%..+9% after.
    fitted, held = _execute_at_one_host_speed(
        tmp_path, {"pp2": ParallelPlan(pp=2), "dp2": ParallelPlan(dp=2)}
    )
    # The Megatron-LM model on this CPU profile: kernels only, the framework's per-operator
    # cost left out, i.e. a base that is far off, which is what calibration is for. The
    # executor model (the default on a CPU profile) starts within about 15% on both plans,
    # where a fit on one noisy run cannot be expected to help another (bench/fidelity.py
    # --calibrate measures that case).
    result = calibrate(base, [fitted], held_out=[held], options=DEFAULT_OPTIONS)
    fit_error, held_error = result.runs
    for e in result.runs:
        print(f"{e.plan} fitted={e.fitted}: {e.error_before:+.1%} -> {e.error_after:+.1%}")
    assert abs(fit_error.error_after) < abs(fit_error.error_before)
    assert abs(held_error.error_after) < abs(held_error.error_before)


def test_memory_scale_keeps_the_size_curve_in_proportion(base) -> None:
    curve = (
        BandwidthPoint(bytes_moved=1e5, efficiency=0.9),  # cache-resident: above the flat
        BandwidthPoint(bytes_moved=1e7, efficiency=0.3),
    )
    with_curve = dataclasses.replace(
        base, compute=dataclasses.replace(base.compute, memory_bandwidth_curve=curve)
    )
    factors = Factors(memory_bandwidth_scale=2.0, op_overhead_s=base.compute.op_overhead_s)
    scaled = apply_factors(with_curve, factors, **FP32)
    for size in (1e5, 1e6, 1e7):
        assert memory_bandwidth_Bps(scaled, size) == pytest.approx(
            2.0 * memory_bandwidth_Bps(with_curve, size)
        )
    assert memory_bandwidth_Bps(scaled) == pytest.approx(2.0 * memory_bandwidth_Bps(with_curve))


def test_cpu_runs_are_not_fitted_into_a_gpu_profile(base, tmp_path: Path, capsys) -> None:
    run = synthetic_run(tmp_path / "cpu", tiny_bundle(ParallelPlan(dp=2)), base, base)
    metrics = {**run.metrics, "memory_source": "profiler_memory_events"}  # a CPU run's
    (run.path / "metrics.json").write_text(json.dumps(metrics))
    out = tmp_path / "cal.json"
    argv = ["calibrate", str(run.path), "-o", str(out), "--hardware", "h100-sxm-80gb"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"paraplan calibrate: error: [calibration_device_kind] {run.path} ran on cpu ranks "
        "but the base profile 'h100-sxm-80gb' describes a gpu"
    )
    assert f"its plan's cluster.hardware is {str(PROFILE)!r}" in err
    assert not out.exists()
    assert main(argv[:4]) == 0  # the plan's own CPU profile
