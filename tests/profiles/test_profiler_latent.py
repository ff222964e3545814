"""The profiler's GEMM shapes of a latent MoE model (``ModelSpec.moe_latent_size``): the
two projections on every token and the experts on ℓ-wide rows."""

from __future__ import annotations

from profiles.profiler.shapes import linear_with_backward, model_gemms
from specs.presets import get_preset

QWEN = get_preset("qwen3-30b-a3b")
LATENT = 512
QWEN_LATENT = QWEN.replace(name="qwen3-latent", moe_latent_size=LATENT)


def test_the_profiler_measures_the_latent_layers_gemms() -> None:
    tokens, dtype = 4096, "bf16"
    shapes = set(model_gemms(QWEN_LATENT, dtype, (tokens,), 1))
    base = set(model_gemms(QWEN, dtype, (tokens,), 1))
    h, ffn = QWEN.hidden_size, QWEN.expert_ffn_hidden_size
    rows = tokens * QWEN.moe_top_k // QWEN.num_experts
    assert set(linear_with_backward(dtype, tokens, LATENT, h)) <= shapes  # fc1_latent_proj
    assert set(linear_with_backward(dtype, tokens, h, LATENT)) <= shapes  # fc2_latent_proj
    assert set(linear_with_backward(dtype, rows, LATENT, ffn)) <= shapes  # expert fc2 at ℓ
    assert set(linear_with_backward(dtype, rows, h, ffn)) <= base - shapes  # not at h
