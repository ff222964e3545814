"""Tests of the Hugging Face import of model_type nemotron_h (specs.hf_hybrid), on
hand-written configs with NemotronHConfig's keys: round trips to the presets, the layer
pattern's two spellings, and the refusals naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from specs.errors import SpecError
from specs.hf_import import model_from_hf_config
from specs.presets import get_preset

NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"

# Hand-written from the keys NemotronHConfig and Megatron-Bridge's NemotronHBridge read, with
# the values of Nemotron3NanoProvider (Megatron-Bridge v0.4.0) and the 131072-token vocabulary;
# keys that change no weight shape (epsilons, dtypes, chunk_size) are left out.
NANO: dict[str, Any] = {
    "model_type": "nemotron_h",
    "architectures": ["NemotronHForCausalLM"],
    "hybrid_override_pattern": NANO_PATTERN,
    "num_hidden_layers": 52,
    "hidden_size": 2688,
    "intermediate_size": 1856,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "vocab_size": 131072,
    "max_position_embeddings": 262144,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "use_bias": False,
    "mlp_hidden_act": "relu2",
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "mamba_hidden_act": "silu",
    "mamba_proj_bias": False,
    "use_conv_bias": True,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
}

H8B: dict[str, Any] = {
    **{k: v for k, v in NANO.items() if not k.startswith(("n_routed", "n_shared", "moe_"))},
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "hidden_size": 4096,
    "intermediate_size": 21504,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "mamba_num_heads": 128,
}

# Nemotron 3 Super's config.json (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16), the keys
# that shape weights, routing and MTP.
SUPER: dict[str, Any] = {
    **NANO,
    "hybrid_override_pattern": (
        "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
    ),
    "num_hidden_layers": 88,
    "hidden_size": 4096,
    "intermediate_size": 2688,
    "mamba_num_heads": 128,
    "n_routed_experts": 512,
    "num_experts_per_tok": 22,
    "moe_intermediate_size": 2688,
    "moe_shared_expert_intermediate_size": 5376,
    "moe_latent_size": 1024,
    "routed_scaling_factor": 5.0,
    "num_nextn_predict_layers": 1,
    "mtp_hybrid_override_pattern": "*E",
}


def test_nano_config_round_trips_to_its_preset() -> None:
    spec = model_from_hf_config(NANO, name="nemotron-3-nano")
    assert spec == get_preset("nemotron-3-nano")


def test_super_config_is_its_preset_at_the_configs_one_mtp_depth() -> None:
    # the recipes run the config's one depth twice (mtp_num_layers 2, specs.preset_hybrid)
    spec = model_from_hf_config(SUPER, name="nemotron-3-super")
    assert spec == get_preset("nemotron-3-super").replace(mtp_num_layers=1)


def test_dense_config_round_trips_to_its_preset() -> None:
    # mamba_num_heads 128 = 2·4096 / 64 and head dim 128 = 4096 / 32: canonical None
    spec = model_from_hf_config(H8B, name="nemotron-h-8b")
    assert spec == get_preset("nemotron-h-8b")
    assert spec.mamba_num_heads is None and spec.kv_channels is None and not spec.is_moe


def test_layers_block_type_spells_the_same_pattern() -> None:
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    config = {k: v for k, v in NANO.items() if k != "hybrid_override_pattern"}
    config["layers_block_type"] = [names[s] for s in NANO_PATTERN]
    assert model_from_hf_config(config, name="n").hybrid_layer_pattern == NANO_PATTERN


def test_attention_head_dim_is_read_when_head_dim_is_absent() -> None:
    config = {k: v for k, v in NANO.items() if k != "head_dim"}
    assert model_from_hf_config({**config, "attention_head_dim": 96}, name="n").kv_channels == 96


def test_unknown_pattern_symbol_is_the_pattern_error() -> None:
    # parse_hybrid_pattern's SpecError, prefixed with the file
    bad = {**H8B, "hybrid_override_pattern": "M-M-X" + H8B["hybrid_override_pattern"][5:]}
    with pytest.raises(SpecError, match=r"config.json of 'x'.*unknown symbols 'X'.*M \(Mamba-2\)"):
        model_from_hf_config(bad, name="x")


def test_unexpressed_pattern_symbol_is_named() -> None:
    bad = {**H8B, "hybrid_override_pattern": "D" + H8B["hybrid_override_pattern"][1:]}
    with pytest.raises(SpecError, match="'D' \\(DeepSeek sparse-attention layers\\)"):
        model_from_hf_config(bad, name="x")


def test_pattern_length_must_match_the_layer_count() -> None:
    with pytest.raises(SpecError, match="51 symbols but num_layers is 52"):
        model_from_hf_config(
            {**H8B, "hybrid_override_pattern": H8B["hybrid_override_pattern"][:-1]}, name="x"
        )


def test_missing_pattern_names_both_keys() -> None:
    config = {k: v for k, v in H8B.items() if k != "hybrid_override_pattern"}
    with pytest.raises(SpecError, match="'hybrid_override_pattern' \\(or 'layers_block_type'\\)"):
        model_from_hf_config(config, name="x")


def test_expert_layers_need_the_expert_keys() -> None:
    config = {k: v for k, v in NANO.items() if k != "n_routed_experts"}
    with pytest.raises(SpecError, match="required key 'n_routed_experts' is missing"):
        model_from_hf_config(config, name="x")


@pytest.mark.parametrize(
    ("key", "value", "supported"),
    [
        ("mlp_hidden_act", "silu", "relu2"),
        ("mamba_proj_bias", True, "false"),
        ("use_conv_bias", False, "true"),
        ("num_nextn_predict_layers", 1, "0, or an mtp_hybrid_override_pattern"),
    ],
)
def test_unexpressed_values_are_refused_naming_the_key(
    key: str, value: Any, supported: str
) -> None:
    with pytest.raises(SpecError) as info:
        model_from_hf_config({**NANO, key: value}, name="x")
    message = str(info.value)
    assert f"key {key!r}" in message and f"supported: {supported}" in message


def test_moe_latent_size_is_read() -> None:
    # Nemotron 3 Super's config key (NemotronHConfig.moe_latent_size; Megatron-LM
    # TransformerConfig.moe_latent_size): the E layers' experts run on 1024-wide rows.
    model = model_from_hf_config({**NANO, "moe_latent_size": 1024}, name="x")
    assert model.moe_latent_size == 1024 and model.expert_hidden_size == 1024
    assert model_from_hf_config({**NANO, "moe_latent_size": None}, name="x").moe_latent_size is None


def test_moe_latent_size_without_expert_layers_is_refused() -> None:
    with pytest.raises(SpecError, match=r"moe_latent_size \(1024\).*num_experts is 0"):
        model_from_hf_config({**H8B, "moe_latent_size": 1024}, name="x")


def test_unnormalized_sigmoid_router_is_refused() -> None:
    with pytest.raises(SpecError, match="norm_topk_prob false is not supported"):
        model_from_hf_config({**NANO, "norm_topk_prob": False}, name="x")


def test_mtp_keys_map_as_megatron_bridge_maps_them() -> None:
    # NemotronHBridge.provider_bridge: num_nextn_predict_layers -> mtp_num_layers,
    # mtp_hybrid_override_pattern -> the depth's layers, mtp_use_repeated_layer defaulting
    # to True whenever there is a depth (Nemotron 3 Super's config: one "*E" depth)
    config = {**NANO, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"}
    model = model_from_hf_config(config, name="x")
    assert (model.mtp_num_layers, model.mtp_hybrid_pattern) == (1, "*E")
    assert model.mtp_repeated_layer
    separate = model_from_hf_config({**config, "mtp_use_repeated_layer": False}, name="x")
    assert not separate.mtp_repeated_layer
    plain = model_from_hf_config({**NANO, "num_nextn_predict_layers": 0}, name="x")
    assert (plain.mtp_num_layers, plain.mtp_hybrid_pattern, plain.mtp_repeated_layer) == (
        0,
        None,
        False,
    )
    with pytest.raises(SpecError, match="'mtp_hybrid_override_pattern' must be a string"):
        model_from_hf_config({**config, "mtp_hybrid_override_pattern": ["*", "E"]}, name="x")
