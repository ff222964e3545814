"""The dense model presets of `specs.presets` (and the tiny test models, MoE among them),
as registry entries in registry order: `TINY`, `SC21_GPT`, `LLAMA`, `NEMOTRON`, `NEOX`.

Values are the published ones: the models' Hugging Face `config.json` files, the SC21
table (Narayanan et al. 2021, Table 1), NeMo's Nemotron-4 recipe and the Nemotron-4 15B
paper. The canonical form is `specs.presets`'.
"""

from __future__ import annotations

from functools import partial

from specs.model import ModelSpec
from specs.preset_styles import Factory, gpt_style, llama_style


def _sc21_gpt(name: str, num_layers: int, hidden_size: int, heads: int) -> tuple[str, Factory]:
    """One row of SC21 Table 1: ffn 4h, vocab 51200, 2048 learned positions, MHA."""
    return gpt_style(
        name,
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden_size,
        vocab_size=51200,
        max_position_embeddings=2048,
    )


TINY = (
    # Small enough that one training step on a CPU takes milliseconds; tp up to 2 divides
    # the query groups, and every degree up to 4 (pp, ep) divides the layers and experts.
    llama_style(
        "tiny",
        num_layers=4,
        hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=256,
        vocab_size=512,
        max_position_embeddings=2048,
    ),
    gpt_style(
        "tiny-gelu",
        num_layers=4,
        hidden_size=128,
        num_attention_heads=4,
        ffn_hidden_size=512,
        vocab_size=512,
        max_position_embeddings=1024,
    ),
    llama_style(
        "tiny-moe",
        num_layers=4,
        hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=256,
        vocab_size=512,
        max_position_embeddings=2048,
        num_experts=8,
        moe_top_k=2,
        moe_ffn_hidden_size=128,
        moe_shared_expert_size=128,
    ),
)
"""Test models small enough for a CPU step: dense SwiGLU, dense GELU and MoE."""

SC21_GPT = (
    # (name, layers, hidden, heads): Narayanan et al. 2021 (SC21), Table 1; the names are
    # the paper's parameter counts, gpt-1t being its 1008.0B row.
    _sc21_gpt("gpt-1.7b", 24, 2304, 24),
    _sc21_gpt("gpt-3.6b", 30, 3072, 32),
    _sc21_gpt("gpt-7.5b", 36, 4096, 32),
    _sc21_gpt("gpt-18.4b", 40, 6144, 48),
    _sc21_gpt("gpt-39.1b", 48, 8192, 64),
    _sc21_gpt("gpt-76.1b", 60, 10240, 80),
    _sc21_gpt("gpt-145.6b", 80, 12288, 96),
    _sc21_gpt("gpt-310.1b", 96, 16384, 128),
    _sc21_gpt("gpt-529.6b", 105, 20480, 128),
    _sc21_gpt("gpt-1t", 128, 25600, 160),
)
"""The GPT-3 family of Megatron-LM's SC21 paper, Table 1."""

LLAMA = (
    # meta-llama/Llama-2-{7b,13b,70b}-hf config.json.
    llama_style(
        "llama2-7b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        ffn_hidden_size=11008,
        vocab_size=32000,
        max_position_embeddings=4096,
    ),
    llama_style(
        "llama2-13b",
        num_layers=40,
        hidden_size=5120,
        num_attention_heads=40,
        ffn_hidden_size=13824,
        vocab_size=32000,
        max_position_embeddings=4096,
    ),
    llama_style(
        "llama2-70b",
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        vocab_size=32000,
        max_position_embeddings=4096,
    ),
    # meta-llama/Meta-Llama-3-{8B,70B} and Llama-3.1-405B config.json (rope_theta 500000).
    llama_style(
        "llama3-8b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=128256,
        max_position_embeddings=8192,
        rotary_base=500000,
    ),
    llama_style(
        "llama3-70b",
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        vocab_size=128256,
        max_position_embeddings=8192,
        rotary_base=500000,
    ),
    llama_style(
        "llama3.1-405b",
        num_layers=126,
        hidden_size=16384,
        num_attention_heads=128,
        num_query_groups=8,
        ffn_hidden_size=53248,
        vocab_size=128256,
        max_position_embeddings=131072,
        rotary_base=500000,
    ),
)
"""Llama 2 (7B, 13B, 70B), Llama 3 (8B, 70B) and Llama 3.1 405B."""

NEMOTRON = (
    # Nemotron-4 15B paper (arXiv 2402.16819) Table 1 and NeMo's Nemotron4Config15B: as
    # the 340B below (squared-ReLU modelled as gelu), 32 layers, hidden 6144, 48 heads,
    # 8 KV heads, ffn 24576.
    (
        "nemotron-4-15b",
        partial(
            ModelSpec,
            name="nemotron-4-15b",
            num_layers=32,
            hidden_size=6144,
            num_attention_heads=48,
            num_query_groups=8,
            ffn_hidden_size=24576,
            vocab_size=256000,
            max_position_embeddings=4096,
            activation="gelu",
            normalization="layernorm",
            layernorm_zero_centered_gamma=True,
            position_embedding="rope",
            tied_embeddings=False,
            add_bias_linear=False,
        ),
    ),
    # NeMo's Nemotron4Config340B: squared-ReLU MLP, which is not among ModelSpec's
    # activations; it is modelled as `gelu`, i.e. the same non-gated two-matrix MLP, so
    # weights and FLOPs are exact and only the element-wise activation differs. LayerNorm,
    # RoPE, untied embeddings, no linear biases, 256k vocabulary, 4096 positions. Both with
    # zero-centred LayerNorm weights (Megatron-Bridge v0.3.0 NemotronModelProvider
    # layernorm_zero_centered_gamma = True; v0.6.0 NemotronBridge.provider_bridge).
    (
        "nemotron-4-340b",
        partial(
            ModelSpec,
            name="nemotron-4-340b",
            num_layers=96,
            hidden_size=18432,
            num_attention_heads=96,
            num_query_groups=8,
            ffn_hidden_size=73728,
            vocab_size=256000,
            max_position_embeddings=4096,
            activation="gelu",
            normalization="layernorm",
            layernorm_zero_centered_gamma=True,
            position_embedding="rope",
            tied_embeddings=False,
            add_bias_linear=False,
        ),
    ),
)
"""Nemotron-4 15B and 340B."""

NEOX = (
    # EleutherAI/gpt-neox-20b config.json (the 20B run's configs/20B.yml in
    # EleutherAI/gpt-neox): GELU MLP of 4h, LayerNorm, rotary on 25% of each head's
    # channels, untied embeddings, biases, and the parallel attention+MLP block with two
    # norms (use_parallel_residual; gpt_j_residual without gpt_j_tied).
    (
        "gpt-neox-20b",
        partial(
            ModelSpec,
            name="gpt-neox-20b",
            num_layers=44,
            hidden_size=6144,
            num_attention_heads=64,
            ffn_hidden_size=24576,
            vocab_size=50432,
            max_position_embeddings=2048,
            activation="gelu",
            normalization="layernorm",
            position_embedding="rope",
            rotary_percent=0.25,
            tied_embeddings=False,
            add_bias_linear=True,
            layer_block="parallel",
        ),
    ),
)
"""GPT-NeoX-20B."""
