"""Operator times from a hardware profile (costmodel.compute)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import compute as ops
from profiles.lookup import gemm_efficiency, memory_bandwidth_Bps
from profiles.store import load_profile
from specs.errors import SpecError

A100 = load_profile("a100-sxm-80gb")
H100 = load_profile("h100-sxm-80gb")


def with_overhead(profile, seconds: float):
    return dataclasses.replace(
        profile, compute=dataclasses.replace(profile.compute, op_overhead_s=seconds)
    )


def test_large_gemm_runs_at_the_profile_efficiency():
    # 8192^3 is 1100 GFLOP, past the A100 curve's last point: 257 of 312 TFLOP/s, the rate
    # an 8192^3 matmul sustains on random inputs at the power limit (H. He 2024 [S55] in
    # profiles/data/a100-sxm-80gb.json). The burst MAMF of 271.2 [S1] it replaces is the
    # fastest of 100 iterations, not what hours of training see.
    n = 8192
    expected = 2 * n**3 / (312e12 * 0.8237)
    assert ops.gemm_time_s(A100, n, n, n, "bf16") == pytest.approx(expected, rel=1e-9)


def test_thin_gemm_is_memory_bound():
    # QKᵀ over a head dim of 64: ~64 FLOP/byte, below the A100 ridge point (312e12 / 2.04e12
    # = 153 FLOP/byte), so the time is the bytes moved at the achievable bandwidth.
    m = n = 4096
    k = 64
    moved = (m * k + k * n) * 2 + m * n * 2
    compute_s = 2 * m * n * k / (312e12 * gemm_efficiency(A100, m, n, k, "bf16"))
    time_s = ops.gemm_time_s(A100, m, n, k, "bf16")
    assert time_s == pytest.approx(moved / memory_bandwidth_Bps(A100), rel=1e-9)
    assert time_s > compute_s


def test_misaligned_gemm_is_slower_than_its_aligned_neighbour():
    # H100 SwiGLU d_ff 10922 vs 10944 (hardware.md §2a [S24]): misalignment costs ~30%.
    aligned = ops.gemm_time_s(H100, 8192, 10944, 4096, "bf16")
    misaligned = ops.gemm_time_s(H100, 8192, 10922, 4096, "bf16")
    assert misaligned > 1.3 * aligned


def test_batched_gemm_counts_every_matrix():
    one = ops.gemm_time_s(A100, 2048, 2048, 2048, "bf16")
    many = ops.batched_gemm_time_s(A100, 64, 2048, 2048, 2048, "bf16")
    assert 16 * one < many < 64 * one  # better efficiency in one kernel, same total work


def test_every_operator_pays_the_launch_overhead():
    slow = with_overhead(A100, 1e-3)
    assert ops.gemm_time_s(slow, 64, 64, 64, "bf16") == pytest.approx(
        ops.gemm_time_s(A100, 64, 64, 64, "bf16") + 1e-3
    )
    assert ops.memory_bound_time_s(slow, 0, num_ops=3) == pytest.approx(3e-3)
    assert ops.norm_time_s(slow, 10, 10, 2, "forward") >= 1e-3


def test_memory_bound_ops_move_the_documented_bytes():
    bw = memory_bandwidth_Bps(A100)  # 2039 GB/s x 0.9
    tokens, width, e = 8192, 4096, 2
    assert ops.norm_time_s(A100, tokens, width, e, "forward") == pytest.approx(
        2 * e * tokens * width / bw
    )
    assert ops.norm_time_s(A100, tokens, width, e, "backward") == pytest.approx(
        3 * e * tokens * width / bw
    )
    assert ops.activation_time_s(
        A100, tokens, width, e, gated=True, direction="forward"
    ) == pytest.approx(3 * e * tokens * width / bw)
    assert ops.residual_time_s(A100, tokens, width, e) == pytest.approx(3 * e * tokens * width / bw)


def test_bad_inputs_raise_spec_error():
    with pytest.raises(SpecError):
        ops.memory_bound_time_s(A100, -1)
    with pytest.raises(SpecError):
        ops.batched_gemm_time_s(A100, 0, 8, 8, 8, "bf16")
    with pytest.raises(SpecError, match="fp8"):
        ops.gemm_time_s(A100, 64, 64, 64, "fp8")  # no fp8 on A100


@settings(max_examples=100, deadline=None)
@given(
    m=st.integers(1, 16384),
    n=st.integers(1, 16384),
    k=st.integers(1, 16384),
    scale=st.sampled_from([3, 5, 7]),
)
def test_more_work_never_takes_less_time(m, n, k, scale):
    # An odd factor keeps the alignment status of a dimension either way (32 divides
    # m·scale exactly when it divides m); an even one can turn a misaligned 8 into an
    # aligned 32, which is rightly faster.
    base = ops.gemm_time_s(H100, m, n, k, "bf16")
    assert ops.gemm_time_s(H100, m * scale, n, k, "bf16") >= base * (1 - 1e-12)


def test_embedding_weight_grad_is_a_dense_zero_fill_and_a_main_grad_add():
    # Megatron-LM README 2024 GPT 1.7B at tp 1: vocab 131072 x hidden 2048 in bf16, fp32 main
    # gradient. F.embedding's backward zero-fills the dense bf16 gradient (2 bytes per
    # element), the DDP hook's main_grad.add_ reads it (2) and reads and writes fp32 (8):
    # 12 bytes x 268,435,456 elements = 3.22 GB, 1.07 ms at the H100's 3.35 TB/s x 0.9.
    rows, width = 131072, 2048
    t = ops.embedding_weight_grad_time_s(H100, rows, width, 2)
    moved = 12 * rows * width
    assert moved == 3_221_225_472
    assert t == pytest.approx(moved / memory_bandwidth_Bps(H100, moved / 2), rel=1e-9)
    assert t == pytest.approx(1.07e-3, rel=0.01)
    # bf16 main gradients (Megatron-Bridge's grad_reduce_in_fp32 False) move 8 bytes.
    bf16 = ops.embedding_weight_grad_time_s(H100, rows, width, 2, main_grad_bytes=2)
    assert bf16 == pytest.approx(t * 8 / 12, rel=1e-9)
    with pytest.raises(SpecError, match="embedding_weight_grad_time_s"):
        ops.embedding_weight_grad_time_s(H100, -1, width, 2)
