"""The MoE router spec (specs.router): Megatron-core's defaults and rules, the presets'
routers as Megatron-Bridge's providers set them, the JSON round trip and the Hugging Face
import of the router keys."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from specs import serde
from specs.errors import SpecError
from specs.hf_import import model_from_hf_config
from specs.model import ModelSpec
from specs.presets import get_preset
from specs.router import RouterSpec

MEGATRON_DEFAULTS = {
    # megatron/core/transformer/transformer_config.py (Megatron-LM d98e8a64)
    "moe_router_score_function": "softmax",
    "moe_router_pre_softmax": False,
    "moe_router_enable_expert_bias": False,
    "moe_router_bias_update_rate": 1e-3,
    "moe_router_num_groups": None,
    "moe_router_group_topk": None,
    "moe_router_topk_scaling_factor": None,
    "moe_router_load_balancing_type": "aux_loss",
    "moe_aux_loss_coeff": 0.0,
    "moe_router_dtype": None,
}


def moe(**router: Any) -> ModelSpec:
    """tiny-moe (8 experts, top-2) with the given router fields."""
    return get_preset("tiny-moe").replace(router=RouterSpec(**router))


def test_defaults_are_megatron_cores() -> None:
    assert serde.to_dict(RouterSpec()) == MEGATRON_DEFAULTS


@pytest.mark.parametrize(
    ("name", "changed"),
    [
        (
            "deepseek-v3",
            {
                "moe_router_score_function": "sigmoid",
                "moe_router_pre_softmax": True,
                "moe_router_enable_expert_bias": True,
                "moe_router_num_groups": 8,
                "moe_router_group_topk": 4,
                "moe_router_topk_scaling_factor": 2.5,
                "moe_router_load_balancing_type": "seq_aux_loss",
                "moe_aux_loss_coeff": 1e-3,
                "moe_router_dtype": "fp32",
            },
        ),
        (
            "kimi-k2",
            {
                "moe_router_score_function": "sigmoid",
                "moe_router_pre_softmax": True,
                "moe_router_enable_expert_bias": True,
                "moe_router_num_groups": 1,
                "moe_router_group_topk": 1,
                "moe_router_topk_scaling_factor": 2.827,
                "moe_router_load_balancing_type": "seq_aux_loss",
                "moe_aux_loss_coeff": 1e-3,
                "moe_router_dtype": "fp32",
            },
        ),
        ("qwen3-30b-a3b", {"moe_aux_loss_coeff": 1e-3}),
        ("qwen3-235b-a22b", {"moe_aux_loss_coeff": 1e-3}),
        ("mixtral-8x7b", {"moe_aux_loss_coeff": 0.02}),
        ("mixtral-8x22b", {"moe_aux_loss_coeff": 1e-3}),
        ("gpt-oss-20b", {"moe_router_load_balancing_type": "none"}),
        ("gpt-oss-120b", {"moe_router_load_balancing_type": "none"}),
        ("tiny-moe", {}),
    ],
)
def test_preset_routers(name: str, changed: dict[str, Any]) -> None:
    router = serde.to_dict(get_preset(name).router)
    assert {k: v for k, v in router.items() if MEGATRON_DEFAULTS[k] != v} == changed


def test_router_round_trips_through_json() -> None:
    model = get_preset("deepseek-v3")
    assert serde.loads(ModelSpec, serde.dumps(model)) == model
    data = serde.to_dict(model)
    del data["router"]  # files written before the router field load with the default
    assert serde.from_dict(ModelSpec, data).router == RouterSpec()


def test_json_rejects_an_unknown_router_key_and_value() -> None:
    data = serde.to_dict(get_preset("tiny-moe"))
    data["router"]["moe_router_topk"] = 2
    with pytest.raises(SpecError, match="moe_router_topk"):
        serde.from_dict(ModelSpec, data)
    data = serde.to_dict(get_preset("tiny-moe"))
    data["router"]["moe_router_score_function"] = "relu"
    with pytest.raises(SpecError, match="'softmax', 'sigmoid', 'sqrtsoftplus'"):
        serde.from_dict(ModelSpec, data)


@pytest.mark.parametrize(
    ("router", "fragments"),
    [
        (
            {"moe_router_enable_expert_bias": True},
            ["moe_router_enable_expert_bias", "'softmax'", "sigmoid", "Megatron-core rule"],
        ),
        (
            {"moe_router_group_topk": 2},
            ["moe_router_group_topk (2)", "moe_router_num_groups (null)", "set"],
        ),
        (
            {"moe_router_num_groups": 2, "moe_router_group_topk": 4},
            ["moe_router_group_topk (4)", "moe_router_num_groups (2)", "<= 2"],
        ),
        ({"moe_aux_loss_coeff": -0.1}, ["moe_aux_loss_coeff", ">= 0", "-0.1"]),
        ({"moe_router_topk_scaling_factor": 0.0}, ["moe_router_topk_scaling_factor", "> 0"]),
        ({"moe_router_num_groups": 0}, ["moe_router_num_groups", "positive", "0"]),
        ({"moe_router_dtype": "bf16"}, ["moe_router_dtype", "'fp32', 'fp64'", "'bf16'"]),
    ],
)
def test_router_field_rules(router: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        RouterSpec(**router)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_model_rules_of_the_router() -> None:
    with pytest.raises(SpecError) as err:
        moe(moe_router_num_groups=3)
    assert "num_experts (8)" in str(err.value) and "moe_router_num_groups (3)" in str(err.value)
    assert "divisor of 8" in str(err.value)
    with pytest.raises(SpecError) as err:
        moe().replace(moe_top_k=1)
    assert "moe_top_k (1)" in str(err.value) and "moe_router_pre_softmax true" in str(err.value)
    assert moe(moe_router_pre_softmax=True).replace(moe_top_k=1).moe_top_k == 1
    with pytest.raises(SpecError) as err:
        moe(moe_router_load_balancing_type="sinkhorn").replace(moe_capacity_factor=1.0)
    assert "moe_capacity_factor (1.0)" in str(err.value) and "'sinkhorn'" in str(err.value)
    # a dense model keeps a router it does not use without a relation check
    dense = get_preset("tiny").replace(router=RouterSpec(moe_router_num_groups=3))
    assert not dense.is_moe


DEEPSEEK_LIKE = {
    "model_type": "deepseek_v3",
    "hidden_size": 1024,
    "num_attention_heads": 8,
    "num_hidden_layers": 4,
    "intermediate_size": 2048,
    "moe_intermediate_size": 256,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "n_routed_experts": 32,
    "num_experts_per_tok": 4,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 64,
    "q_lora_rank": 128,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "n_group": 4,
    "topk_group": 2,
    "routed_scaling_factor": 1.5,
    "norm_topk_prob": True,
    "seq_aux": True,
    "aux_loss_alpha": 0.0001,
}


def test_hf_import_of_a_deepseek_v3_like_router() -> None:
    router = model_from_hf_config(DEEPSEEK_LIKE, name="ds").router
    assert router == RouterSpec(
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=True,
        moe_router_enable_expert_bias=True,
        moe_router_num_groups=4,
        moe_router_group_topk=2,
        moe_router_topk_scaling_factor=1.5,
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=1e-4,
        moe_router_dtype="fp32",
    )
    no_seq = model_from_hf_config({**DEEPSEEK_LIKE, "seq_aux": False}, name="ds").router
    assert no_seq.moe_router_load_balancing_type == "aux_loss"


@pytest.mark.parametrize(
    ("key", "value", "fragments"),
    [
        ("scoring_func", "softmax", ["'scoring_func'", "'softmax'", "supported: sigmoid"]),
        ("topk_method", "greedy", ["'topk_method'", "'greedy'", "supported: noaux_tc"]),
        ("norm_topk_prob", False, ["norm_topk_prob false", "normalizes"]),
        ("n_group", 3, ["num_experts (32)", "moe_router_num_groups (3)"]),
    ],
)
def test_hf_import_refuses_routers_megatron_cannot_run(
    key: str, value: Any, fragments: list[str]
) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**DEEPSEEK_LIKE, key: value}, name="ds", source="ds.json")
    assert str(err.value).startswith("ds.json")
    for fragment in fragments:
        assert fragment in str(err.value)


QWEN3_MOE_LIKE = {
    "model_type": "qwen3_moe",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 4,
    "intermediate_size": 1024,
    "moe_intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "norm_topk_prob": True,
    "router_aux_loss_coef": 0.002,
}


def test_hf_import_of_a_qwen3_moe_like_router() -> None:
    router = model_from_hf_config(QWEN3_MOE_LIKE, name="q").router
    assert router == RouterSpec(moe_aux_loss_coeff=0.002)
    # without norm_topk_prob (Qwen3MoeConfig's default false) the top-k of a softmax over
    # all experts is used as is: Megatron's pre-softmax
    unnormalized = {k: v for k, v in QWEN3_MOE_LIKE.items() if k != "norm_topk_prob"}
    assert model_from_hf_config(unnormalized, name="q").router.moe_router_pre_softmax
    with pytest.raises(SpecError, match="'router_aux_loss_coef' must be a number"):
        model_from_hf_config({**QWEN3_MOE_LIKE, "router_aux_loss_coef": "high"}, name="q")


def test_router_fields_keep_megatron_core_names() -> None:
    names = [f.name for f in dataclasses.fields(RouterSpec)]
    assert all(n.startswith(("moe_router_", "moe_aux_loss_")) for n in names)
