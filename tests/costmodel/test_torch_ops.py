"""Host prices of single operators and modules of the executor model
(`costmodel.runtimes.torch.ops`): `host_seconds` per count, a linear's nodes and gradient
accumulation, the bytes of RMSNorm and RoPE, and a sequence-parallel norm."""

from __future__ import annotations

import pytest

from costmodel.compute import gemm_time_s
from costmodel.runtimes.torch.ops import FP32, HostOps, host_seconds, linear, rms_norm, rope
from costmodel.runtimes.torch.rates import host_rates
from tests.costmodel.cpu_fixture import cpu_profile, spread
from tests.costmodel.torch_fixture import CPU, RATES


def test_host_seconds_prices_each_count():
    work = HostOps(ops=10, views=4, kernels=2, bytes=5e6, kernel_s=1e-3, dt_ops=1, dt_wraps=1)
    forward = host_seconds(work, RATES, backward=False)
    assert forward == pytest.approx(10 * 5e-6 + 6 * 2e-6 + 5e6 / 50e9 + 1e-3 + 40e-6 + 100e-6)
    backward = host_seconds(work, RATES, backward=True)
    assert backward == pytest.approx(10 * 8e-6 + 6 * 2e-6 + 5e6 / 50e9 + 1e-3 + 40e-6 + 100e-6)
    assert HostOps(ops=1).plus(HostOps(ops=2)).scaled(2).ops == 6


def test_linear_counts_its_nodes_and_gradient_accumulation():
    plain = linear(CPU, 128, 256, 128, accumulate=0.5)
    kernel = gemm_time_s(CPU, 128, 256, 128, "fp32") - 2e-6
    assert plain.forward == HostOps(ops=1, views=3, kernel_s=pytest.approx(kernel))
    # UnsafeView, Mm, T, View nodes and the weight's AccumulateGrad; dgrad + wgrad.
    assert plain.backward.ops == 5 and plain.backward.kernels == 1
    assert plain.backward.bytes == pytest.approx(0.5 * 3 * FP32 * 256 * 128)
    dt = linear(CPU, 128, 256, 128, dtensor=True)
    assert dt.forward.dt_linears == dt.backward.dt_linears == 1 and dt.forward.ops == 0


def test_norm_and_rope_bytes():
    norm = rms_norm(128, 128)
    n = 128 * 128
    assert norm.forward.ops == 6 and norm.forward.bytes == 7 * n * FP32
    assert norm.backward.ops == 7 and norm.backward.bytes == 24 * n * FP32
    sp = rms_norm(64, 128, dtensor=True)
    assert (sp.forward.dt_norms, sp.forward.ops, sp.forward.dt_ops) == (1, 0, 0)
    assert sp.forward.bytes == 7 * 64 * 128 * FP32
    r = rope(1000)
    assert (r.forward.ops, r.forward.views, r.forward.bytes) == (5, 5, 10 * 1000 * FP32)
    assert r.backward.ops == 6 and r.backward.bytes == 12 * 1000 * FP32


def test_a_sequence_parallel_norm_pays_the_profiled_module_or_its_operators():
    # Without the probe: the operators at the DTensor chain rate (the counts of rms_norm).
    sp = rms_norm(64, 128, dtensor=True)
    counted_fwd = host_seconds(
        HostOps(dt_ops=6, views=3, allocs=6, dt_wraps=1, bytes=7 * 64 * 128 * FP32),
        RATES,
        backward=False,
    )
    assert RATES.dtensor_norm_forward_s == 0.0
    assert host_seconds(sp.forward, RATES, backward=False) == pytest.approx(counted_fwd)
    # With it: the probe's figure per call (relative to the dispatch, as the other host
    # rates), the norm's bytes on top.
    probed = cpu_profile(
        extra=(
            spread("op_overhead.dtensor_norm_forward", 400e-6),
            spread("op_overhead.dtensor_norm_backward", 700e-6),
        )
    )
    rates = host_rates(probed)
    assert (rates.dtensor_norm_forward_s, rates.dtensor_norm_backward_s) == pytest.approx(
        (400e-6, 700e-6)
    )
    bytes_s = 24 * 64 * 128 * FP32 / rates.elementwise_Bps
    assert host_seconds(sp.backward, rates, backward=True) == pytest.approx(700e-6 + bytes_s)
    plain = rms_norm(128, 128)
    assert host_seconds(plain.forward, rates, backward=False) == pytest.approx(
        host_seconds(plain.forward, RATES, backward=False)
    )
