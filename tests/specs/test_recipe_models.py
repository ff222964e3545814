"""Presets of the published recipes' models (parameter totals against the published
figures) and the GPT-OSS import from a config written here from the public values."""

from __future__ import annotations

import json

import pytest

from specs.errors import SpecError
from specs.hf_import import load_hf_config
from specs.params import count_params
from specs.presets import get_preset

# (preset, published total, published active without the input embedding, relative tol)
PUBLISHED = [
    # gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B total, 5.13B active.
    ("gpt-oss-120b", 116.83e9, 5.13e9, 5e-4),
    # same table: 20.91B total, 3.61B active.
    ("gpt-oss-20b", 20.91e9, 3.61e9, 5e-4),
]


@pytest.mark.parametrize(("name", "total", "active", "tol"), PUBLISHED)
def test_gpt_oss_totals_match_the_model_card(name, total, active, tol) -> None:
    model = get_preset(name)
    counts = count_params(model)
    assert counts.total == pytest.approx(total, rel=tol)
    # the card's active count includes the unembedding but not the input embedding
    assert counts.active - counts.embedding == pytest.approx(active, rel=2e-3)


def test_kimi_k2_matches_its_model_card() -> None:
    # moonshotai/Kimi-K2-Instruct model card: 1T total, 32B activated parameters.
    counts = count_params(get_preset("kimi-k2"))
    assert counts.total == pytest.approx(1.0e12, rel=0.03)
    assert counts.active == pytest.approx(32e9, rel=0.03)


def test_nemotron_4_15b_matches_the_paper() -> None:
    # Nemotron-4 15B (arXiv 2402.16819): 3.2B embedding, 12.5B non-embedding parameters.
    counts = count_params(get_preset("nemotron-4-15b"))
    embedding = counts.embedding + counts.output_layer
    assert embedding == pytest.approx(3.2e9, rel=0.02)
    assert counts.total - embedding == pytest.approx(12.5e9, rel=0.01)


def test_gpt_oss_window_pattern() -> None:
    model = get_preset("gpt-oss-120b")
    mask = model.window_layer_mask()
    assert mask[:4] == (True, False, True, False)
    assert sum(mask) == 18
    assert not any(get_preset("llama3-8b").window_layer_mask())


def _public_gpt_oss_20b(**changes) -> dict:
    # openai/gpt-oss-20b config.json values.
    config = {
        "model_type": "gpt_oss",
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "head_dim": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "sliding_window": 128,
        "attention_bias": True,
        "tie_word_embeddings": False,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
    }
    config.update(changes)
    return config


def test_gpt_oss_20b_config_imports_to_the_preset(tmp_path) -> None:
    path = tmp_path / "gpt-oss-20b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_public_gpt_oss_20b()))
    spec = load_hf_config(path)
    assert spec.sliding_window == 128 and spec.attention_sinks
    assert spec.replace(name="gpt-oss-20b") == get_preset("gpt-oss-20b")


def test_gpt_oss_all_full_layers_have_no_window(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_public_gpt_oss_20b(layer_types=["full_attention"] * 24)))
    spec = load_hf_config(path)
    assert spec.sliding_window is None
    assert not any(spec.window_layer_mask())


def test_gpt_oss_irregular_layer_types_are_refused(tmp_path) -> None:
    types = ["sliding_attention"] * 23 + ["full_attention"]
    types[3] = "full_attention"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_public_gpt_oss_20b(layer_types=types)))
    with pytest.raises(SpecError, match="layer_types"):
        load_hf_config(path)
