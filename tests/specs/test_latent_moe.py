"""Latent MoE in the specs (``ModelSpec.moe_latent_size``): its validation and round trip,
the parameter counts of one latent MoE layer worked by hand, and the executor's refusal."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from specs.latent_checks import executor_latent_moe_refusal
from specs.mixer_params import latent_projection_params
from specs.model import ModelSpec
from specs.params import count_params
from specs.presets import get_preset
from specs.serde import from_dict, to_dict

# One E layer of Nemotron 3 Super's shape (megatron-facts.md §2.1 and the model's Hugging
# Face config.json):
# h 4096, latent 1024, 512 experts of 2688, top-22, a shared expert of 5376, non-gated
# (squared ReLU, two matrices per MLP, modelled as gelu).
SUPER_LAYER = ModelSpec(
    name="super-layer",
    num_layers=1,
    hybrid_layer_pattern="E",
    hidden_size=4096,
    num_attention_heads=32,
    ffn_hidden_size=2688,
    vocab_size=1024,
    activation="gelu",
    num_experts=512,
    moe_top_k=22,
    moe_shared_expert_size=5376,
    moe_latent_size=1024,
)


def test_one_latent_moe_layer_counts_as_worked_by_hand() -> None:
    layer = count_params(SUPER_LAYER).layers[0]
    assert layer.routed_experts == 512 * 2 * 1024 * 2688 == 2_818_572_288
    assert layer.mlp == 2 * 4096 * 5376 == 44_040_192  # shared expert, on h
    assert layer.latent_projections == 2 * 4096 * 1024 == 8_388_608
    assert layer.router == 512 * 4096 == 2_097_152
    assert layer.norms == 4096  # the E layer's one RMSNorm
    assert layer.attention == 0
    assert layer.total == 2_818_572_288 + 44_040_192 + 8_388_608 + 2_097_152 + 4096
    # active: 22 of the 512 experts, everything else whole
    assert layer.active(SUPER_LAYER) == layer.total - 2_818_572_288 + 22 * 2 * 1024 * 2688


def test_latent_projections_carry_biases_with_add_bias_linear() -> None:
    biased = SUPER_LAYER.replace(add_bias_linear=True)
    assert latent_projection_params(biased) == 2 * 4096 * 1024 + 1024 + 4096
    layer = count_params(biased).layers[0]
    # each expert: fc1 1024 -> 2688 and fc2 2688 -> 1024 with their biases
    assert layer.routed_experts == 512 * (1024 * 2688 + 2688 + 2688 * 1024 + 1024)


def test_without_latent_size_nothing_changes() -> None:
    plain = SUPER_LAYER.replace(moe_latent_size=None)
    layer = count_params(plain).layers[0]
    assert layer.latent_projections == 0 and latent_projection_params(plain) == 0
    assert layer.routed_experts == 512 * 2 * 4096 * 2688
    assert plain.expert_hidden_size == 4096 and SUPER_LAYER.expert_hidden_size == 1024


@pytest.mark.parametrize("value", [0, -1024])
def test_latent_size_must_be_positive(value: int) -> None:
    with pytest.raises(SpecError, match="moe_latent_size"):
        SUPER_LAYER.replace(moe_latent_size=value)


def test_latent_size_needs_routed_experts() -> None:
    dense = get_preset("llama3-8b")
    with pytest.raises(SpecError, match=r"moe_latent_size \(512\).*num_experts is 0"):
        dense.replace(moe_latent_size=512)


def test_latent_size_round_trips_and_defaults_to_none() -> None:
    assert from_dict(ModelSpec, to_dict(SUPER_LAYER)) == SUPER_LAYER
    data = to_dict(SUPER_LAYER)
    del data["moe_latent_size"]
    assert from_dict(ModelSpec, data).moe_latent_size is None


def test_executor_refuses_a_latent_moe_model() -> None:
    refusal = executor_latent_moe_refusal(SUPER_LAYER)
    assert refusal is not None
    assert "[latent_moe_not_in_executor]" in refusal and "--runtime megatron" in refusal
    assert executor_latent_moe_refusal(get_preset("mixtral-8x7b")) is None
