"""The model preset registry: named `ModelSpec` factories with published architectures.

One registry, `PRESETS` (name -> zero-argument factory), in a fixed order: tiny test
models, the GPT-3 family of Megatron-LM's SC21 paper (Narayanan et al. 2021, Table 1),
Llama 2 / 3 / 3.1, Mixtral, Qwen3 MoE, DeepSeek-V3 and Nemotron-4 340B. Values are the
published ones (the models' Hugging Face `config.json` files, the SC21 table, NeMo's
Nemotron-4 recipe).

Conventions, shared with `specs.hf_import` so an imported config equals its preset:
`num_query_groups` is left None for plain multi-head attention, `kv_channels` only when the
head dim differs from hidden / heads, and `moe_ffn_hidden_size` only when an expert's
inner size differs from `ffn_hidden_size`. Multi-token-prediction heads (DeepSeek-V3) and
tiny per-head vectors ModelSpec has no field for (Qwen3's q/k norms) are left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

from specs.errors import SpecError, unknown_name_message
from specs.model import ModelSpec
from specs.router import RouterSpec

Factory = Callable[[], ModelSpec]

# Routers, with the Megatron settings of Megatron-Bridge's model providers (NVIDIA-NeMo/
# Megatron-Bridge 067f987d, src/megatron/bridge/models/: the bridge's provider_bridge plus
# the Hugging Face keys its CONFIG_MAPPING carries over, model_bridge.py) and the values of
# the models' config.json files.


def _mixtral_router(aux_loss_coeff: float) -> RouterSpec:
    """MixtralSparseMoeBlock: softmax over all experts, top-2, renormalized, which is a
    softmax over the top-2 logits (Megatron's default); the aux loss with config.json's
    router_aux_loss_coef. Megatron-Bridge has no Mixtral bridge; Megatron-LM's
    examples/mixtral trains the same aux_loss balancing."""
    return RouterSpec(moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=aux_loss_coeff)


_QWEN3_MOE_ROUTER = RouterSpec(
    # qwen3_moe_bridge.py: aux_loss, coefficient 1e-3 (config.json router_aux_loss_coef),
    # pre-softmax = not norm_topk_prob (true in config.json), softmax.
    moe_router_load_balancing_type="aux_loss",
    moe_aux_loss_coeff=1e-3,
)
_DEEPSEEK_V3_ROUTER = RouterSpec(
    # deepseek_v3_bridge.py: sigmoid scores with expert bias (topk_method noaux_tc),
    # sequence-wise aux loss of coefficient aux_loss_alpha (0.001 in config.json), fp32
    # router, pre-softmax (no effect with sigmoid); config.json n_group 8, topk_group 4,
    # routed_scaling_factor 2.5, norm_topk_prob true (Megatron's sigmoid normalizes).
    moe_router_score_function="sigmoid",
    moe_router_pre_softmax=True,
    moe_router_enable_expert_bias=True,
    moe_router_num_groups=8,
    moe_router_group_topk=4,
    moe_router_topk_scaling_factor=2.5,
    moe_router_load_balancing_type="seq_aux_loss",
    moe_aux_loss_coeff=1e-3,
    moe_router_dtype="fp32",
)
_KIMI_K2_ROUTER = dataclasses.replace(
    # kimi_bridge.py: as DeepSeek-V3's with aux-loss coefficient 1e-3; config.json
    # scoring_func sigmoid, n_group 1, topk_group 1 (one group: no limit in effect),
    # routed_scaling_factor 2.827.
    _DEEPSEEK_V3_ROUTER,
    moe_router_num_groups=1,
    moe_router_group_topk=1,
    moe_router_topk_scaling_factor=2.827,
)
_GPT_OSS_ROUTER = RouterSpec(
    # gpt_oss_bridge.py: softmax over the top-k logits (GptOssTopKRouter), no load
    # balancing (config.json's router_aux_loss_coef is then unused).
    moe_router_load_balancing_type="none",
)


def _llama_style(name: str, **dims: Any) -> tuple[str, Factory]:
    """A registry entry for a Llama-style decoder: SwiGLU MLP, RMSNorm, RoPE, untied
    input/output embeddings and no linear biases (Llama, Mixtral, Qwen3, DeepSeek)."""
    return name, partial(
        ModelSpec,
        name=name,
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding="rope",
        tied_embeddings=False,
        **{"add_bias_linear": False, **dims},
    )


def _gpt_style(name: str, **dims: Any) -> tuple[str, Factory]:
    """A registry entry for a Megatron GPT: GELU MLP, LayerNorm, learned positions, tied
    embeddings and biases on every linear layer (Megatron's GPT defaults)."""
    return name, partial(
        ModelSpec,
        name=name,
        activation="gelu",
        normalization="layernorm",
        position_embedding="learned",
        tied_embeddings=True,
        add_bias_linear=True,
        **dims,
    )


def _sc21_gpt(name: str, num_layers: int, hidden_size: int, heads: int) -> tuple[str, Factory]:
    """One row of SC21 Table 1: ffn 4h, vocab 51200, 2048 learned positions, MHA."""
    return _gpt_style(
        name,
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden_size,
        vocab_size=51200,
        max_position_embeddings=2048,
    )


_TINY = (
    # Small enough that one training step on a CPU takes milliseconds; tp up to 2 divides
    # the query groups, and every degree up to 4 (pp, ep) divides the layers and experts.
    _llama_style(
        "tiny",
        num_layers=4,
        hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=256,
        vocab_size=512,
        max_position_embeddings=2048,
    ),
    _gpt_style(
        "tiny-gelu",
        num_layers=4,
        hidden_size=128,
        num_attention_heads=4,
        ffn_hidden_size=512,
        vocab_size=512,
        max_position_embeddings=1024,
    ),
    _llama_style(
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

_SC21_GPT = (
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

_LLAMA = (
    # meta-llama/Llama-2-{7b,13b,70b}-hf config.json.
    _llama_style(
        "llama2-7b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        ffn_hidden_size=11008,
        vocab_size=32000,
        max_position_embeddings=4096,
    ),
    _llama_style(
        "llama2-13b",
        num_layers=40,
        hidden_size=5120,
        num_attention_heads=40,
        ffn_hidden_size=13824,
        vocab_size=32000,
        max_position_embeddings=4096,
    ),
    _llama_style(
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
    _llama_style(
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
    _llama_style(
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
    _llama_style(
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

_MOE = (
    # mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1 config.json: every layer is MoE,
    # so ffn_hidden_size is the expert size. 8x22B's base release uses the 32000-token
    # tokenizer (its Instruct release has 32768). Both have rope_theta 1000000; their
    # router_aux_loss_coef is 0.02 (8x7B) and 0.001 (8x22B).
    _llama_style(
        "mixtral-8x7b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=32000,
        max_position_embeddings=32768,
        num_experts=8,
        moe_top_k=2,
        rotary_base=1000000,
        router=_mixtral_router(0.02),
    ),
    _llama_style(
        "mixtral-8x22b",
        num_layers=56,
        hidden_size=6144,
        num_attention_heads=48,
        num_query_groups=8,
        ffn_hidden_size=16384,
        vocab_size=32000,
        max_position_embeddings=65536,
        num_experts=8,
        moe_top_k=2,
        rotary_base=1000000,
        router=_mixtral_router(1e-3),
    ),
    # Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B config.json. head_dim is 128 whatever
    # hidden / heads is, hence kv_channels; rope_theta 1000000; the per-head q/k RMSNorm
    # (qk_layernorm; its 2 x 128 weights per layer are left out of the count). Every layer is MoE
    # (decoder_sparse_step 1, no mlp_only_layers); the dense intermediate_size is kept as
    # ffn_hidden_size as published although no layer uses it.
    _llama_style(
        "qwen3-30b-a3b",
        num_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_query_groups=4,
        kv_channels=128,
        ffn_hidden_size=6144,
        vocab_size=151936,
        max_position_embeddings=40960,
        num_experts=128,
        moe_top_k=8,
        moe_ffn_hidden_size=768,
        rotary_base=1000000,
        qk_layernorm=True,
        router=_QWEN3_MOE_ROUTER,
    ),
    _llama_style(
        "qwen3-235b-a22b",
        num_layers=94,
        hidden_size=4096,
        num_attention_heads=64,
        num_query_groups=4,
        kv_channels=128,
        ffn_hidden_size=12288,
        vocab_size=151936,
        max_position_embeddings=40960,
        num_experts=128,
        moe_top_k=8,
        moe_ffn_hidden_size=1536,
        rotary_base=1000000,
        qk_layernorm=True,
        router=_QWEN3_MOE_ROUTER,
    ),
    # deepseek-ai/DeepSeek-V3 config.json: MLA, 256 routed experts (top-8) plus one shared
    # expert of moe_intermediate_size, the first 3 layers dense, one multi-token-prediction
    # layer (num_nextn_predict_layers 1; Megatron `--mtp-num-layers 1`).
    _llama_style(
        "deepseek-v3",
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=128,
        ffn_hidden_size=18432,
        vocab_size=129280,
        max_position_embeddings=163840,
        num_experts=256,
        moe_top_k=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_size=2048,
        moe_first_dense_layers=3,
        mtp_num_layers=1,
        router=_DEEPSEEK_V3_ROUTER,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
    ),
)

_RECIPE_MOE = (
    # openai/gpt-oss-20b and gpt-oss-120b config.json (model_type gpt_oss): head_dim 64,
    # 8 KV heads, every layer MoE with biased SwiGLU experts of intermediate_size 2880,
    # top-4, q/k/v/o biases, one sink per head, sliding window 128 on even layers, untied
    # 201088-token embeddings, rope_theta 150000, `_GPT_OSS_ROUTER`. The router's bias
    # (one per expert) has no field and is left out.
    *(
        _llama_style(
            name,
            num_layers=layers,
            hidden_size=2880,
            num_attention_heads=64,
            num_query_groups=8,
            kv_channels=64,
            ffn_hidden_size=2880,
            vocab_size=201088,
            max_position_embeddings=131072,
            num_experts=experts,
            moe_top_k=4,
            add_bias_linear=True,
            attention_sinks=True,
            sliding_window=128,
            rotary_base=150000,
            router=_GPT_OSS_ROUTER,
        )
        for name, layers, experts in (("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128))
    ),
    # moonshotai/Kimi-K2-Instruct config.json (model_type deepseek_v3): DeepSeek-V3's MLA
    # with 64 heads, 384 routed experts of 2048 (top-8) plus one shared, only the first
    # layer dense, 163840-token vocabulary, rope_theta 50000.
    _llama_style(
        "kimi-k2",
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=64,
        ffn_hidden_size=18432,
        vocab_size=163840,
        max_position_embeddings=131072,
        num_experts=384,
        moe_top_k=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_size=2048,
        moe_first_dense_layers=1,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        rotary_base=50000,
        router=_KIMI_K2_ROUTER,
    ),
)

_NEMOTRON = (
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
            position_embedding="rope",
            tied_embeddings=False,
            add_bias_linear=False,
        ),
    ),
    # NeMo's Nemotron4Config340B: squared-ReLU MLP, which is not among ModelSpec's
    # activations; it is modelled as `gelu`, i.e. the same non-gated two-matrix MLP, so
    # weights and FLOPs are exact and only the element-wise activation differs. LayerNorm,
    # RoPE, untied embeddings, no linear biases, 256k vocabulary, 4096 positions.
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
            position_embedding="rope",
            tied_embeddings=False,
            add_bias_linear=False,
        ),
    ),
)

PRESETS: dict[str, Factory] = dict((*_TINY, *_SC21_GPT, *_LLAMA, *_MOE, *_RECIPE_MOE, *_NEMOTRON))
"""Every preset, name -> factory, in registry order."""


def preset_names() -> list[str]:
    """Preset names in registry order."""
    return list(PRESETS)


def get_preset(name: str) -> ModelSpec:
    """The `ModelSpec` of a named preset; an unknown name lists every valid one."""
    factory = PRESETS.get(name)
    if factory is None:
        raise SpecError(unknown_name_message("model preset", name, PRESETS))
    return factory()
