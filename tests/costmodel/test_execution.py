"""Framework conventions (costmodel.execution) and the mechanisms they switch on (the
attention kernel generation: `test_flash_attention2.py`)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import compute as ops
from costmodel.attention_core import attention_core_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import (
    CUDA11_GEMM_RATE_FACTOR,
    DEFAULT_OPTIONS,
    MEGATRON_2021,
    MEGATRON_2023,
    framework_profile,
)
from costmodel.execution_rules import PLAN_FEATURES
from costmodel.flops import core_attention_forward_flops_per_token
from costmodel.iteration import simulate_iteration
from costmodel.optimizer_passes import grad_accumulation_time_s, optimizer_step_time_s
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.pricing import (
    blocking_flush_sends,
    blocking_sends,
    pipeline_send_s,
)
from costmodel.runtimes.megatron.vocab_costs import logits_cost
from costmodel.runtimes.registry import runtime_model
from costmodel.topology import plan_placements
from profiles.lookup import gemm_efficiency, memory_bandwidth_Bps
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

A100 = load_profile("a100-sxm-80gb")
BW = memory_bandwidth_Bps(A100)
GPT = get_preset("gpt-7.5b")  # Megatron GPT: biases on every linear, LayerNorm, GELU
LLAMA = get_preset("llama3-8b")  # no biases
BARE = dataclasses.replace(DEFAULT_OPTIONS, sustained_gemm_rate_factor=1.0)
"""Megatron's defaults at the profile's benchmark GEMM rates (no sustained factor)."""
JOB = TrainingJob(seq_length=2048, global_batch_size=64)


def test_options_reject_unknown_values():
    with pytest.raises(SpecError, match="main_grad_bytes"):
        ExecutionOptions(main_grad_bytes=3)
    with pytest.raises(SpecError, match="attention"):
        ExecutionOptions(attention="xformers")
    for bad in (0.0, 1.2):
        with pytest.raises(SpecError, match="gemm_rate_factor"):
            ExecutionOptions(gemm_rate_factor=bad)


def test_megatron_2021_preset_describes_the_sc21_code():
    # examples/sc21 of NVIDIA/Megatron-LM: PyTorch 1.8 container, --fp16 --loss-scale 8192,
    # no --accumulate-allreduce-grads-in-fp32; 2021 p2p_communication blocks and scatters.
    assert MEGATRON_2021.attention == "materialized"
    assert MEGATRON_2021.main_grad_bytes == 2 and MEGATRON_2021.loss_scaling
    assert not MEGATRON_2021.bias_fusion and not MEGATRON_2021.overlap_p2p
    assert MEGATRON_2021.pipeline_scatter_gather and MEGATRON_2021.two_pass_norm_backward
    assert DEFAULT_OPTIONS.bias_fusion and DEFAULT_OPTIONS.main_grad_bytes == 4
    # CUDA 11 cuBLAS: 230 TFLOP/s on 8192³ fp16 randn (mli/transformers-benchmarks, A100
    # 80GB) against the profile's 257 (hardware.md [S55]); today's library is the default.
    assert MEGATRON_2021.gemm_rate_factor == CUDA11_GEMM_RATE_FACTOR == pytest.approx(0.8949, 1e-3)
    assert DEFAULT_OPTIONS.gemm_rate_factor == 1.0


def test_gemm_rate_factor_scales_gemms_only():
    old = framework_profile(A100, dataclasses.replace(MEGATRON_2021, sustained_gemm_rate_factor=1))
    assert framework_profile(A100, BARE) is A100
    # 8192³ fp16: the profile's sustained 257 TFLOP/s becomes the CUDA 11 era's 230.
    n = 8192
    assert 312 * gemm_efficiency(A100, n, n, n, "fp16") == pytest.approx(257, abs=0.5)
    assert 312 * gemm_efficiency(old, n, n, n, "fp16") == pytest.approx(230, abs=0.5)
    big = ops.gemm_time_s(A100, n, n, n, "fp16")
    assert ops.gemm_time_s(old, n, n, n, "fp16") == pytest.approx(big / CUDA11_GEMM_RATE_FACTOR)
    # Memory-bound operators and the device peaks are untouched.
    assert memory_bandwidth_Bps(old) == BW
    assert old.device == A100.device and old.communication == A100.communication
    slow = simulate_iteration(
        SC21_MODEL, SC21_JOB, _sc21_plan(), A100, runtime=runtime_model(MEGATRON_2021)
    )
    fast = simulate_iteration(
        SC21_MODEL,
        SC21_JOB,
        _sc21_plan(),
        A100,
        runtime=runtime_model(dataclasses.replace(MEGATRON_2021, gemm_rate_factor=1.0)),
    )
    assert slow.breakdown.compute_forward_s > fast.breakdown.compute_forward_s
    assert slow.breakdown.optimizer_s == pytest.approx(fast.breakdown.optimizer_s)


# ---- bytes of the memory-bound operators ---------------------------------------------


def test_bias_add_and_bias_gradient_bytes():
    tokens, width, e = 8192, 3 * 4096, 2
    assert ops.bias_time_s(A100, tokens, width, e, "forward") == pytest.approx(
        2 * e * tokens * width / BW
    )
    assert ops.bias_time_s(A100, tokens, width, e, "backward") == pytest.approx(
        e * tokens * width / BW
    )


def test_apex_norm_backward_reads_twice():
    tokens, width, e = 8192, 4096, 2
    one = ops.norm_time_s(A100, tokens, width, e, "backward")
    two = ops.norm_time_s(A100, tokens, width, e, "backward", two_pass_backward=True)
    assert one == pytest.approx(3 * e * tokens * width / BW)
    assert two == pytest.approx(5 * e * tokens * width / BW)


def test_dropout_adds_the_mask_to_the_residual():
    tokens, width, e = 8192, 4096, 2
    n = tokens * width
    fwd = ops.residual_time_s(A100, tokens, width, e, "forward", dropout=True)
    bwd = ops.residual_time_s(A100, tokens, width, e, "backward", dropout=True)
    assert fwd == pytest.approx((3 * e + 1) * n / BW)
    assert bwd == pytest.approx((5 * e + 1) * n / BW)
    assert ops.residual_time_s(A100, tokens, width, e, "backward") == pytest.approx(3 * e * n / BW)


def test_cross_entropy_moves_the_fp32_passes():
    # Cast, max, subtract, exp, sum, divide in fp32 forward; scale and cast back backward.
    tokens, vocab, e = 4096, 25600, 2
    n = tokens * vocab
    fwd = ops.cross_entropy_time_s(A100, tokens, vocab, e, "forward")
    bwd = ops.cross_entropy_time_s(A100, tokens, vocab, e, "backward")
    assert fwd == pytest.approx((e + 36) * n / BW)
    assert bwd == pytest.approx((e + 12) * n / BW)


def test_fp16_main_gradient_accumulation_moves_fewer_bytes():
    params = 1e9
    fp32 = grad_accumulation_time_s(A100, params, 2)
    fp16 = grad_accumulation_time_s(A100, params, 2, main_grad_bytes=2)
    assert fp32 == pytest.approx(10 * params / BW)
    assert fp16 == pytest.approx(6 * params / BW)


def test_loss_scaling_adds_the_copy_and_unscale_passes():
    # Per shard parameter: copy fp16 -> fp32 main gradient (2 + 4), unscale with the inf
    # check (4 + 4); the norm reads the fp32 copies (4) and zeroing writes fp16 (2).
    kwargs = dict(shard_params=1e9, local_params=1e9, mixed_precision=True, num_tensors=4)
    plain = optimizer_step_time_s(A100, **kwargs)
    scaled = optimizer_step_time_s(A100, **kwargs, loss_scaling=True, main_grad_bytes=2)
    assert plain == pytest.approx((30e9 + 8e9) / BW)
    assert scaled == pytest.approx((30e9 + 14e9 + 6e9) / BW)


# ---- layer costs ------------------------------------------------------------------------


def _layer(model, plan, options):
    return layer_cost(model, JOB, plan, A100, kind=DENSE_LAYER, options=options)


def test_unfused_biases_cost_exactly_their_passes():
    plan = ParallelPlan(tp=2, micro_batch_size=2)
    fused = _layer(GPT, plan, DEFAULT_OPTIONS)
    unfused = _layer(GPT, plan, dataclasses.replace(DEFAULT_OPTIONS, bias_fusion=False))
    tokens, h, e = 2 * 2048, GPT.hidden_size, 2
    qkv, fc1 = 3 * h / 2, GPT.ffn_hidden_size / 2
    forward = 2 * e * tokens * qkv / BW  # the QKV bias add
    backward = e * tokens * (qkv + h + fc1 + h) / BW  # four bias-gradient reductions
    assert unfused.forward.compute_s - fused.forward.compute_s == pytest.approx(forward)
    assert unfused.backward.compute_s - fused.backward.compute_s == pytest.approx(backward)
    plain = _layer(LLAMA, plan, dataclasses.replace(DEFAULT_OPTIONS, bias_fusion=False))
    assert plain == _layer(LLAMA, plan, DEFAULT_OPTIONS)  # no biases, nothing to fuse


def test_materialized_attention_copies_its_context_and_qkv_gradient():
    plan = ParallelPlan(tp=4, micro_batch_size=1)
    x_tokens, e = 2048, 2
    q = GPT.hidden_size / 4
    flash = _layer(GPT, plan, DEFAULT_OPTIONS)
    unfused = _layer(GPT, plan, ExecutionOptions(attention="materialized"))
    core = dict(
        causal_forward_flops=core_attention_forward_flops_per_token(GPT, 2048) * x_tokens / 4,
        batch_heads=GPT.num_attention_heads / 4,
        seq_q=2048,
        seq_kv=2048,
        head_dim=GPT.head_dim,
        precision="bf16",
    )

    def core_s(kernel, direction):
        return attention_core_time_s(A100, kernel=kernel, direction=direction, **core)

    fwd_copy = 2 * e * x_tokens * q / BW
    bwd_copy = 2 * e * x_tokens * 3 * q / BW
    assert unfused.forward.compute_s - flash.forward.compute_s == pytest.approx(
        core_s("materialized", "forward") - core_s("flash", "forward") + fwd_copy, rel=1e-6
    )
    assert unfused.backward.compute_s - flash.backward.compute_s == pytest.approx(
        core_s("materialized", "backward") - core_s("flash", "backward") + bwd_copy, rel=1e-6
    )


def test_apex_norms_and_dropout_slow_every_layer_and_the_output_layer():
    plan = ParallelPlan(tp=8, micro_batch_size=1)
    base = _layer(GPT, plan, DEFAULT_OPTIONS)
    old = dataclasses.replace(DEFAULT_OPTIONS, two_pass_norm_backward=True, hidden_dropout=True)
    slower = _layer(GPT, plan, old)
    tokens, h, e = 2048, GPT.hidden_size, 2
    # Two norms (2·e more each) and two residuals (mask byte forward; 2·e + 1 backward).
    assert slower.forward.compute_s - base.forward.compute_s == pytest.approx(2 * tokens * h / BW)
    assert slower.backward.compute_s - base.backward.compute_s == pytest.approx(
        (2 * 2 * e + 2 * (2 * e + 1)) * tokens * h / BW
    )
    _, out_b = logits_cost(GPT, JOB, plan, A100, options=old)
    _, base_b = logits_cost(GPT, JOB, plan, A100)
    assert out_b.compute_s - base_b.compute_s == pytest.approx(2 * e * tokens * h / BW)


# ---- pipeline sends, gradients and the optimizer in the simulator ----------------------

SC21_MODEL = get_preset("gpt-39.1b")
SC21_JOB = TrainingJob(seq_length=2048, global_batch_size=64)


def _sc21_plan(**changes):
    base = dict(tp=8, pp=4, vpp=2, micro_batch_size=1, recompute="full")
    return ParallelPlan.for_world(64, **(base | changes))


def test_interleaved_sends_block_without_p2p_overlap():
    plan = _sc21_plan()
    assert not blocking_sends(plan)
    assert blocking_sends(plan, ExecutionOptions(overlap_p2p=False))
    assert blocking_sends(_sc21_plan(vpp=1))  # 1F1B always blocks
    overlapped = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(DEFAULT_OPTIONS)
    )
    blocked = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(ExecutionOptions(overlap_p2p=False))
    )
    assert blocked.blocking_sends
    assert blocked.iteration_time_s > overlapped.iteration_time_s
    first = blocked.timing.actions[0][0]  # stage 0, chunk 0 forward of microbatch 0
    compute = blocked.chunks[0][0].forward.duration_s
    assert first.end_s - first.start_s == pytest.approx(compute + blocked.send_s[0])


def test_interleaved_warmup_and_cooldown_sends_hold_the_sender():
    # Megatron-core sends the warmup forwards' and cooldown backwards' activations with
    # blocking calls even with overlap_p2p_comm; the steady state's sends stay asynchronous.
    plan = _sc21_plan()
    assert blocking_flush_sends(plan)
    assert not blocking_flush_sends(plan, ExecutionOptions(overlap_p2p=False))  # all block
    assert not blocking_flush_sends(_sc21_plan(vpp=1))
    sim = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(DEFAULT_OPTIONS)
    )
    assert sim.blocking_flush_sends and not sim.blocking_sends
    row = sim.timing.actions[0]
    # Stage 0's second forward (chunk 0, microbatch 1) needs no input: it starts when the
    # first one's send to stage 1 is done.
    assert row[1].start_s == pytest.approx(row[0].end_s + sim.send_s[0])


def test_scatter_gather_sends_a_tp_slice_per_nic():
    # tp = 8 fills a DGX A100, so every stage boundary crosses servers: one eighth of the
    # [s, b, h] tensor per NIC, then an NVLink all-gather, beats the whole tensor per NIC.
    plan = _sc21_plan()
    placements = plan_placements(A100, plan)
    assert not any(placements.pp_hop_intra)
    full = pipeline_send_s(SC21_MODEL, SC21_JOB, plan, A100, placements)
    scattered = pipeline_send_s(
        SC21_MODEL, SC21_JOB, plan, A100, placements, ExecutionOptions(pipeline_scatter_gather=True)
    )
    assert all(s < f / 2 for s, f in zip(scattered, full, strict=True))
    sp = _sc21_plan(sequence_parallel=True)  # already 1/tp per rank: nothing to scatter
    sp_places = plan_placements(A100, sp)
    assert pipeline_send_s(
        SC21_MODEL, SC21_JOB, sp, A100, sp_places, ExecutionOptions(pipeline_scatter_gather=True)
    ) == pipeline_send_s(SC21_MODEL, SC21_JOB, sp, A100, sp_places)


def test_fp16_main_gradients_halve_the_data_parallel_bytes():
    plan = ParallelPlan.for_world(128, tp=8, pp=2, micro_batch_size=1)
    fp32 = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(DEFAULT_OPTIONS)
    )
    fp16 = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(ExecutionOptions(main_grad_bytes=2))
    )
    for a, b in zip(fp32.tails, fp16.tails, strict=True):
        assert sum(ev[3] for ev in b.dp_events) == pytest.approx(
            sum(ev[3] for ev in a.dp_events) / 2
        )
    assert fp16.breakdown.dp_exposed_s < fp32.breakdown.dp_exposed_s


def test_loss_scaling_lengthens_the_optimizer_step():
    plan = ParallelPlan.for_world(8, tp=8, micro_batch_size=1)
    plain = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(DEFAULT_OPTIONS)
    )
    scaled = simulate_iteration(
        SC21_MODEL, SC21_JOB, plan, A100, runtime=runtime_model(ExecutionOptions(loss_scaling=True))
    )
    assert scaled.breakdown.optimizer_s > plain.breakdown.optimizer_s


def test_fp8_gemm_rate_factor_scales_only_the_fp8_curve() -> None:
    h100 = load_profile("h100-sxm-80gb")
    options = ExecutionOptions(fp8_gemm_rate_factor=0.5, sustained_gemm_rate_factor=1.0)
    scaled = framework_profile(h100, options).compute.gemm_efficiency
    base = h100.compute.gemm_efficiency
    assert [p.efficiency for p in scaled["fp8"]] == [0.5 * p.efficiency for p in base["fp8"]]
    assert scaled["bf16"] == base["bf16"]
    with pytest.raises(SpecError):
        ExecutionOptions(fp8_gemm_rate_factor=1.5)


def test_megatron_2023_preset_describes_the_early_2023_code():
    # Megatron-LM 285068c8 (2023-01-11): local transformer, bias added after torch.matmul,
    # hidden dropout 0.1, blocking p2p, apex layer norm; bf16 keeps fp32 main gradients.
    assert not MEGATRON_2023.bias_fusion and MEGATRON_2023.hidden_dropout
    assert not MEGATRON_2023.overlap_p2p and MEGATRON_2023.two_pass_norm_backward
    assert MEGATRON_2023.main_grad_bytes == 4 and not MEGATRON_2023.loss_scaling
    assert MEGATRON_2023.grad_accumulation_fusion and MEGATRON_2023.attention == "flash"
    # The NaN check of every gradient bucket came with Megatron-core's DDP (on by default).
    assert DEFAULT_OPTIONS.grad_nan_check
    assert not MEGATRON_2023.grad_nan_check and not MEGATRON_2021.grad_nan_check


def test_plan_features_are_named_and_2021_has_none():
    assert DEFAULT_OPTIONS.plan_features == PLAN_FEATURES
    assert MEGATRON_2021.plan_features == frozenset()
    assert MEGATRON_2023.plan_features == {
        "sequence_parallel",
        "selective_recompute",
        "distributed_optimizer",
    }
    with pytest.raises(SpecError, match="plan_features"):
        ExecutionOptions(plan_features=frozenset({"zero_bubble"}))


def test_cudnn_norm_is_a_megatron_runtime_option():
    # Transformer Engine's norm backend: the torch runtime runs PyTorch's norms.
    assert ExecutionOptions(cudnn_norm=True).cudnn_norm
    with pytest.raises(SpecError, match="cudnn_norm selects Transformer Engine's cuDNN norm"):
        ExecutionOptions(runtime="torch", cudnn_norm=True)
