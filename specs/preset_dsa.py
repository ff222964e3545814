"""The DeepSeek-sparse-attention presets of `specs.presets`: GLM-5.1 and GLM-5.2
(Z.ai, Hugging Face ``GlmMoeDsaForCausalLM``, model_type ``glm_moe_dsa``).

Dimensions: the GLM-5 config.json (hidden_size 6144, 78 layers, the first 3 dense
(first_k_dense_replace), 64 heads, q_lora_rank 2048, kv_lora_rank 512, qk_nope_head_dim 192,
qk_rope_head_dim 64, v_head_dim 256, intermediate_size 12288, 256 routed experts of
moe_intermediate_size 2048 (top-8) plus one shared, vocab_size 154880, rope_theta 1e6,
index_n_heads 32, index_head_dim 128, index_topk 2048, num_nextn_predict_layers 1).
Megatron-Bridge v0.6.0 (``models/glm_moe_dsa/glm5_bridge.py``, `GLM5Bridge`) maps GLM-5,
5.1 and 5.2 through one bridge ("same architecture and mapping shape as GLM-5",
``docs/models/glm/glm5.md``); GLM-5.2 adds index sharing, ``index_topk_freq`` 4 and
``index_skip_topk_offset`` 3 (``tests/functional_tests/.../test_glm5_conversion.py``,
``HF_GLM52_INDEXSHARE_TOY_MODEL_CONFIG``). The bridge sets the router (sigmoid scores,
expert bias, ``seq_aux_loss``, fp32), ``dsa_indexer_loss_coeff`` 0.001 and
``dsa_indexer_use_sparse_loss``; the perf recipes (``perf_recipes/glm_moe_dsa``) set
``mtp_num_layers`` 1.

Parameter counts (`specs.params.count_params`), checked against Megatron-Bridge's model
verification cards (``examples/model_verification_cards``): GLM-5's 78-layer graph is
1,487,822,475,264 bytes in bf16, i.e. 743,911,199,232 parameters at 2 bytes plus the 75
MoE layers' fp32 expert-bias buffers (256 x 4 bytes each, a buffer paraplan does not count);
GLM-5.2 reloads in Transformers with 743,377,000,704 parameters, 57 indexers (of 9,371,904
each) fewer. Both equal `ParamCounts.main_total` exactly.
"""

from __future__ import annotations

import dataclasses

from specs.preset_moe import DEEPSEEK_V3_ROUTER
from specs.preset_styles import Factory, llama_style

GLM5_ROUTER = dataclasses.replace(
    # glm5_bridge.py: sigmoid scores with expert bias, seq_aux_loss, fp32 router; GLM-5
    # config.json n_group 1, topk_group 1 (one group: no limit), routed_scaling_factor 2.5,
    # no aux_loss_alpha, so the coefficient stays TransformerConfig's default 0.
    DEEPSEEK_V3_ROUTER,
    moe_router_num_groups=1,
    moe_router_group_topk=1,
    moe_aux_loss_coeff=0.0,
)


def _glm5(name: str, **sharing: int) -> tuple[str, Factory]:
    """A GLM-5 family entry; ``sharing`` the index-sharing fields that differ."""
    return llama_style(
        name,
        num_layers=78,
        hidden_size=6144,
        num_attention_heads=64,
        ffn_hidden_size=12288,
        vocab_size=154880,
        max_position_embeddings=202752,
        num_experts=256,
        moe_top_k=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_size=2048,
        moe_first_dense_layers=3,
        mtp_num_layers=1,
        router=GLM5_ROUTER,
        q_lora_rank=2048,
        kv_lora_rank=512,
        qk_head_dim=192,
        qk_pos_emb_head_dim=64,
        v_head_dim=256,
        rotary_base=1000000,
        dsa_indexer_n_heads=32,
        dsa_indexer_head_dim=128,
        dsa_indexer_topk=2048,
        dsa_indexer_loss_coeff=0.001,
        dsa_indexer_use_sparse_loss=True,
        **sharing,
    )


DSA = (
    _glm5("glm-5.1"),
    _glm5("glm-5.2", dsa_indexer_topk_freq=4, dsa_indexer_skip_topk_offset=3),
)
"""GLM-5.1 and GLM-5.2."""
