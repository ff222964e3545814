"""Attention core times from a hardware profile (costmodel.attention_core)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import compute as ops
from costmodel.attention_core import attention_core_time_s, flash_exp_time_s, softmax_dropout_time_s
from profiles.lookup import attention_tflops, gemm_efficiency
from profiles.store import load_profile
from specs.errors import SpecError

A100 = load_profile("a100-sxm-80gb")
H100 = load_profile("h100-sxm-80gb")
B200 = load_profile("b200")


def test_flash_attention_uses_the_profile_throughput():
    # 1 TFLOP of causal forward attention at s = 2048: the A100 FA2 curve gives 207.1
    # TFLOP/s (profiles/data/a100-sxm-80gb.json); backward does 2.5 x the FLOPs.
    flops = 1e12
    kwargs = dict(
        causal_forward_flops=flops,
        batch_heads=32,
        seq_q=2048,
        seq_kv=2048,
        head_dim=128,
        precision="bf16",
        kernel="flash",
    )
    fwd = attention_core_time_s(A100, direction="forward", **kwargs)
    bwd = attention_core_time_s(A100, direction="backward", **kwargs)
    assert fwd == pytest.approx(flops / 207.1e12)
    rate = attention_tflops(A100, "backward", 2048, 128, "bf16")
    assert bwd == pytest.approx(2.5 * flops / (rate * 1e12))


def test_materialized_attention_runs_the_full_square_and_the_softmax():
    b_h, s, d = 64, 2048, 128
    kwargs = dict(
        causal_forward_flops=2 * b_h * s * s * d,
        batch_heads=b_h,
        seq_q=s,
        seq_kv=s,
        head_dim=d,
        precision="bf16",
        kernel="materialized",
    )
    fwd = attention_core_time_s(A100, direction="forward", **kwargs)
    gemms = ops.batched_gemm_time_s(A100, b_h, s, s, d, "bf16") + ops.batched_gemm_time_s(
        A100, b_h, s, d, s, "bf16"
    )
    softmax = softmax_dropout_time_s(A100, b_h * s * s, 2, "forward")
    assert fwd == pytest.approx(gemms + softmax)
    flash = attention_core_time_s(A100, direction="forward", **{**kwargs, "kernel": "flash"})
    assert fwd > flash  # the score matrix goes through memory several times


def test_attention_without_a_curve_falls_back_to_gemm_efficiency():
    bare = dataclasses.replace(A100, compute=dataclasses.replace(A100.compute, attention=()))
    t = attention_core_time_s(
        bare,
        causal_forward_flops=1e12,
        batch_heads=8,
        seq_q=4096,
        seq_kv=4096,
        head_dim=128,
        precision="bf16",
        kernel="flash",
        direction="forward",
    )
    rate = 312e12 * gemm_efficiency(A100, 4096, 4096, 128, "bf16")
    assert t == pytest.approx(1e12 / rate)


def _flash(profile, head_dim: int, direction: str, precision: str = "bf16") -> float:
    return attention_core_time_s(
        profile,
        causal_forward_flops=1e12,
        batch_heads=32,
        seq_q=4096,
        seq_kv=4096,
        head_dim=head_dim,
        precision=precision,
        kernel="flash",
        direction=direction,
    )


def _with_exp_rate(profile, exp_per_s: float):
    return dataclasses.replace(
        profile, compute=dataclasses.replace(profile.compute, exp_per_s=exp_per_s)
    )


def test_flash_exponentials_count_one_per_causal_score():
    # B200 SFU: 5e12 exponentials/s (hardware.md [S9]); 1 TFLOP of causal forward
    # attention at head dim 64 holds 1e12 / (4 * 64) scores (QK^T and PV, 2d FLOPs each).
    assert B200.compute.exp_per_s == 5.0e12
    assert flash_exp_time_s(B200, 1e12, 64) == pytest.approx(1e12 / 256 / 5.0e12)
    assert flash_exp_time_s(B200, 1e12, 128) == pytest.approx(1e12 / 512 / 5.0e12)
    assert flash_exp_time_s(H100, 1e12, 64) == 0.0  # no sourced SFU figure


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_attention_takes_the_larger_of_tensor_and_exponential_time(direction, head_dim):
    tensor_s = _flash(_with_exp_rate(B200, 0.0), head_dim, direction)
    exp_s = flash_exp_time_s(B200, 1e12, head_dim)
    assert _flash(B200, head_dim, direction) == pytest.approx(max(tensor_s, exp_s))
    slow_sfu = _with_exp_rate(B200, 1e11)  # far below any tensor rate: the SFU binds
    assert _flash(slow_sfu, head_dim, direction) == pytest.approx(
        flash_exp_time_s(slow_sfu, 1e12, head_dim)
    )


def test_profiles_without_an_sfu_figure_keep_their_attention_curve():
    assert _flash(H100, 128, "forward") == pytest.approx(
        1e12 / (attention_tflops(H100, "forward", 4096, 128, "bf16") * 1e12)
    )


def test_negative_exp_rate_is_rejected():
    with pytest.raises(SpecError, match="exp_per_s"):
        _with_exp_rate(B200, -1.0)


def test_unknown_attention_kernel_is_refused():
    with pytest.raises(SpecError, match="kernel"):
        attention_core_time_s(
            A100,
            causal_forward_flops=1,
            batch_heads=1,
            seq_q=8,
            seq_kv=8,
            head_dim=8,
            precision="bf16",
            kernel="xformers",
            direction="forward",
        )
