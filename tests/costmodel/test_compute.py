"""Operator times from a hardware profile (costmodel.compute)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import compute as ops
from profiles.lookup import attention_tflops, gemm_efficiency, memory_bandwidth_Bps
from profiles.store import load_profile
from specs.errors import SpecError

A100 = load_profile("a100-sxm-80gb")
H100 = load_profile("h100-sxm-80gb")
B200 = load_profile("b200")


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


def test_optimizer_step_bytes():
    # Adam with fp32 master weights: 30 bytes per shard parameter plus the gradient-norm
    # read of the shard's fp32 main gradients (4; Megatron-core get_main_grads_for_grad_norm
    # over the optimizer's shard parameters), 4 per local parameter (zeroing the buffer).
    bw = memory_bandwidth_Bps(H100)
    t = ops.optimizer_step_time_s(
        H100, shard_params=1e9, local_params=4e9, mixed_precision=True, num_tensors=10
    )
    assert t == pytest.approx((34e9 + 16e9) / bw)
    # A bf16 gradient buffer is copied to fp32 main gradients (read 2, write 4) that the
    # norm then reads (4); zeroing writes 2 per local parameter.
    bf16 = ops.optimizer_step_time_s(
        H100,
        shard_params=1e9,
        local_params=4e9,
        mixed_precision=True,
        num_tensors=10,
        main_grad_bytes=2,
    )
    assert bf16 == pytest.approx((40e9 + 8e9) / bw)
    fp32 = ops.optimizer_step_time_s(
        H100, shard_params=1e9, local_params=0, mixed_precision=False, num_tensors=10
    )
    assert fp32 == pytest.approx((28e9 + 4e9) / bw)  # in-place update, norm of the shard


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
    fwd = ops.attention_core_time_s(A100, direction="forward", **kwargs)
    bwd = ops.attention_core_time_s(A100, direction="backward", **kwargs)
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
    fwd = ops.attention_core_time_s(A100, direction="forward", **kwargs)
    gemms = ops.batched_gemm_time_s(A100, b_h, s, s, d, "bf16") + ops.batched_gemm_time_s(
        A100, b_h, s, d, s, "bf16"
    )
    softmax = ops.softmax_dropout_time_s(A100, b_h * s * s, 2, "forward")
    assert fwd == pytest.approx(gemms + softmax)
    flash = ops.attention_core_time_s(A100, direction="forward", **{**kwargs, "kernel": "flash"})
    assert fwd > flash  # the score matrix goes through memory several times


def test_attention_without_a_curve_falls_back_to_gemm_efficiency():
    bare = dataclasses.replace(A100, compute=dataclasses.replace(A100.compute, attention=()))
    t = ops.attention_core_time_s(
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
    return ops.attention_core_time_s(
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
    assert ops.flash_exp_time_s(B200, 1e12, 64) == pytest.approx(1e12 / 256 / 5.0e12)
    assert ops.flash_exp_time_s(B200, 1e12, 128) == pytest.approx(1e12 / 512 / 5.0e12)
    assert ops.flash_exp_time_s(H100, 1e12, 64) == 0.0  # no sourced SFU figure


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_attention_takes_the_larger_of_tensor_and_exponential_time(direction, head_dim):
    tensor_s = _flash(_with_exp_rate(B200, 0.0), head_dim, direction)
    exp_s = ops.flash_exp_time_s(B200, 1e12, head_dim)
    assert _flash(B200, head_dim, direction) == pytest.approx(max(tensor_s, exp_s))
    slow_sfu = _with_exp_rate(B200, 1e11)  # far below any tensor rate: the SFU binds
    assert _flash(slow_sfu, head_dim, direction) == pytest.approx(
        ops.flash_exp_time_s(slow_sfu, 1e12, head_dim)
    )


def test_profiles_without_an_sfu_figure_keep_their_attention_curve():
    assert _flash(H100, 128, "forward") == pytest.approx(
        1e12 / (attention_tflops(H100, "forward", 4096, 128, "bf16") * 1e12)
    )


def test_negative_exp_rate_is_rejected():
    with pytest.raises(SpecError, match="exp_per_s"):
        _with_exp_rate(B200, -1.0)


def test_bad_inputs_raise_spec_error():
    with pytest.raises(SpecError):
        ops.memory_bound_time_s(A100, -1)
    with pytest.raises(SpecError):
        ops.batched_gemm_time_s(A100, 0, 8, 8, 8, "bf16")
    with pytest.raises(SpecError, match="fp8"):
        ops.gemm_time_s(A100, 64, 64, 64, "fp8")  # no fp8 on A100
    with pytest.raises(SpecError, match="kernel"):
        ops.attention_core_time_s(
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


def test_fp8_quantize_writes_both_copies():
    # cast_transpose: read the bf16 operand (2 bytes), write the row-wise and the
    # column-wise fp8 copies (1 + 1); the norm-fused input adds only the transpose's net byte.
    elements, bw = 4096 * 8192, memory_bandwidth_Bps(H100)
    assert ops.fp8_quantize_time_s(H100, elements, 2, recipe="delayed") == pytest.approx(
        4 * elements / bw
    )
    fused = ops.fp8_quantize_time_s(H100, elements, 2, recipe="delayed", norm="fused")
    assert fused == pytest.approx(elements / bw)


def test_current_scaling_quantize_adds_the_amax_read():
    # TE current_scaling.cu: amax_kernel reads the bf16 operand once (e bytes per element)
    # before the cast; delayed and MXFP8 scales come with the cast, no extra pass.
    elements, bw = 4096 * 8192, memory_bandwidth_Bps(H100)
    delayed = ops.fp8_quantize_time_s(H100, elements, 2, recipe="delayed")
    tensorwise = ops.fp8_quantize_time_s(H100, elements, 2, recipe="tensorwise")
    mxfp8 = ops.fp8_quantize_time_s(H100, elements, 2, recipe="mxfp8")
    assert tensorwise - delayed == pytest.approx(2 * elements / bw)
    assert mxfp8 == delayed == pytest.approx(4 * elements / bw)


@pytest.mark.parametrize(
    ("recipe", "cudnn_norm", "path", "bytes_per_element"),
    [
        # FULLY_FUSED on either backend: the norm writes fp8, a transpose adds the column copy.
        ("delayed", False, "fused", 1),
        ("delayed", True, "fused", 1),
        # TE's default: bf16 norm, then the MXFP8 cast (read e, write both copies).
        ("mxfp8", False, "separate", 4),
        # cuDNN's fused MXFP8 norm writes both copies in place of the bf16 output.
        ("mxfp8", True, "fused", 0),
        # FUSED_NORM_AMAX_FP8: bf16 + amax from the norm, then the cast.
        ("tensorwise", False, "fused_amax", 4),
        # cuDNN has no amax output: bf16 norm, then the full quantize (amax pass + cast).
        ("tensorwise", True, "separate", 4),
    ],
)
def test_norm_output_quantization_per_recipe_and_backend(
    recipe, cudnn_norm, path, bytes_per_element
):
    assert ops.norm_quantization(recipe, cudnn_norm=cudnn_norm, rows=4096, hidden=8192) == path
    assert ops.fp8_cast_bytes_per_element(2, recipe=recipe, norm=path) == bytes_per_element


def test_norm_output_quantize_times_per_recipe_and_backend():
    # Beyond the bf16 norm, with e = 2: delayed 3 - e = 1 byte; MXFP8 4 (TE's norm) or
    # 0 (cuDNN); current scaling 4 (cast of the norm's bf16 output, amax from the norm) or
    # 4 + 2 with cuDNN (the amax pass reads the bf16 output again).
    elements, bw = 4096 * 8192, memory_bandwidth_Bps(H100)

    def norm_output(recipe: str, cudnn_norm: bool) -> float:
        path = ops.norm_quantization(recipe, cudnn_norm=cudnn_norm, rows=4096, hidden=8192)
        return ops.fp8_quantize_time_s(H100, elements, 2, recipe=recipe, norm=path)

    expected = {
        ("delayed", False): 1,
        ("delayed", True): 1,
        ("mxfp8", False): 4,
        ("mxfp8", True): 0,
        ("tensorwise", False): 4,
        ("tensorwise", True): 6,
    }
    for (recipe, cudnn_norm), per_element in expected.items():
        assert norm_output(recipe, cudnn_norm) == pytest.approx(per_element * elements / bw)


@pytest.mark.parametrize(("rows", "hidden"), [(4096 + 64, 8192), (4096, 2880)])
def test_cudnn_mxfp8_norm_needs_full_tiles(rows, hidden):
    # normalization.cpp: the cuDNN MXFP8 kernel requires full 128x128 tiles, else UNFUSED.
    path = ops.norm_quantization("mxfp8", cudnn_norm=True, rows=rows, hidden=hidden)
    assert path == "separate"


def test_norm_paths_of_another_recipe_are_refused():
    with pytest.raises(SpecError, match="no fused norm"):
        ops.fp8_cast_bytes_per_element(2, recipe="tensorwise", norm="fused")
    with pytest.raises(SpecError, match="current scaling's path"):
        ops.fp8_cast_bytes_per_element(2, recipe="mxfp8", norm="fused_amax")
    with pytest.raises(SpecError, match="fp8 recipe must be one of"):
        ops.norm_quantization("blockwise", cudnn_norm=False, rows=128, hidden=128)  # type: ignore[arg-type]


def test_current_scaling_launches_the_amax_and_scale_kernels():
    # zero_amax_kernel + amax_kernel + compute_scale_from_amax_kernel before the cast; the
    # norm-fused path keeps the amax zero-fill and the scale kernel.
    launch = 1e-5
    cpu = dataclasses.replace(H100, compute=dataclasses.replace(H100.compute, op_overhead_s=launch))
    elements = 1024.0
    plain = ops.fp8_amax_time_s(cpu, elements, 2, recipe="tensorwise")
    read = ops.memory_bound_time_s(cpu, 2 * elements)
    assert plain == pytest.approx(read + 2 * launch)
    norm = ops.fp8_amax_time_s(cpu, elements, 2, recipe="tensorwise", norm="fused_amax")
    assert norm == pytest.approx(2 * launch)
    # The cuDNN norm's separate path runs the whole pass again.
    separate = ops.fp8_amax_time_s(cpu, elements, 2, recipe="tensorwise", norm="separate")
    assert separate == pytest.approx(plain)
    assert ops.fp8_amax_time_s(cpu, elements, 2, recipe="delayed") == 0.0


def test_fp8_quantize_refuses_an_unknown_recipe():
    with pytest.raises(SpecError, match="fp8 recipe must be one of"):
        ops.fp8_quantize_time_s(H100, 1024.0, 2, recipe="blockwise")  # type: ignore[arg-type]


def test_grad_buffer_passes_divide_and_check_the_fp32_buffer():
    # Division by the data-parallel size in place (read + write 4 bytes) and the NaN check's
    # norm (read 4 bytes) per gradient element.
    params, bw = 1e9, memory_bandwidth_Bps(H100)
    both = ops.grad_buffer_passes_time_s(H100, params, 4, scale=True, nan_check=True)
    assert both == pytest.approx(12 * params / bw)
    scale_only = ops.grad_buffer_passes_time_s(H100, params, 2, scale=True, nan_check=False)
    assert scale_only == pytest.approx(4 * params / bw)
    assert ops.grad_buffer_passes_time_s(H100, params, scale=False, nan_check=False) == 0.0


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
