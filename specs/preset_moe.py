"""The mixture-of-experts model presets of `specs.presets`, as registry entries in
registry order: `MOE` (Mixtral, Qwen3 MoE, DeepSeek-V3) and `RECIPE_MOE` (GPT-OSS, Kimi K2,
the MoE models of the published recipes), with their routers.

Values are those of the models' Hugging Face `config.json` files; each router
(`ModelSpec.router`) takes the Megatron settings of Megatron-Bridge's model provider of
the family. The canonical form is `specs.presets`'.
"""

from __future__ import annotations

import dataclasses

from specs.preset_styles import llama_style
from specs.router import RouterSpec

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
DEEPSEEK_V3_ROUTER = RouterSpec(
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
    DEEPSEEK_V3_ROUTER,
    moe_router_num_groups=1,
    moe_router_group_topk=1,
    moe_router_topk_scaling_factor=2.827,
)
_GPT_OSS_ROUTER = RouterSpec(
    # gpt_oss_bridge.py: softmax over the top-k logits (GptOssTopKRouter), no load
    # balancing (config.json's router_aux_loss_coef is then unused).
    moe_router_load_balancing_type="none",
)


MOE = (
    # mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1 config.json: every layer is MoE,
    # so ffn_hidden_size is the expert size. 8x22B's base release uses the 32000-token
    # tokenizer (its Instruct release has 32768). Both have rope_theta 1000000; their
    # router_aux_loss_coef is 0.02 (8x7B) and 0.001 (8x22B).
    llama_style(
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
    llama_style(
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
    llama_style(
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
    llama_style(
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
    llama_style(
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
        router=DEEPSEEK_V3_ROUTER,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
    ),
)
"""Mixtral 8x7B and 8x22B, Qwen3 30B-A3B and 235B-A22B, DeepSeek-V3."""

RECIPE_MOE = (
    # openai/gpt-oss-20b and gpt-oss-120b config.json (model_type gpt_oss): head_dim 64,
    # 8 KV heads, every layer MoE with biased SwiGLU experts of intermediate_size 2880,
    # top-4, q/k/v/o biases, one sink per head, sliding window 128 on even layers, untied
    # 201088-token embeddings, rope_theta 150000, `_GPT_OSS_ROUTER`. The router's bias
    # (one per expert) has no field and is left out.
    *(
        llama_style(
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
    llama_style(
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
"""The MoE models of the published recipes: GPT-OSS 20B and 120B, Kimi K2."""
