"""Host rates of the executor model read from a profile
(`costmodel.runtimes.torch.rates.host_rates`, `costmodel.runtimes.torch.host_rates`): the
profile's spreads and their fallbacks, the element-wise, transpose and AdamW byte rates,
pipelining posts, and a calibrated bandwidth or op overhead."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.runtimes.torch.host_rate_fits import DTENSOR_FALLBACK_RATIOS
from costmodel.runtimes.torch.ops import HostOps, host_seconds
from costmodel.runtimes.torch.rates import host_rates
from tests.costmodel.cpu_fixture import ADAMW_BPS, ADAMW_TENSOR_S, OVERHEADS_S, cpu_profile, spread
from tests.costmodel.torch_fixture import RATES


def test_rates_come_from_the_profile_spreads():
    assert RATES.dispatch_s == 2e-6
    assert RATES.forward_op_s == OVERHEADS_S["autograd_forward"]
    assert RATES.backward_node_s == OVERHEADS_S["autograd_backward_node"]
    assert RATES.backward_call_s == OVERHEADS_S["autograd_backward_call"]
    assert RATES.dtensor_linear_backward_s == OVERHEADS_S["dtensor_linear_backward"]
    assert RATES.bandwidth_Bps == pytest.approx(50e9)
    # The AdamW points lie on 80 µs per tensor + bytes / 10 GB/s (fixture).
    assert RATES.adamw_tensor_s == pytest.approx(ADAMW_TENSOR_S)
    assert RATES.adamw_Bps == pytest.approx(ADAMW_BPS)


def test_rates_fall_back_without_the_framework_points():
    old = host_rates(
        cpu_profile(overheads={"autograd_forward": 5e-6, "autograd_backward": 14e-6}, adamw=False)
    )
    assert old.backward_node_s == 14e-6 and old.backward_call_s == 0.0
    assert old.dtensor_forward_s == pytest.approx(DTENSOR_FALLBACK_RATIOS["dtensor_forward"] * 5e-6)
    assert old.adamw_tensor_s == pytest.approx(9 * 2e-6)  # nine operators of one dispatch
    assert old.fsdp_gather_s == pytest.approx(8 * 2e-6)
    assert old.fsdp_gather_tensor_s == pytest.approx(2 * 2e-6)  # two dispatches
    assert old.fsdp_reduce_tensor_s == pytest.approx(old.dtensor_from_local_s)
    assert old.dtensor_adamw_tensor_s == pytest.approx(
        old.adamw_tensor_s + 7 * old.dtensor_forward_s
    )
    bare = host_rates(cpu_profile(overheads={}, adamw=False))
    assert bare.forward_op_s == bare.dispatch_s == bare.backward_node_s == 2e-6


def test_elementwise_kernels_are_priced_by_the_executor_rmsnorm():
    # RMSNorm points on t = 60 µs + bytes / 20 GB/s (nominal 2·N·e bytes), at or below the
    # fit's size limit, and one far above it that the fit must ignore.
    points = [spread(f"memory.rmsnorm.fp32.{b}B", 60e-6 + b / 20e9) for b in (2**17, 2**19, 2**21)]
    points.append(spread("memory.rmsnorm.fp32.67108864B", 1.0))
    rates = host_rates(cpu_profile(extra=tuple(points)))
    assert rates.elementwise_op_s == pytest.approx(10e-6)  # 60 µs over six kernels
    assert rates.elementwise_Bps == pytest.approx(20e9 * 7 / 2)  # 7·N·e counted bytes
    assert RATES.elementwise_op_s == RATES.dispatch_s  # no points: one dispatch
    assert RATES.elementwise_Bps == pytest.approx(50e9)


def test_a_convex_rmsnorm_curve_keeps_its_slope():
    # Points that bend upwards past the per-core cache: t = bytes / 5 GB/s up to 1 MiB,
    # twice that per byte beyond. The least-squares line has a negative intercept; its slope
    # still prices the element-wise bytes, not the streaming bandwidth of x + y (50 GB/s).
    sizes = (2**17, 2**18, 2**19, 2**20, 2**21, 2**22)
    points = tuple(
        spread(f"memory.rmsnorm.fp32.{b}B", b / 5e9 if b <= 2**20 else (2 * b - 2**20) / 5e9)
        for b in sizes
    )
    rates = host_rates(cpu_profile(extra=points))
    n = len(sizes)
    xs = [float(b) for b in sizes]
    ys = [b / 5e9 if b <= 2**20 else (2 * b - 2**20) / 5e9 for b in sizes]
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    assert my - slope * mx < 0  # the fixture's line is degenerate for a positive-intercept fit
    assert rates.elementwise_Bps == pytest.approx(7 / 2 / slope)
    assert rates.elementwise_Bps < 50e9 / 2
    assert rates.elementwise_op_s == rates.dispatch_s  # no kernel cost beyond the dispatch


def test_transposing_copies_have_their_own_rate():
    # Transpose points on t = 5 µs + bytes / 4 GB/s: the rate is the line's slope; without
    # points a transpose streams like an element-wise kernel.
    points = tuple(
        spread(f"memory.transpose.fp32.{b}B", 5e-6 + b / 4e9) for b in (2**17, 2**19, 2**21)
    )
    rates = host_rates(cpu_profile(extra=points))
    assert rates.transpose_Bps == pytest.approx(4e9)
    assert RATES.transpose_Bps == RATES.elementwise_Bps
    work = HostOps(transposed_bytes=8e6)
    assert host_seconds(work, rates, backward=True) == pytest.approx(8e6 / 4e9)


def test_pipelining_p2p_posts_are_priced_as_measured():
    rates = host_rates(cpu_profile(extra=(spread("op_overhead.p2p_post", 250e-6),)))
    assert rates.p2p_post_s == 250e-6  # read as measured, not relative to the dispatch
    assert RATES.p2p_post_s == pytest.approx(3 * RATES.dispatch_s)  # fallback: 3 dispatches
    assert host_seconds(HostOps(p2p_posts=4), rates, backward=False) == pytest.approx(1e-3)


def test_byte_rates_follow_a_calibrated_bandwidth():
    # The profile's own x + y points stream at exactly its fitted bandwidth (50 GB/s,
    # 3 passes of 4 bytes); halving memory_bandwidth_efficiency halves every byte rate.
    adds = tuple(spread(f"memory.add.fp32.{b}B", 2e-6 + b / 50e9) for b in (2**18, 2**20, 2**22))
    base = cpu_profile(extra=adds)
    slow = dataclasses.replace(
        base, compute=dataclasses.replace(base.compute, memory_bandwidth_efficiency=0.25)
    )
    a, b = host_rates(base), host_rates(slow)
    assert a.adamw_Bps == pytest.approx(ADAMW_BPS, rel=1e-6)
    assert b.adamw_Bps == pytest.approx(ADAMW_BPS / 2, rel=1e-6)
    # A calibrated op overhead rescales every host cost read from the spreads (relative to
    # the plain dispatch of the same sweep, here 2 µs).
    plain = cpu_profile(extra=(spread("op_overhead.add", 2e-6),))
    halved = dataclasses.replace(
        plain, compute=dataclasses.replace(plain.compute, op_overhead_s=1e-6)
    )
    assert host_rates(halved).forward_op_s == pytest.approx(host_rates(plain).forward_op_s / 2)
