"""The torch runtime on a profile without a host section (every GPU profile) is priced
kernel-bound: no host cost per operator, node, tensor or call
(`costmodel.runtimes.torch.host_rates.kernel_bound_rates`), so its step time is its kernels'
time alone and scales with the device's rates."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.runtimes.torch.host_rates import kernel_bound_rates
from costmodel.runtimes.torch.rates import host_rates
from profiles.lookup import memory_bandwidth_Bps
from profiles.schema import HardwareProfile
from profiles.store import load_profile, stored_profile_names
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile

GPU = load_profile("h100-sxm-80gb")


def _faster(profile: HardwareProfile, k: float) -> HardwareProfile:
    """``profile`` with every device rate (peaks, memory bandwidth, attention) k times."""
    device = dataclasses.replace(
        profile.device,
        peak_tflops={d: v * k for d, v in profile.device.peak_tflops.items()},
        hbm_GBps=profile.device.hbm_GBps * k,
    )
    attention = tuple(
        dataclasses.replace(
            c, points=tuple(dataclasses.replace(p, tflops=p.tflops * k) for p in c.points)
        )
        for c in profile.compute.attention
    )
    compute = dataclasses.replace(profile.compute, attention=attention)
    return dataclasses.replace(profile, device=device, compute=compute)


def _iteration_s(profile: HardwareProfile) -> float:
    plan = ParallelPlan(micro_batch_size=2)
    estimate, _ = simulate_plan(
        get_preset("tiny"),
        ClusterSpec(hardware=profile.name, num_gpus=1, gpus_per_node=1),
        TrainingJob(seq_length=256, global_batch_size=8, precision="bf16"),
        plan,
        profile,
        options=TORCH_OPTIONS,
        timeline=False,
    )
    return estimate.iteration_time_s


@pytest.mark.parametrize("name", stored_profile_names())
def test_every_gpu_profile_has_zero_host_costs(name: str) -> None:
    profile = load_profile(name)
    rates = host_rates(profile)
    assert rates == kernel_bound_rates(profile)
    seconds = {f.name: getattr(rates, f.name) for f in dataclasses.fields(rates)}
    assert all(v == 0.0 for k, v in seconds.items() if k.endswith("_s")), seconds
    assert rates.bandwidth_Bps == rates.elementwise_Bps == memory_bandwidth_Bps(profile)
    assert rates.collective_excess == rates.functional_extra == rates.redistribute_extra == ()


def test_a_gpu_step_has_no_host_term_so_it_scales_with_the_device() -> None:
    base = _iteration_s(GPU)
    assert _iteration_s(_faster(GPU, 10.0)) == pytest.approx(base / 10.0, rel=1e-9)


def test_the_same_figures_with_a_host_section_keep_a_host_term() -> None:
    host = cpu_profile().host
    as_cpu = dataclasses.replace(
        GPU,
        device=dataclasses.replace(GPU.device, kind="cpu"),
        compute=dataclasses.replace(GPU.compute, op_overhead_s=2e-6),
        host=host,
    )
    base = _iteration_s(as_cpu)
    assert base > _iteration_s(GPU)
    assert _iteration_s(_faster(as_cpu, 10.0)) > 1.5 * base / 10.0
