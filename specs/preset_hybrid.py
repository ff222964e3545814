"""The hybrid model presets of `specs.presets`, as registry entries in registry order:
`HYBRID` (Nemotron-H 8B, 47B, 56B, Nemotron 3 Nano 30B-A3B and Nemotron 3 Super
120B-A12B, Mamba-2 hybrids; Qwen3-Next 80B-A3B, a gated DeltaNet hybrid).

Values are those of Megatron-Bridge's model providers (NVIDIA-NeMo/Megatron-Bridge tag
v0.4.0, ``src/megatron/bridge/models/nemotronh/nemotron_h_provider.py``:
``NemotronHModelProvider8B``, ``...47B``, ``...56B``, ``Nemotron3NanoProvider``, on
``NemotronHModelProvider`` and ``mamba/mamba_provider.py`` ``MambaModelProvider``): the
hybrid pattern, hidden size, attention heads and query groups (8; Nano 2), Mamba-2 state
size, heads, head dim 64 and 8 groups, RMSNorm, no linear biases, untied embeddings
(``share_embeddings_and_output_weights`` False) and no position embedding
(``position_embedding_type`` "none"; the bridge sets it for every Nemotron-H checkpoint).
The vocabulary is the 131072-token tokenizer of the Hugging Face checkpoints
(``vocab_size`` in their config.json). ``max_position_embeddings`` is the provider's
``seq_length`` (8192; Nano 262144); with no position embedding it has no weights.

Nemotron 3 Super has no provider class: its recipes build the model from the Hugging Face
config of nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 through ``AutoBridge``
(``recipes/nemotronh/nemotron_3_super.py``; ``NemotronHBridge.provider_bridge``). Its
config.json: 88 layers (40 ``M``, 40 ``E``, 8 ``*``), hidden 4096, 32 heads of 128 with 2
key/value heads, Mamba-2 128 heads of 64, 8 groups, state 128; ``E`` layers of 512 experts
of 2688, top-22, a shared expert of 5376, ``moe_latent_size`` 1024, ``routed_scaling_factor``
5.0; one MTP depth ``mtp_hybrid_override_pattern`` ``*E``, which the recipes run at two
depths with one set of weights (``mtp_num_layers = 2``, ``mtp_use_repeated_layer``).

The providers' MLP is squared ReLU (``activation_func = squared_relu``,
``gated_linear_unit`` False): a non-gated MLP with two weight matrices, h -> F -> h.
`ModelSpec` has no squared-ReLU activation; it is modelled as ``gelu``, the same two
GEMMs and weights, so parameter counts and FLOPs are exact and only the element-wise
activation differs (as `specs.preset_dense`'s Nemotron-4). Canonical form as
`specs.presets`: ``kv_channels`` only when the head dim differs from hidden / heads and
``mamba_num_heads`` only when it differs from 2·hidden / mamba_head_dim.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

from specs.model import ModelSpec
from specs.preset_styles import Factory, llama_style
from specs.router import RouterSpec

_NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
_NEMOTRON_H_47B = (
    "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*"
    "-M-M-M-M-M-"
)
_NEMOTRON_H_56B = (
    "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
    "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
)
_NEMOTRON_3_NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
_QWEN3_NEXT = "GEGEGE*E" * 12
"""Qwen3-Next's 48 layers as Megatron-core hybrid symbols: each layer a token mixer and an
MoE block, every 4th mixer full (gated) attention (``full_attention_interval`` 4), the
others gated DeltaNets."""
_NEMOTRON_3_SUPER = (
    "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
)

NEMOTRON_H_ROUTER = RouterSpec(
    # NemotronHModelProvider (and NemotronHBridge.provider_bridge): sigmoid scores with the
    # expert bias, the sequence-wise aux loss of coefficient 1e-4, fp32 router;
    # Nemotron3NanoProvider: top-k scaling 2.5, one expert group of which one.
    moe_router_score_function="sigmoid",
    moe_router_enable_expert_bias=True,
    moe_router_load_balancing_type="seq_aux_loss",
    moe_aux_loss_coeff=1e-4,
    moe_router_dtype="fp32",
    moe_router_num_groups=1,
    moe_router_group_topk=1,
    moe_router_topk_scaling_factor=2.5,
)
"""The router of Nemotron 3 Nano's ``E`` layers (Megatron-Bridge v0.4.0 providers)."""

NEMOTRON_3_SUPER_ROUTER = dataclasses.replace(NEMOTRON_H_ROUTER, moe_router_topk_scaling_factor=5.0)
"""Nemotron 3 Super's router: the bridge's Nemotron-H router with the config's
``routed_scaling_factor`` 5.0 (``n_group`` and ``topk_group`` 1)."""

QWEN3_NEXT_ROUTER = RouterSpec(
    # Qwen3NextBridge.provider_bridge (Megatron-Bridge v0.6.0, qwen3_next_bridge.py):
    # global aux loss of coefficient 1e-3, no pre-softmax (norm_topk_prob true), fp32 router.
    moe_router_load_balancing_type="global_aux_loss",
    moe_aux_loss_coeff=1e-3,
    moe_router_dtype="fp32",
)
"""The router of Qwen3-Next's MoE layers."""


def qwen3_next_style(name: str, pattern: str, **dims: Any) -> tuple[str, Factory]:
    """A registry entry for a Qwen3-Next hybrid: a Llama-style decoder
    (`specs.preset_styles.llama_style`) whose layers are ``pattern``'s symbols, with
    Qwen3-Next's fixed choices (Megatron-Bridge v0.6.0 ``Qwen3NextBridge.provider_bridge``):
    per-head q/k norms, zero-centred norm weights, gated attention, a gated shared expert,
    and Qwen3-Next's router."""
    fields: dict[str, Any] = {
        "qk_layernorm": True,
        "layernorm_zero_centered_gamma": True,
        "attention_output_gate": True,
        "moe_shared_expert_gate": True,
        "router": QWEN3_NEXT_ROUTER,
        **dims,
    }
    return llama_style(name, num_layers=len(pattern), hybrid_layer_pattern=pattern, **fields)


def nemotron_h_style(name: str, pattern: str, **dims: Any) -> tuple[str, Factory]:
    """A registry entry for a Nemotron-H hybrid: one layer per symbol of ``pattern``,
    squared-ReLU MLP modelled as ``gelu`` (module docstring), RMSNorm, no position
    embedding, untied embeddings, no linear biases, 131072-token vocabulary, 8 query
    groups, Mamba-2 head dim 64 and 8 groups unless ``dims`` says otherwise."""
    fields: dict[str, Any] = {
        "num_query_groups": 8,
        "vocab_size": 131072,
        "max_position_embeddings": 8192,
        "mamba_head_dim": 64,
        "mamba_num_groups": 8,
        **dims,
    }
    return name, partial(
        ModelSpec,
        name=name,
        num_layers=len(pattern),
        hybrid_layer_pattern=pattern,
        activation="gelu",
        normalization="rmsnorm",
        position_embedding="none",
        tied_embeddings=False,
        add_bias_linear=False,
        **fields,
    )


HYBRID = (
    # NemotronHModelProvider8B: hidden 4096, 32 heads (head dim 128), ffn 21504, Mamba-2
    # state 128 and 128 heads (= 2·4096 / 64).
    nemotron_h_style(
        "nemotron-h-8b",
        _NEMOTRON_H_8B,
        hidden_size=4096,
        num_attention_heads=32,
        ffn_hidden_size=21504,
        mamba_state_dim=128,
    ),
    # NemotronHModelProvider47B: hidden 8192, 64 heads, ffn 30720, state 256, 256 heads.
    nemotron_h_style(
        "nemotron-h-47b",
        _NEMOTRON_H_47B,
        hidden_size=8192,
        num_attention_heads=64,
        ffn_hidden_size=30720,
        mamba_state_dim=256,
    ),
    # NemotronHModelProvider56B: hidden 8192, 64 heads, ffn 32768, state 256, 256 heads.
    nemotron_h_style(
        "nemotron-h-56b",
        _NEMOTRON_H_56B,
        hidden_size=8192,
        num_attention_heads=64,
        ffn_hidden_size=32768,
        mamba_state_dim=256,
    ),
    # Nemotron3NanoProvider: hidden 2688, 32 heads of 128 with 2 query groups, 64 Mamba-2
    # heads (not 2·2688 / 64), state 128; E layers of 128 experts of 1856, top-6, one
    # shared expert of 3712; no - layer, so ffn_hidden_size (1856) sizes nothing.
    nemotron_h_style(
        "nemotron-3-nano",
        _NEMOTRON_3_NANO,
        hidden_size=2688,
        num_attention_heads=32,
        num_query_groups=2,
        kv_channels=128,
        ffn_hidden_size=1856,
        max_position_embeddings=262144,
        mamba_state_dim=128,
        mamba_num_heads=64,
        num_experts=128,
        moe_top_k=6,
        moe_shared_expert_size=3712,
        router=NEMOTRON_H_ROUTER,
    ),
    # Nemotron 3 Super config.json (module docstring): latent MoE and a repeated MTP depth.
    nemotron_h_style(
        "nemotron-3-super",
        _NEMOTRON_3_SUPER,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=2,
        ffn_hidden_size=2688,
        max_position_embeddings=262144,
        mamba_state_dim=128,
        num_experts=512,
        moe_top_k=22,
        moe_shared_expert_size=5376,
        moe_latent_size=1024,
        mtp_num_layers=2,
        mtp_hybrid_pattern="*E",
        mtp_repeated_layer=True,
        router=NEMOTRON_3_SUPER_ROUTER,
    ),
    # Qwen/Qwen3-Next-80B-A3B config.json as Megatron-Bridge v0.6.0 tests it
    # (tests/unit_tests/models/qwen/test_qwen3_next_bridge.py, qwen3_next_80b_a3b_config_dict):
    # hidden 2048, 48 layers (full_attention_interval 4), 16 heads of 256 with 2 key/value
    # heads, partial_rotary_factor 0.25, rope_theta 1e7; linear attention 16 key heads and
    # 32 value heads of 128, conv kernel 4; 512 experts of 512, top-10, a shared expert of
    # 512; vocabulary 151936, untied. One MTP depth (*E: a gated attention layer and an MoE
    # layer): recipes/qwen/h100/qwen3_next.py sets mtp_num_layers = 1.
    qwen3_next_style(
        "qwen3-next-80b-a3b",
        _QWEN3_NEXT,
        hidden_size=2048,
        num_attention_heads=16,
        num_query_groups=2,
        kv_channels=256,
        ffn_hidden_size=512,
        vocab_size=151936,
        max_position_embeddings=262144,
        rotary_base=10_000_000,
        rotary_percent=0.25,
        num_experts=512,
        moe_top_k=10,
        moe_shared_expert_size=512,
        mtp_num_layers=1,
        mtp_hybrid_pattern="*E",
    ),
)
"""Nemotron-H 8B, 47B and 56B, Nemotron 3 Nano 30B-A3B, Nemotron 3 Super 120B-A12B,
Qwen3-Next 80B-A3B."""
