"""The trace breakdown of transcendental kernels and Python gaps (`bench/trace_kernels.py`,
loaded by path) on a hand-made trace and the synthetic CPU profile."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.runtimes.torch.ops import HostOps
from costmodel.runtimes.torch.rates import host_rates
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.bench.bench_loader import load_bench
from tests.costmodel.cpu_fixture import cpu_profile

trace_kernels = load_bench("trace_kernels")


def _op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "cat": cat}


def test_a_step_sums_its_kernels_and_its_short_gaps_on_its_own_thread():
    events = [
        _op("paraplan/step 3", 0.0, 1000.0, cat="user_annotation"),
        _op("aten::silu", 10.0, 40.0),  # gap 10 µs before it
        _op("aten::empty", 12.0, 2.0),  # nested: no gap
        _op("aten::mm", 60.0, 100.0),  # gap 10 µs
        _op("aten::silu_backward", 400.0, 50.0),  # gap 240 µs: a wait, not Python
        _op("aten::_log_softmax", 470.0, 30.0),  # gap 20 µs
        _op("aten::silu", 600.0, 500.0, tid=2),  # another thread
        _op("aten::silu", 2000.0, 5.0),  # after the step
    ]
    (step,) = trace_kernels.step_figures(events)
    assert step.step_s == pytest.approx(1e-3)
    assert step.kernels_s == {
        ("forward", "activation"): pytest.approx(40e-6),
        ("backward", "activation"): pytest.approx(50e-6),
        ("forward", "log_softmax"): pytest.approx(30e-6),
    }
    assert step.small_gaps_s == pytest.approx(40e-6)


def test_the_charge_is_the_per_byte_price_without_the_probe():
    rates = host_rates(cpu_profile())
    work = HostOps(activation_kernels=2, activation_elements=1e5, log_softmax_kernels=1)
    expected = 3 * rates.elementwise_op_s + 1e5 * 8 / rates.elementwise_Bps
    assert trace_kernels.charged_s(work, rates, backward=False) == pytest.approx(expected)


def test_a_pipeline_stage_is_charged_its_own_chunks():
    profile = cpu_profile()
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu-test", num_gpus=2),
        job=TrainingJob(seq_length=128, global_batch_size=8, precision="fp32"),
        plan=ParallelPlan(pp=2),
    )
    first, last = (trace_kernels.stage_charged_s(bundle, profile, s) for s in (0, 1))
    assert last > first > 0  # the loss's log_softmax runs on the last stage only
    whole = dataclasses.replace(bundle, plan=ParallelPlan(dp=2))
    assert trace_kernels.stage_charged_s(whole, profile, 0) == pytest.approx(
        (first + last) / 2  # every layer and the loss, over half the microbatches
    )
