"""The layer block field of a ModelSpec (specs.block_checks): its values, the models it is
refused on, its norm count, and the executor's and exports' refusals."""

from __future__ import annotations

import pytest

from specs import serde
from specs.block_checks import BLOCK_RULE, EXECUTOR_BLOCK_RULE, block_norms
from specs.errors import SpecError
from specs.executor_refusals import executor_model_refusal
from specs.model import ModelSpec
from specs.params import count_params
from specs.presets import get_preset

NEOX = get_preset("gpt-neox-20b")


def test_unknown_block_is_refused_with_the_choices():
    with pytest.raises(SpecError, match=r"layer_block must be one of 'sequential', 'parallel'"):
        NEOX.replace(layer_block="gptj")


def test_moe_layers_are_refused():
    with pytest.raises(SpecError) as info:
        get_preset("mixtral-8x7b").replace(layer_block="parallel")
    message = str(info.value)
    assert BLOCK_RULE in message
    assert "num_experts (8)" in message and "layer_block='sequential'" in message


def test_hybrid_patterns_are_refused():
    with pytest.raises(SpecError, match=BLOCK_RULE):
        get_preset("nemotron-h-8b").replace(layer_block="parallel_shared_norm")


def test_round_trips_through_json():
    spec = NEOX.replace(layer_block="parallel_shared_norm")
    assert serde.loads(ModelSpec, serde.dumps(spec)) == spec


def test_shared_norm_holds_one_norm_fewer_per_layer():
    # LayerNorm: weight and bias, 2·h per norm (GPT-J's single ln_1)
    assert block_norms("parallel_shared_norm") == 1
    assert block_norms("parallel") == block_norms("sequential") == 2
    two = count_params(NEOX).main_total
    one = count_params(NEOX.replace(layer_block="parallel_shared_norm")).main_total
    assert two - one == NEOX.num_layers * 2 * NEOX.hidden_size
    assert count_params(NEOX.replace(layer_block="sequential")).main_total == two


def test_neox_20b_preset_matches_the_published_size():
    # Black et al. 2022 (arXiv 2204.06745) Table 1: 20.55B parameters (untied embeddings)
    assert count_params(NEOX).main_total / 1e9 == pytest.approx(20.55, abs=0.01)


def test_executor_refuses_the_parallel_block():
    message = executor_model_refusal(NEOX)
    assert message is not None and EXECUTOR_BLOCK_RULE in message
    assert "--runtime megatron" in message
    assert executor_model_refusal(NEOX.replace(layer_block="sequential")) is None
