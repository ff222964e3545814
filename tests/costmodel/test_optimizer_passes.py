"""Gradient and optimizer passes from a hardware profile (costmodel.optimizer_passes)."""

from __future__ import annotations

import pytest

from costmodel.optimizer_passes import grad_buffer_passes_time_s, optimizer_step_time_s
from profiles.lookup import memory_bandwidth_Bps
from profiles.store import load_profile

H100 = load_profile("h100-sxm-80gb")


def test_optimizer_step_bytes():
    # Adam with fp32 master weights: 30 bytes per shard parameter plus the gradient-norm
    # read of the shard's fp32 main gradients (4; Megatron-core get_main_grads_for_grad_norm
    # over the optimizer's shard parameters), 4 per local parameter (zeroing the buffer).
    bw = memory_bandwidth_Bps(H100)
    t = optimizer_step_time_s(
        H100, shard_params=1e9, local_params=4e9, mixed_precision=True, num_tensors=10
    )
    assert t == pytest.approx((34e9 + 16e9) / bw)
    # A bf16 gradient buffer is copied to fp32 main gradients (read 2, write 4) that the
    # norm then reads (4); zeroing writes 2 per local parameter.
    bf16 = optimizer_step_time_s(
        H100,
        shard_params=1e9,
        local_params=4e9,
        mixed_precision=True,
        num_tensors=10,
        main_grad_bytes=2,
    )
    assert bf16 == pytest.approx((40e9 + 8e9) / bw)
    fp32 = optimizer_step_time_s(
        H100, shard_params=1e9, local_params=0, mixed_precision=False, num_tensors=10
    )
    assert fp32 == pytest.approx((28e9 + 4e9) / bw)  # in-place update, norm of the shard


def test_grad_buffer_passes_divide_and_check_the_fp32_buffer():
    # Division by the data-parallel size in place (read + write 4 bytes) and the NaN check's
    # norm (read 4 bytes) per gradient element.
    params, bw = 1e9, memory_bandwidth_Bps(H100)
    both = grad_buffer_passes_time_s(H100, params, 4, scale=True, nan_check=True)
    assert both == pytest.approx(12 * params / bw)
    scale_only = grad_buffer_passes_time_s(H100, params, 2, scale=True, nan_check=False)
    assert scale_only == pytest.approx(4 * params / bw)
    assert grad_buffer_passes_time_s(H100, params, scale=False, nan_check=False) == 0.0
