"""FLOPs of hybrid Mamba-2 models (costmodel.flops) against Megatron-LM's ``hybrid_flops``
and ``mamba_layer_flops`` (megatron/training/training.py, d98e8a64), worked by hand."""

from __future__ import annotations

import pytest

from costmodel.flops import (
    FORWARD_BACKWARD_FACTOR,
    attention_layer_count,
    forward_flops_per_token,
    layer_forward_flops_per_token,
    mamba_mixer_forward_flops_per_token,
    mlp_forward_flops_per_token,
)
from costmodel.hardware_flops import (
    recompute_forward_flops_per_token,
)
from costmodel.iteration_flops import model_flops_per_iteration
from specs import ParallelPlan
from specs.presets import get_preset


def megatron_hybrid_flops(
    tokens: int, seq: int, h: int, counts: tuple[int, int, int, int], **m: float
) -> float:
    """Megatron-LM's ``hybrid_flops`` for fixed-length sequences (seqlen_squared_sum =
    tokens·s), transcribed term by term: ``attn_layer_flops``, ``mlp_layer_flops``,
    ``mamba_layer_flops``, ``moe_layer_flops`` and the logits, times 3. ``counts`` is
    (attention, mamba, mlp, moe) layers."""
    attn_layers, mamba_layers, mlp_layers, moe_layers = counts
    p = m["kv_channels"] * m["heads"] / h
    attn = 4 * tokens * h * p * (h + h * (m["groups"] / m["heads"])) + 2 * tokens * seq * h * p
    mlp = 4 * (m["ffn"] / h) * tokens * h**2
    d_in = 2 * h
    nheads = m["mamba_heads"] or d_in // 64
    mamba = (
        2 * tokens * h * (2 * d_in + 2 * m["mamba_groups"] * m["state"] + nheads)
        + 7 * tokens * d_in * m["state"]
        + 2 * tokens * d_in * h
    )
    moe = 4 * tokens * h * m["moe_ffn"] * m["top_k"] + 4 * tokens * h * m["shared"]
    logits = 2 * tokens * h * m["vocab"]
    forward = (
        attn_layers * attn + mlp_layers * mlp + mamba_layers * mamba + moe_layers * moe + logits
    )
    return 3 * forward


def test_nemotron_h_8b_model_flops_golden() -> None:
    """One 8192-token sequence of Nemotron-H 8B (24 M, 4 *, 24 - layers, h 4096), per token
    forward, by hand:
      attention 4·4096·(4096 + 1024) + 2·8192·4096      = 150,994,944
      MLP       4·4096·21504                            = 352,321,536
      Mamba-2   2·4096·(2·8192 + 2·8·128 + 128)         = 152,043,520  in_proj
                + 7·8192·128                            =   7,340,032  scan
                + 2·8192·4096                           =  67,108,864  out_proj
      logits    2·4096·131072                           = 1,073,741,824
    4·150,994,944 + 24·352,321,536 + 24·226,492,416 + 1,073,741,824 = 15,569,256,448,
    times 3 (forward + backward) and 8192 tokens. The vocabulary 131072 is already a
    multiple of 128, so Megatron's padding changes nothing here."""
    model = get_preset("nemotron-h-8b")
    per_token_forward = 4 * 150_994_944 + 24 * 352_321_536 + 24 * 226_492_416 + 1_073_741_824
    assert per_token_forward == 15_569_256_448
    assert forward_flops_per_token(model, 8192) == per_token_forward
    total = model_flops_per_iteration(model, 8192, 1)
    assert total == 3 * 8192 * per_token_forward == 382_630_046_466_048
    megatron = megatron_hybrid_flops(
        8192, 8192, 4096, (4, 24, 24, 0),
        kv_channels=128, heads=32, groups=8, ffn=21504, mamba_heads=128, mamba_groups=8,
        state=128, moe_ffn=0, top_k=0, shared=0, vocab=131072,
    )  # fmt: skip
    assert total == pytest.approx(megatron, rel=1e-12)


def test_nemotron_3_nano_follows_megatrons_mamba_width() -> None:
    """Nemotron 3 Nano (23 M, 6 *, 23 E; h 2688, 64 Mamba heads of 64): Megatron's
    ``mamba_layer_flops`` takes d_in = 2h = 5376 for in_proj, the scan and out_proj whatever
    ``--mamba-num-heads`` says (only the dt width is 64), although the GEMMs are 4096 wide;
    the count is Megatron's (costmodel.flops docstring)."""
    model = get_preset("nemotron-3-nano")
    h = 2688
    mamba = 2 * h * (2 * 5376 + 2 * 8 * 128 + 64) + 7 * 5376 * 128 + 2 * 5376 * h
    assert mamba_mixer_forward_flops_per_token(model) == mamba
    assert model.mamba_inner_size == 4096
    megatron = megatron_hybrid_flops(
        4096 * 2, 4096, h, (6, 23, 0, 23),
        kv_channels=128, heads=32, groups=2, ffn=1856, mamba_heads=64, mamba_groups=8,
        state=128, moe_ffn=1856, top_k=6, shared=3712, vocab=131072,
    )  # fmt: skip
    assert model_flops_per_iteration(model, 4096, 2) == pytest.approx(megatron, rel=1e-12)


def test_layer_flops_by_kind() -> None:
    model = get_preset("nemotron-h-8b")  # "M-M-M-M*-...": 0 M, 1 -, 7 *
    mamba, mlp, attention = (layer_forward_flops_per_token(model, i, 8192) for i in (0, 1, 7))
    assert mamba.mamba_flops == 226_492_416 == mamba.total_flops
    assert (mamba.attention_projection_flops, mamba.core_attention_flops, mamba.mlp_flops) == (
        0.0,
        0.0,
        0.0,
    )
    assert mlp.mlp_flops == 352_321_536 == mlp.total_flops
    assert mlp_forward_flops_per_token(model, 0) == 0.0
    assert attention.attention_projection_flops == 83_886_080
    assert attention.core_attention_flops == 67_108_864
    assert attention.total_flops == 150_994_944 and attention.mamba_flops == 0.0
    layers = sum(layer_forward_flops_per_token(model, i, 8192).total_flops for i in range(52))
    assert layers + 2 * 4096 * 131072 == forward_flops_per_token(model, 8192)


def test_expert_layer_counts_top_k_and_shared_experts() -> None:
    model = get_preset("nemotron-3-nano")  # "MEMEM*E...": layer 1 is E
    expert = layer_forward_flops_per_token(model, 1, 4096)
    assert expert.mlp_flops == 2 * 2 * 2688 * (6 * 1856 + 3712) == expert.total_flops


def test_selective_recompute_reruns_the_attention_layers_only() -> None:
    model = get_preset("nemotron-h-8b")
    assert attention_layer_count(model) == 4
    selective = recompute_forward_flops_per_token(model, ParallelPlan(recompute="selective"), 8192)
    assert selective == 4 * 67_108_864
    full = recompute_forward_flops_per_token(model, ParallelPlan(recompute="full"), 8192)
    assert full == forward_flops_per_token(model, 8192) - 2 * 4096 * 131072
    assert FORWARD_BACKWARD_FACTOR == 3.0
