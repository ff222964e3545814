"""The hybrid Mamba-2 presets (specs.preset_hybrid) against Megatron-Bridge's Nemotron-H
providers (tag v0.4.0, src/megatron/bridge/models/nemotronh/nemotron_h_provider.py), and
a plan Megatron accepts for each."""

from __future__ import annotations

import pytest

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset, preset_names
from specs.rules import check_plan

HYBRIDS = [
    "nemotron-h-8b",
    "nemotron-h-47b",
    "nemotron-h-56b",
    "nemotron-3-nano",
    "nemotron-3-super",
]

# Provider fields: (layers, hidden, heads, query groups, ffn, Mamba-2 state, Mamba-2 heads).
PROVIDERS = {
    "nemotron-h-8b": (52, 4096, 32, 8, 21504, 128, 128),
    "nemotron-h-47b": (98, 8192, 64, 8, 30720, 256, 256),
    "nemotron-h-56b": (118, 8192, 64, 8, 32768, 256, 256),
    "nemotron-3-nano": (52, 2688, 32, 2, 1856, 128, 64),
    # no provider class: the Hugging Face config.json the recipes load (specs.preset_hybrid)
    "nemotron-3-super": (88, 4096, 32, 2, 2688, 128, 128),
}


def test_hybrid_presets_are_registered_last() -> None:
    assert preset_names()[-6:] == [*HYBRIDS, "qwen3-next-80b-a3b"]


@pytest.mark.parametrize("name", HYBRIDS)
def test_preset_takes_the_provider_values(name: str) -> None:
    m = get_preset(name)
    shape = (m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups)
    assert (*shape, m.ffn_hidden_size, m.mamba_state_dim, m.mamba_heads) == PROVIDERS[name]
    assert m.is_hybrid and m.num_layers == len(m.hybrid_layer_pattern or "")
    assert (m.mamba_head_dim, m.mamba_num_groups, m.mamba_conv_kernel) == (64, 8, 4)
    assert m.head_dim == 128 and m.vocab_size == 131072
    # MambaModelProvider: RMSNorm, no biases, untied; the bridge: no position embedding;
    # squared ReLU is the two-matrix MLP, modelled as gelu
    assert (m.normalization, m.position_embedding, m.activation) == ("rmsnorm", "none", "gelu")
    assert not (m.tied_embeddings or m.add_bias_linear or m.add_qkv_bias or m.qk_layernorm)


@pytest.mark.parametrize("name", HYBRIDS)
def test_mamba_heads_in_canonical_form(name: str) -> None:
    # mamba_num_heads only when it differs from 2·hidden / head dim (Nano: 64, not 84)
    m = get_preset(name)
    assert m.mamba_num_heads is None or m.mamba_num_heads * m.mamba_head_dim != 2 * m.hidden_size
    assert (m.mamba_num_heads is not None) == (name == "nemotron-3-nano")


def test_nemotron_3_nano_experts_and_router() -> None:
    """Nemotron3NanoProvider: 128 experts of 1856, top-6, shared expert 3712; the router of
    NemotronHModelProvider (sigmoid, expert bias, seq_aux_loss 1e-4, fp32) with scaling
    2.5 and one group of which one."""
    m = get_preset("nemotron-3-nano")
    assert (m.num_experts, m.moe_top_k, m.expert_ffn_hidden_size) == (128, 6, 1856)
    assert m.moe_ffn_hidden_size is None and m.moe_shared_expert_size == 3712
    assert m.num_moe_layers == 23 and m.max_position_embeddings == 262144
    r = m.router
    assert (r.moe_router_score_function, r.moe_router_enable_expert_bias) == ("sigmoid", True)
    assert (r.moe_router_load_balancing_type, r.moe_aux_loss_coeff) == ("seq_aux_loss", 1e-4)
    assert (r.moe_router_num_groups, r.moe_router_group_topk) == (1, 1)
    assert (r.moe_router_topk_scaling_factor, r.moe_router_dtype) == (2.5, "fp32")


@pytest.mark.parametrize(
    ("name", "plan"),
    [
        ("nemotron-h-8b", ParallelPlan(tp=4, pp=2, dp=8, sequence_parallel=True)),
        ("nemotron-h-56b", ParallelPlan(tp=8, pp=2, dp=4, sequence_parallel=True)),
        ("nemotron-3-nano", ParallelPlan(tp=2, ep=8, dp=32, sequence_parallel=True)),
    ],
)
def test_preset_validates_with_a_plan(name: str, plan: ParallelPlan) -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=plan.world_size)
    job = TrainingJob(seq_length=8192, global_batch_size=64)
    assert check_plan(get_preset(name), cluster, job, plan) == []


def test_nemotron_3_super_experts_latent_router_and_mtp() -> None:
    """nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 config.json: 512 experts of 2688,
    top-22, shared expert 5376, moe_latent_size 1024, routed_scaling_factor 5.0, one MTP
    depth "*E"; its Megatron-Bridge recipes run that depth twice with one set of weights
    (recipes/nemotronh/nemotron_3_super.py: mtp_num_layers 2, mtp_use_repeated_layer)."""
    m = get_preset("nemotron-3-super")
    assert (m.num_experts, m.moe_top_k, m.expert_ffn_hidden_size) == (512, 22, 2688)
    assert (m.moe_shared_expert_size, m.moe_latent_size) == (5376, 1024)
    assert m.router.moe_router_topk_scaling_factor == 5.0
    assert (m.mtp_num_layers, m.mtp_hybrid_pattern, m.mtp_repeated_layer) == (2, "*E", True)
    pattern = m.hybrid_layer_pattern or ""
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (40, 40, 8)
