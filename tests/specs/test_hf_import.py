"""Tests of the Hugging Face config.json import, on the published configs of each family
(tests/specs/fixtures/hf/<repository name>/config.json, copied from the Hub; the
nemotron_h one, Nemotron-H-8B-Base-8K, is hand-written from NemotronHConfig's keys and
Megatron-Bridge's provider values, as its ``_comment`` says; the qwen3_next one,
Qwen3-Next-80B-A3B, holds the keys Megatron-Bridge's bridge test gives, as its ``_comment``
says). The hybrid families' own tests are in test_hf_import_hybrid.py and
test_hf_import_qwen3next.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specs.errors import SpecError
from specs.hf_import import load_hf_config, model_from_hf_config, supported_model_types
from specs.model import ModelSpec
from specs.presets import get_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def fixture(folder: str) -> Path:
    return FIXTURES / folder / "config.json"


def fixture_dict(folder: str) -> dict[str, Any]:
    return json.loads(fixture(folder).read_text())


def write_config(tmp_path: Path, config: dict[str, Any], folder: str = "my-model") -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config))
    return path


# Expected specs of the fixtures that have no preset, from their published values.
EXPECTED = {
    "gpt2": ModelSpec(
        name="gpt2",
        num_layers=12,
        hidden_size=768,
        num_attention_heads=12,
        ffn_hidden_size=3072,  # n_inner absent: 4h
        vocab_size=50257,
        activation="gelu",
        normalization="layernorm",
        position_embedding="learned",
        max_position_embeddings=1024,
        tied_embeddings=True,
        add_bias_linear=True,
    ),
    "pythia-160m": ModelSpec(
        name="pythia-160m",
        num_layers=12,
        hidden_size=768,
        num_attention_heads=12,
        ffn_hidden_size=3072,
        vocab_size=50304,
        activation="gelu",
        normalization="layernorm",
        position_embedding="rope",
        max_position_embeddings=2048,
        tied_embeddings=False,
        add_bias_linear=True,
        layer_block="parallel",  # config.json "use_parallel_residual": true
        rotary_percent=0.25,  # config.json "rotary_pct": 0.25
    ),
    "Mistral-7B-v0.1": ModelSpec(
        name="Mistral-7B-v0.1",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=32000,
        max_position_embeddings=32768,
    ),
    "Qwen2-7B-Instruct": ModelSpec(
        name="Qwen2-7B-Instruct",
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_query_groups=4,
        ffn_hidden_size=18944,
        vocab_size=152064,
        max_position_embeddings=32768,
        add_qkv_bias=True,
        rotary_base=1000000,
    ),
    "Qwen3-8B": ModelSpec(
        name="Qwen3-8B",
        num_layers=36,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=12288,
        vocab_size=151936,
        max_position_embeddings=40960,
        rotary_base=1000000,
        qk_layernorm=True,
    ),
    # The preset without its multi-token-prediction depth: the config states none that
    # Megatron-Bridge reads (its recipe sets mtp_num_layers = 1, specs.preset_hybrid).
    "Qwen3-Next-80B-A3B": get_preset("qwen3-next-80b-a3b").replace(
        name="Qwen3-Next-80B-A3B", mtp_num_layers=0, mtp_hybrid_pattern=None
    ),
}

# Fixtures of published models that are also presets.
MATCHING_PRESET = {
    "Meta-Llama-3-8B": "llama3-8b",
    "Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "DeepSeek-V3": "deepseek-v3",
    # keys of GLM-5's config.json (the dimensions whose counts equal Megatron-Bridge's
    # verification cards, specs.preset_dsa); GLM-5.1 shares them
    "GLM-5.1": "glm-5.1",
    "gpt-oss-120b": "gpt-oss-120b",
    "Nemotron-H-8B-Base-8K": "nemotron-h-8b",
}


def test_there_is_one_fixture_per_supported_family() -> None:
    types = {fixture_dict(p.parent.name)["model_type"] for p in FIXTURES.glob("*/config.json")}
    assert types == set(supported_model_types())
    assert set(EXPECTED) | set(MATCHING_PRESET) == {p.name for p in FIXTURES.iterdir()}


@pytest.mark.parametrize("folder", list(EXPECTED))
def test_fixture_imports_to_published_fields(folder: str) -> None:
    assert load_hf_config(fixture(folder), name=folder) == EXPECTED[folder]


@pytest.mark.parametrize(("folder", "preset"), list(MATCHING_PRESET.items()))
def test_imported_config_equals_preset_apart_from_name(folder: str, preset: str) -> None:
    spec = load_hf_config(fixture(folder))
    assert spec.name == fixture_dict(folder)["model_type"]  # Hub configs carry no own name
    assert spec.replace(name=preset) == get_preset(preset)


def test_name_comes_from_the_config_or_the_file_never_the_folder(tmp_path: Path) -> None:
    llama = fixture_dict("Meta-Llama-3-8B")
    # a config.json without its own name: its model_type, not the folder "downloads"
    assert load_hf_config(write_config(tmp_path / "downloads", llama)).name == "llama"
    # save_pretrained records the source repository in _name_or_path
    named = {**llama, "_name_or_path": "meta-llama/Meta-Llama-3-8B"}
    assert load_hf_config(write_config(tmp_path / "a", named)).name == "Meta-Llama-3-8B"
    # a file named after the model
    own = tmp_path / "my-llama.json"
    own.write_text(json.dumps(llama))
    assert load_hf_config(own).name == "my-llama"
    assert load_hf_config(fixture("Meta-Llama-3-8B"), name="l3").name == "l3"
    assert model_from_hf_config(fixture_dict("gpt2"), name="x").name == "x"


def test_unsupported_model_type_names_it_and_lists_supported(tmp_path: Path) -> None:
    path = write_config(tmp_path, {**fixture_dict("gpt2"), "model_type": "bert"})
    with pytest.raises(SpecError) as info:
        load_hf_config(path)
    message = str(info.value)
    assert "'bert'" in message and str(path) in message
    for model_type in supported_model_types():
        assert model_type in message


def test_close_model_type_is_suggested() -> None:
    with pytest.raises(SpecError, match="did you mean 'qwen3_moe'"):
        model_from_hf_config({**fixture_dict("Qwen3-30B-A3B"), "model_type": "qwen3moe"}, name="q")


def test_missing_model_type(tmp_path: Path) -> None:
    config = fixture_dict("gpt2")
    del config["model_type"]
    with pytest.raises(SpecError, match="'model_type' is missing"):
        load_hf_config(write_config(tmp_path, config))


@pytest.mark.parametrize(
    ("folder", "key"),
    [
        ("Meta-Llama-3-8B", "hidden_size"),
        ("gpt2", "n_layer"),
        ("Mixtral-8x7B-v0.1", "num_local_experts"),
        ("Qwen3-30B-A3B", "moe_intermediate_size"),
        ("Qwen3-8B", "head_dim"),
        ("DeepSeek-V3", "kv_lora_rank"),
        ("pythia-160m", "max_position_embeddings"),
    ],
)
def test_missing_required_key_names_key_and_file(tmp_path: Path, folder: str, key: str) -> None:
    config = fixture_dict(folder)
    del config[key]
    path = write_config(tmp_path, config)
    with pytest.raises(SpecError) as info:
        load_hf_config(path)
    assert repr(key) in str(info.value)
    assert str(path) in str(info.value)


def test_missing_key_without_a_file_names_the_model() -> None:
    config = fixture_dict("Meta-Llama-3-8B")
    del config["vocab_size"]
    with pytest.raises(SpecError, match=r"'vocab_size'.*missing") as info:
        model_from_hf_config(config, name="l3")
    assert "'l3'" in str(info.value)


def test_wrong_value_types_are_rejected() -> None:
    llama = fixture_dict("Meta-Llama-3-8B")
    with pytest.raises(SpecError, match="'hidden_size' must be an integer"):
        model_from_hf_config({**llama, "hidden_size": "4096"}, name="x")
    with pytest.raises(SpecError, match="'tie_word_embeddings' must be true or false"):
        model_from_hf_config({**llama, "tie_word_embeddings": 1}, name="x")
    with pytest.raises(SpecError, match="expected a JSON object"):
        model_from_hf_config([llama], name="x")  # type: ignore[arg-type]


def test_model_spec_violations_name_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, {**fixture_dict("Meta-Llama-3-8B"), "num_key_value_heads": 5})
    with pytest.raises(SpecError, match="divisible by num_query_groups") as info:
        load_hf_config(path)
    assert str(info.value).startswith(str(path))


def test_gpt2_n_inner_and_family_defaults() -> None:
    gpt2 = fixture_dict("gpt2")
    assert model_from_hf_config({**gpt2, "n_inner": 1000}, name="g").ffn_hidden_size == 1000
    assert model_from_hf_config({**gpt2, "n_inner": None}, name="g").ffn_hidden_size == 3072
    untied = model_from_hf_config({**gpt2, "tie_word_embeddings": False}, name="g")
    assert not untied.tied_embeddings


def test_llama_without_kv_heads_is_mha_and_head_dim_is_canonical() -> None:
    llama = fixture_dict("Meta-Llama-3-8B")
    del llama["num_key_value_heads"]
    assert model_from_hf_config(llama, name="x").num_query_groups is None
    same = model_from_hf_config({**llama, "head_dim": 128}, name="x")
    assert same.kv_channels is None
    other = model_from_hf_config({**llama, "head_dim": 96}, name="x")
    assert other.kv_channels == 96 and other.head_dim == 96


def test_llama_biases() -> None:
    llama = fixture_dict("Meta-Llama-3-8B")
    attention_only = model_from_hf_config({**llama, "attention_bias": True}, name="x")
    assert attention_only.add_qkv_bias and not attention_only.add_bias_linear
    both = model_from_hf_config({**llama, "attention_bias": True, "mlp_bias": True}, name="x")
    assert both.add_bias_linear


def test_small_qwen2_ties_embeddings() -> None:
    # Qwen2-0.5B/1.5B publish tie_word_embeddings true; Qwen2's QKV bias is always present.
    spec = model_from_hf_config(
        {**fixture_dict("Qwen2-7B-Instruct"), "tie_word_embeddings": True}, name="q"
    )
    assert spec.tied_embeddings and spec.add_qkv_bias


def test_qwen3_moe_layer_patterns() -> None:
    qwen = fixture_dict("Qwen3-30B-A3B")
    leading = model_from_hf_config({**qwen, "mlp_only_layers": [1, 0]}, name="q")
    assert leading.moe_layer_mask()[:3] == (False, False, True)
    # transformers: sparse when (i + 1) % step == 0, i.e. layers 1, 3, 5, ...
    stepped = model_from_hf_config({**qwen, "decoder_sparse_step": 2}, name="q")
    assert stepped.moe_layer_mask() == tuple(i % 2 == 1 for i in range(48))
    with pytest.raises(SpecError, match="mlp_only_layers"):
        model_from_hf_config({**qwen, "mlp_only_layers": [0, 5]}, name="q")
    same_size = model_from_hf_config({**qwen, "moe_intermediate_size": 6144}, name="q")
    assert same_size.moe_ffn_hidden_size is None and same_size.expert_ffn_hidden_size == 6144


def test_deepseek_layer_pattern_shared_experts_and_q_lora() -> None:
    ds = fixture_dict("DeepSeek-V3")
    # transformers: MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0.
    spec = model_from_hf_config({**ds, "moe_layer_freq": 2}, name="d")
    assert spec.moe_layer_mask() == tuple(i >= 3 and i % 2 == 0 for i in range(61))
    two_shared = model_from_hf_config({**ds, "n_shared_experts": 2}, name="d")
    assert two_shared.moe_shared_expert_size == 2 * 2048
    no_shared = model_from_hf_config({**ds, "n_shared_experts": None}, name="d")
    assert no_shared.moe_shared_expert_size == 0
    absent = {k: v for k, v in ds.items() if k != "n_shared_experts"}
    assert model_from_hf_config(absent, name="d").moe_shared_expert_size == 2048
    lite = model_from_hf_config({**ds, "q_lora_rank": None}, name="d")
    assert lite.q_lora_rank is None and lite.uses_mla
    with pytest.raises(SpecError, match="moe_layer_freq must be >= 1"):
        model_from_hf_config({**ds, "moe_layer_freq": 0}, name="d")


def test_moe_latent_size_is_read_in_every_family() -> None:
    # Megatron-core's `moe_latent_size` key, as Nemotron 3 Super's config spells it
    qwen = fixture_dict("Qwen3-30B-A3B")
    assert model_from_hf_config({**qwen, "moe_latent_size": 512}, name="q").moe_latent_size == 512
    assert model_from_hf_config(qwen, name="q").moe_latent_size is None
    llama = fixture_dict("Meta-Llama-3-8B")
    with pytest.raises(SpecError, match=r"config.json of 'l'.*moe_latent_size \(512\)"):
        model_from_hf_config({**llama, "moe_latent_size": 512}, name="l")
