"""FLOPs accounting (costmodel.flops) against Megatron-LM's formula and closed forms."""

from __future__ import annotations

import pytest

from costmodel.flops import (
    FORWARD_BACKWARD_FACTOR,
    attention_projection_forward_flops_per_token,
    backward_flops,
    core_attention_forward_flops_per_token,
    forward_flops_per_token,
    layer_forward_flops_per_token,
    logits_forward_flops_per_token,
    mlp_forward_flops_per_token,
    mtp_forward_flops_per_token,
)
from costmodel.hardware_flops import (
    hardware_flops_per_iteration,
    recompute_forward_flops_per_token,
)
from costmodel.iteration_flops import model_flops_per_iteration, sc21_flops_per_iteration
from specs import ModelSpec, ParallelPlan, SpecError, TrainingJob
from specs.params import count_params
from specs.presets import get_preset


def classic_gpt(num_layers: int = 24, hidden: int = 2048, vocab: int = 50257) -> ModelSpec:
    """GELU multi-head attention, F = 4h: the shape of the closed forms below."""
    return ModelSpec(
        name="gpt-classic",
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=16,
        ffn_hidden_size=4 * hidden,
        vocab_size=vocab,
        activation="gelu",
        normalization="layernorm",
        tied_embeddings=True,
    )


def test_llama3_8b_per_sequence_golden() -> None:
    # megatron-facts.md §1.3 sanity example: Llama-3-8B shape at s = 8192 is 4.216e14 FLOPs
    # per sequence (5.15e10 per token) under Megatron's num_floating_point_operations.
    flops = model_flops_per_iteration(get_preset("llama3-8b"), 8192, 1)
    assert flops == pytest.approx(4.216e14, rel=5e-4)
    assert flops / 8192 == pytest.approx(5.15e10, rel=1e-3)


@pytest.mark.parametrize(("seq", "batch"), [(1024, 8), (2048, 512), (8192, 3)])
def test_classic_gpt_closed_form(seq: int, batch: int) -> None:
    # megatron-facts.md §1.3: 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)) for MHA, GELU, F = 4h.
    # The model's vocabulary is used unpadded, so V here is the raw 50257.
    model = classic_gpt()
    layers, h, v = model.num_layers, model.hidden_size, model.vocab_size
    closed = 72 * batch * seq * layers * h * h * (1 + seq / (12 * h) + v / (12 * layers * h))
    assert model_flops_per_iteration(model, seq, batch) == pytest.approx(closed, rel=1e-12)


def test_sc21_formula_and_its_relation_to_hardware_flops() -> None:
    # SC21 Eq. 3 counts full recompute and non-causal attention. Our HFU with full recompute
    # of every layer counts the same GEMMs with causal attention: 4 passes x 2·s·h per
    # token per layer of attention scores instead of 4 x 4·s·h, i.e. 8·B·s²·L·h less.
    model = classic_gpt()
    seq, batch = 2048, 64
    layers, h, v = model.num_layers, model.hidden_size, model.vocab_size
    eq3 = 96 * batch * seq * layers * h * h * (1 + seq / (6 * h) + v / (16 * layers * h))
    assert sc21_flops_per_iteration(model, seq, batch) == pytest.approx(eq3, rel=1e-12)
    job = TrainingJob(seq_length=seq, global_batch_size=batch)
    hfu = hardware_flops_per_iteration(model, job, ParallelPlan(recompute="full"))
    assert eq3 - hfu == pytest.approx(8 * batch * seq**2 * layers * h, rel=1e-9)


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3"])
def test_gemm_flops_are_twice_the_active_matrix_params(name: str) -> None:
    # Outside the attention core, each token's forward does one multiply-add per active
    # weight of every matrix it passes through (6N rule, PaLM arXiv 2204.02311 App. B),
    # except the router, which Megatron does not count. Norm weights are not GEMMs, but
    # Megatron's MLA terms count one FLOP pair per latent-norm weight.
    model = get_preset(name)
    counts = count_params(model)
    seq = 4096
    # the MTP depths are out of `ParamCounts.active` (published activated counts)
    mtp = mtp_forward_flops_per_token(model, seq)
    core = model.num_layers * core_attention_forward_flops_per_token(model, seq) + mtp
    router = sum(layer.router for layer in counts.layers)
    pre_norms = 2 * model.hidden_size * model.num_layers
    gemm_params = counts.active - counts.embedding - router - counts.final_norm - pre_norms
    assert forward_flops_per_token(model, seq) - core == pytest.approx(2 * gemm_params, rel=1e-12)


def test_per_part_helpers_llama3_8b() -> None:
    model = get_preset("llama3-8b")
    h, f, v = 4096, 14336, 128256
    assert attention_projection_forward_flops_per_token(model) == 2 * (h * 6144 + h * h)
    assert core_attention_forward_flops_per_token(model, 8192) == 2 * 8192 * 4096
    assert mlp_forward_flops_per_token(model, 0) == 2 * 3 * h * f
    assert logits_forward_flops_per_token(model) == 2 * h * v
    layer = layer_forward_flops_per_token(model, 5, 8192)
    assert layer.total_flops == (
        layer.attention_projection_flops + layer.core_attention_flops + layer.mlp_flops
    )


def test_moe_mlp_counts_top_k_and_shared_experts() -> None:
    model = get_preset("tiny-moe")  # h 128, experts of 128, top-2, shared expert of 128
    assert mlp_forward_flops_per_token(model, 0) == 2 * 3 * 128 * (128 * 2 + 128)
    mixtral = get_preset("mixtral-8x7b")
    assert mlp_forward_flops_per_token(mixtral, 0) == 2 * 3 * 4096 * 14336 * 2
    deepseek = get_preset("deepseek-v3")
    assert mlp_forward_flops_per_token(deepseek, 0) == 2 * 3 * 7168 * 18432  # dense layer
    assert mlp_forward_flops_per_token(deepseek, 3) == 2 * 3 * 7168 * (2048 * 8 + 2048)


def test_mla_core_attention() -> None:
    # Megatron MLA core term (x6 for fwd+bwd): s·a·(d_qk + d_rope)/2 + s·a·d_v/2.
    model = get_preset("deepseek-v3")
    forward = core_attention_forward_flops_per_token(model, 4096)
    megatron_fwd_bwd = 6 * (4096 * 128 * 192 / 2 + 4096 * 128 * 128 / 2)
    assert FORWARD_BACKWARD_FACTOR * forward == pytest.approx(megatron_fwd_bwd, rel=1e-12)


def test_backward_is_twice_forward_and_iteration_is_three_times() -> None:
    model = get_preset("tiny")
    fwd = forward_flops_per_token(model, 256)
    assert backward_flops(fwd) == 2 * fwd
    assert model_flops_per_iteration(model, 256, 4) == pytest.approx(3 * fwd * 256 * 4)


def test_hardware_flops_by_recompute_mode() -> None:
    model = get_preset("tiny-moe")
    job = TrainingJob(seq_length=512, global_batch_size=8)
    tokens = job.tokens_per_iteration
    mfu = model_flops_per_iteration(model, 512, 8)
    assert hardware_flops_per_iteration(model, job, ParallelPlan()) == mfu
    core = core_attention_forward_flops_per_token(model, 512)
    selective = hardware_flops_per_iteration(model, job, ParallelPlan(recompute="selective"))
    assert selective == pytest.approx(mfu + model.num_layers * core * tokens)
    layer_fwd = [layer_forward_flops_per_token(model, i, 512).total_flops for i in range(4)]
    full = hardware_flops_per_iteration(model, job, ParallelPlan(recompute="full"))
    assert full == pytest.approx(mfu + sum(layer_fwd) * tokens)
    # block method, one layer per chunk recomputed: layers 0 and 2 with pp = 2
    block = ParallelPlan(pp=2, recompute="full", recompute_method="block", recompute_num_layers=1)
    assert recompute_forward_flops_per_token(model, block, 512) == pytest.approx(
        layer_fwd[0] + layer_fwd[2]
    )
    assert mfu < selective < full


def test_bad_inputs_raise_spec_error() -> None:
    model = get_preset("tiny")
    with pytest.raises(SpecError, match="seq_length"):
        model_flops_per_iteration(model, 0, 1)
    with pytest.raises(SpecError, match="global_batch_size"):
        sc21_flops_per_iteration(model, 128, 0)
    with pytest.raises(SpecError, match="layer_index"):
        mlp_forward_flops_per_token(model, 4)
