"""The torchtitan model of a `ModelSpec`: its name and flavor in torchtitan's registry
(`torchtitan_model`), the router a new flavor needs (`torchtitan_router_note`), and the
refusals of what torchtitan has no model of. `planner.export_torchtitan` writes them into
the job config.

The MoE router is part of the flavor, not of the TOML: torchtitan's deepseek_v3 671B flavor
routes as the deepseek-v3 preset (sigmoid, route_norm, route_scale 2.5, 8 expert groups of
which 4, expert bias); for a new flavor the header lists the router it needs
(`torchtitan_router_note`). torchtitan has no Mamba-2 layer and no latent MoE projections:
a hybrid model (`TORCHTITAN_HYBRID_RULE`) and a latent MoE model
(`TORCHTITAN_LATENT_MOE_RULE`) are refused.
"""

from __future__ import annotations

from specs.block_checks import export_block_refusal
from specs.errors import SpecError
from specs.model import ModelSpec

_TORCHTITAN_FLAVORS = {
    "llama3-8b": ("llama3", "8B"),
    "llama3-70b": ("llama3", "70B"),
    "llama3.1-405b": ("llama3", "405B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "gpt-oss-20b": ("gpt_oss", "20b"),
    "gpt-oss-120b": ("gpt_oss", "120b"),
}
"""Presets with a torchtitan model of the same architecture and size: (model name, flavor)
of torchtitan's model registry (``torchtitan/models/<name>/__init__.py``: llama3 8B/70B/
405B, deepseek_v3 671B, qwen3 30B-A3B/235B-A22B, gpt_oss 20b/120b)."""


TORCHTITAN_HYBRID_RULE = "torchtitan_hybrid"
"""Rule id of the torchtitan export's refusal of a hybrid model (`torchtitan_model`)."""


TORCHTITAN_GATE_RULE = "torchtitan_output_gate"
"""Rule id of the torchtitan export's refusal of an output gate (`torchtitan_model`)."""


TORCHTITAN_DSA_RULE = "torchtitan_dsa"
"""Rule id of the torchtitan export's refusal of DeepSeek sparse attention (`torchtitan_model`)."""


TORCHTITAN_LATENT_MOE_RULE = "torchtitan_latent_moe"
"""Rule id of the torchtitan export's refusal of a latent MoE model (`torchtitan_model`)."""


def torchtitan_model(model: ModelSpec) -> tuple[str, str, bool]:
    """(torchtitan model name, flavor, known) for ``model``.

    A preset of `_TORCHTITAN_FLAVORS` maps to its flavor (known). Otherwise the torchtitan
    family of the same architecture is named with the preset's name as flavor (not known:
    the user adds that flavor): multi-latent attention is deepseek_v3, attention sinks
    gpt_oss; a pre-norm SwiGLU/RMSNorm/RoPE decoder without biases or sliding windows is
    qwen3 with per-head q/k RMSNorm (``qk_norm=True`` in every flavor of torchtitan's
    ``qwen3_configs``, dense 0.6B-32B and MoE 30B-A3B/235B-A22B) and llama3 without it,
    dense only (llama3's attention has no q/k norm and its block no experts).
    Raises `SpecError` for an architecture torchtitan has no model of (e.g. a Mixtral-style
    MoE without qk-norm, GELU or biased layers), for a hybrid model (`TORCHTITAN_HYBRID_RULE`)
    for a latent MoE model (`TORCHTITAN_LATENT_MOE_RULE`) and for gated attention or a gated
    shared expert (`TORCHTITAN_GATE_RULE`), for DeepSeek sparse attention
    (`TORCHTITAN_DSA_RULE`) and for a parallel attention+MLP block
    (`specs.block_checks.export_block_refusal`).
    """
    block = export_block_refusal(model, "torchtitan")
    if block is not None:
        raise SpecError(block)
    if model.is_hybrid:
        raise SpecError(
            f"[{TORCHTITAN_HYBRID_RULE}] {model.name!r} is a hybrid model (hybrid_layer_pattern "
            f"{model.hybrid_layer_pattern!r}): torchtitan's registry (llama3, deepseek_v3, "
            "qwen3, gpt_oss) has no Mamba-2 or gated DeltaNet layer: export --to megatron "
            "(pretrain_hybrid.py)"
        )
    if model.attention_output_gate or model.moe_shared_expert_gate:
        raise SpecError(
            f"[{TORCHTITAN_GATE_RULE}] {model.name!r} sets attention_output_gate "
            f"({model.attention_output_gate}) or moe_shared_expert_gate "
            f"({model.moe_shared_expert_gate}): torchtitan's attention and MoE (llama3, "
            "deepseek_v3, qwen3, gpt_oss) have no sigmoid output gate: export --to megatron"
        )
    if model.uses_dsa:
        raise SpecError(
            f"[{TORCHTITAN_DSA_RULE}] {model.name!r} uses DeepSeek sparse attention "
            f"(dsa_indexer_topk {model.dsa_indexer_topk}): torchtitan's deepseek_v3 model runs "
            "dense multi-latent attention, no lightning indexer or top-k: export --to megatron "
            "(--experimental-attention-variant dsa)"
        )
    if model.moe_latent_size is not None:
        raise SpecError(
            f"[{TORCHTITAN_LATENT_MOE_RULE}] {model.name!r} is a latent MoE model "
            f"(moe_latent_size {model.moe_latent_size}): torchtitan's MoE (deepseek_v3, qwen3, "
            "gpt_oss) has no h -> latent -> h expert projections: export --to megatron "
            "(--moe-latent-size)"
        )
    if model.name in _TORCHTITAN_FLAVORS:
        return (*_TORCHTITAN_FLAVORS[model.name], True)
    if model.kv_lora_rank is not None:
        return "deepseek_v3", model.name, False
    if model.attention_sinks:
        return "gpt_oss", model.name, False
    llama_like = (
        model.activation == "swiglu"
        and model.normalization == "rmsnorm"
        and model.position_embedding == "rope"
        and not model.add_bias_linear
        and not model.add_qkv_bias
        and model.sliding_window is None
    )
    if llama_like and model.qk_layernorm:
        return "qwen3", model.name, False
    if llama_like and not model.is_moe:
        return "llama3", model.name, False
    raise SpecError(
        f"[torchtitan_model] torchtitan has no model with the architecture of "
        f"{model.name!r} (activation {model.activation}, num_experts {model.num_experts}, "
        f"add_bias_linear {model.add_bias_linear}); its registry holds llama3, deepseek_v3, "
        "qwen3 and gpt_oss: export --to megatron, or add the model to torchtitan"
    )


def torchtitan_router_note(model: ModelSpec) -> str | None:
    """The router settings a new torchtitan flavor of ``model`` needs, or None for a dense
    model. torchtitan's TOML names a flavor and cannot set the router; its router
    (``TokenChoiceTopKRouter`` of torchtitan/models/moe/moe.py, ``MoEArgs``) takes
    score_func (softmax over all experts, or sigmoid), route_norm (renormalize the top-k
    scores), route_scale, num_expert_groups / num_limited_groups and load_balance_coeff
    (the expert-bias update rate; None turns the bias off). Megatron's softmax over the
    top-k logits is torchtitan's softmax with route_norm; its sigmoid always renormalizes.
    `SpecError` for the score functions and balancing torchtitan's router has no form of."""
    if not model.is_moe:
        return None
    r = model.router
    if r.moe_router_score_function == "sqrtsoftplus" or r.moe_router_load_balancing_type in (
        "sinkhorn",
    ):
        raise SpecError(
            f"[torchtitan_router] torchtitan's router has no form of "
            f"moe_router_score_function {r.moe_router_score_function!r} with "
            f"moe_router_load_balancing_type {r.moe_router_load_balancing_type!r} (its "
            "score_func is softmax or sigmoid, its balancing the expert bias): export --to "
            "megatron"
        )
    norm = r.moe_router_score_function == "sigmoid" or not r.moe_router_pre_softmax
    bias = r.moe_router_bias_update_rate if r.moe_router_enable_expert_bias else None
    return (
        f"router of the flavor (MoEArgs): score_func={r.moe_router_score_function!r}, "
        f"route_norm={norm}, route_scale={r.moe_router_topk_scaling_factor or 1.0}, "
        f"num_expert_groups={r.moe_router_num_groups}, "
        f"num_limited_groups={r.moe_router_group_topk}, load_balance_coeff={bias}; the "
        f"auxiliary loss ({r.moe_router_load_balancing_type}, coefficient "
        f"{r.moe_aux_loss_coeff:g}) is the trainer's to add"
    )
