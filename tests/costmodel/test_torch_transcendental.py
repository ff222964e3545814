"""Transcendental element-wise kernels of the executor model
(`costmodel.runtimes.torch.transcendental_rates`): priced by their probe's line instead of
their bytes, counted by the layers, and carried into the estimate and the screen."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.torch.layers import head_ops, layer_ops, moe_ffn
from costmodel.runtimes.torch.ops import HostOps, host_seconds
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.transcendental_rates import NO_TRANSCENDENTAL
from costmodel.screen import screen_plans
from profiles.schema_host import TRANSCENDENTAL_OPS, HostTranscendental
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from tests.costmodel.cpu_fixture import OVERHEADS_S, cpu_profile, spread
from tests.costmodel.torch_fixture import CPU, MOE, RATES, TINY, shape

RMSNORM_POINTS = tuple(
    spread(f"memory.rmsnorm.fp32.{b}B", 60e-6 + b / 20e9) for b in (2**17, 2**19, 2**21)
)
"""RMSNorm points on t = 60 µs + bytes / 20 GB/s: element-wise kernels cost 10 µs (60 / 6)
and their counted bytes stream at 70 GB/s (7/2 x 20)."""


SLOW_PER_ELEMENT_S = 4e-9
"""Slope of the synthetic transcendental rows: far above the per-byte price."""


def with_transcendental(per_element_s: float, overheads: dict[str, float] | None = None):
    """The fixture with the RMSNorm points and every probed kernel on t = 3 µs + n·slope."""
    profile = cpu_profile(extra=RMSNORM_POINTS, overheads=overheads)
    rows = tuple(
        HostTranscendental(
            op=op, elements=n, num_samples=5, mean_s=3e-6 + n * per_element_s, min_s=0.0, max_s=1.0
        )
        for op in TRANSCENDENTAL_OPS
        for n in (2**15, 2**17, 2**19)
    )
    return dataclasses.replace(profile, host=dataclasses.replace(profile.host, transcendental=rows))


def test_transcendental_kernels_are_priced_by_the_probe_line_instead_of_their_bytes():
    rates = host_rates(with_transcendental(SLOW_PER_ELEMENT_S))
    assert rates.elementwise_op_s == pytest.approx(10e-6)
    silu = rates.transcendental.activation_forward
    assert silu.kernel_s == pytest.approx(3e-6 - 10e-6)  # the line's call less the counted one
    assert silu.element_s == pytest.approx(SLOW_PER_ELEMENT_S - 8 / 70e9)
    backward = rates.transcendental.log_softmax_backward
    assert backward.element_s == pytest.approx(SLOW_PER_ELEMENT_S - 12 / 70e9)
    # one SiLU forward as the layers count it costs its recorded operator's host work and
    # the probe's line: 3 µs + n·slope
    n = 50_000
    work = HostOps(ops=1, allocs=1, bytes=8 * n, activation_kernels=1, activation_elements=n)
    assert host_seconds(work, rates, backward=False) == pytest.approx(
        rates.forward_op_s - rates.dispatch_s + 3e-6 + n * SLOW_PER_ELEMENT_S
    )
    # a calibrated host speed (the profile's dispatch over the sweep's add) rescales the line
    faster = host_rates(with_transcendental(SLOW_PER_ELEMENT_S, {**OVERHEADS_S, "add": 4e-6}))
    assert faster.transcendental.activation_forward.element_s == pytest.approx(
        SLOW_PER_ELEMENT_S / 2 - 8 / 70e9
    )


def test_a_slow_transcendental_rate_predicts_a_slower_forward():
    plan, x = ParallelPlan(), shape()
    slow = host_rates(with_transcendental(SLOW_PER_ELEMENT_S))
    base = host_rates(cpu_profile(extra=RMSNORM_POINTS))
    layer = layer_ops(TINY, CPU, base, plan, x, is_moe=False)
    head = head_ops(TINY, CPU, x, 512)
    n_act, n_loss = 128 * TINY.ffn_hidden_size, 128 * 512  # T·F silu, T·V log_softmax
    assert layer.forward.activation_elements == layer.backward.activation_elements == n_act
    assert layer.forward.activation_kernels == 1
    assert head.forward.log_softmax_elements == head.backward.log_softmax_elements == n_loss
    for work, n, price in (
        (layer.forward, n_act, slow.transcendental.activation_forward),
        (head.forward, n_loss, slow.transcendental.log_softmax_forward),
    ):
        extra = host_seconds(work, slow, backward=False) - host_seconds(work, base, backward=False)
        assert extra > 0 and extra == pytest.approx(price.extra_s(1, n))


def test_a_profile_without_the_probe_prices_transcendental_kernels_per_byte():
    assert RATES.transcendental == NO_TRANSCENDENTAL
    work = head_ops(TINY, CPU, shape(), 512).forward
    per_byte = dataclasses.replace(work, log_softmax_kernels=0.0, log_softmax_elements=0.0)
    assert host_seconds(work, RATES, backward=False) == host_seconds(
        per_byte, RATES, backward=False
    )
    # rows whose time falls with the size give no line: nothing priced
    assert host_rates(with_transcendental(-1e-12)).transcendental == NO_TRANSCENDENTAL


def test_moe_experts_count_their_activation_and_the_router_none():
    ops = moe_ffn(MOE, CPU, ParallelPlan(dp=2, ep=2), shape(dp=2, ep=2))
    routed = MOE.moe_top_k * 128  # k·T rows over the local experts
    shared = 128 * MOE.moe_shared_expert_size
    assert ops.forward.activation_elements == pytest.approx(
        routed * MOE.expert_ffn_hidden_size + shared
    )
    assert ops.forward.activation_kernels == MOE.num_experts // 2 + 1  # local experts, shared
    # the router's softmaxes are routing bookkeeping, timed whole by the routing probe
    assert ops.forward.log_softmax_kernels == 0


def test_a_plan_on_a_slow_transcendental_profile_is_predicted_slower_and_screened_alike():
    job = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
    cluster = ClusterSpec(hardware="cpu-test", num_gpus=2, gpus_per_node=4)
    plan = ParallelPlan(dp=2)
    slow, base = with_transcendental(SLOW_PER_ELEMENT_S), cpu_profile(extra=RMSNORM_POINTS)
    times = [
        estimate_plan(TINY, cluster, job, plan, p, options=TORCH_OPTIONS).iteration_time_s
        for p in (base, slow)
    ]
    assert times[1] > times[0]
    screened = screen_plans(TINY, cluster, job, slow, plans_frame([plan]), options=TORCH_OPTIONS)
    assert screened["iteration_time_s"][0] == pytest.approx(times[1], rel=1e-12)
