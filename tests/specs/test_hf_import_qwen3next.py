"""Tests of the Hugging Face import of ``qwen3_next`` (`specs.hf_qwen3next`), on the
hand-written fixture tests/specs/fixtures/hf/Qwen3-Next-80B-A3B/config.json (the keys
Megatron-Bridge v0.6.0's bridge test gives)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specs.errors import SpecError
from specs.hf_import import model_from_hf_config
from specs.presets import get_preset

FIXTURE = Path(__file__).parent / "fixtures" / "hf" / "Qwen3-Next-80B-A3B" / "config.json"


def config() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_import_is_the_preset_without_its_recipe_mtp_depth() -> None:
    spec = model_from_hf_config(config(), name="qwen3-next-80b-a3b")
    preset = get_preset("qwen3-next-80b-a3b")
    assert spec == preset.replace(mtp_num_layers=0, mtp_hybrid_pattern=None)


def test_layer_types_give_the_same_pattern_as_the_interval() -> None:
    # transformers >= 5.5 stores layer_types instead of full_attention_interval
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]
    newer = {k: v for k, v in config().items() if k != "full_attention_interval"}
    newer["layer_types"] = types
    assert model_from_hf_config(newer, name="a") == model_from_hf_config(config(), name="a")


def test_other_interval_places_attention_every_nth_layer() -> None:
    spec = model_from_hf_config({**config(), "full_attention_interval": 2}, name="a")
    assert (spec.hybrid_layer_pattern or "")[:8] == "GE*EGE*E"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mlp_only_layers": [3]}, r"mlp_only_layers \[3\]"),
        ({"decoder_sparse_step": 2}, "decoder_sparse_step 2"),
        ({"layer_types": ["sliding_attention"] * 48}, "key 'layer_types' must be a list"),
        ({"layer_types": ["full_attention"] * 4}, "has 4 entries but num_hidden_layers is 48"),
    ],
)
def test_unexpressed_layouts_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        model_from_hf_config({**config(), **changes}, name="a")


def test_router_follows_the_bridge() -> None:
    router = model_from_hf_config({**config(), "norm_topk_prob": False}, name="a").router
    assert router.moe_router_pre_softmax and router.moe_router_dtype == "fp32"
    assert router.moe_router_load_balancing_type == "global_aux_loss"
