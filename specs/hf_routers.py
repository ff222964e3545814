"""The MoE routers of imported Hugging Face configs (`specs.hf_import`), one per family.

Each sets `ModelSpec.router` with the Megatron settings of Megatron-Bridge's bridge of the
family (NVIDIA-NeMo/Megatron-Bridge 067f987d, src/megatron/bridge/models/) and the model
facts from config.json; an absent key takes the family's transformers default. A router
value Megatron-core cannot run is a `SpecError` naming the key and the supported values
(`HFConfig.choice`).
"""

from __future__ import annotations

from specs.errors import SpecError
from specs.hf_config import HFConfig
from specs.router import RouterSpec


def mixtral_router(cfg: HFConfig) -> RouterSpec:
    """Mixtral: softmax over all experts, top-k, renormalized (MixtralSparseMoeBlock), which
    is Megatron's default softmax over the top-k logits; the aux loss with
    `router_aux_loss_coef` (MixtralConfig default 0.001), as Bridge's CONFIG_MAPPING maps it."""
    return RouterSpec(
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=cfg.number("router_aux_loss_coef", 1e-3),
    )


def qwen3_moe_router(cfg: HFConfig) -> RouterSpec:
    """Qwen3-MoE (qwen3_moe_bridge.py): softmax, pre-softmax unless `norm_topk_prob`
    (Qwen3MoeConfig default false: the top-k of a softmax over all experts, not
    renormalized), the aux loss with `router_aux_loss_coef` (default 0.001)."""
    return RouterSpec(
        moe_router_pre_softmax=not cfg.flag("norm_topk_prob", False),
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=cfg.number("router_aux_loss_coef", 1e-3),
    )


GPT_OSS_ROUTER = RouterSpec(moe_router_load_balancing_type="none")
"""GPT-OSS (gpt_oss_bridge.py): softmax over the top-k logits, no load balancing, so
`router_aux_loss_coef` is unused."""


def deepseek_v3_router(cfg: HFConfig) -> RouterSpec:
    """DeepSeek-V3 (deepseek_v3_bridge.py): sigmoid scores (`scoring_func`) with the
    expert bias of `topk_method` noaux_tc, `n_group` groups of which `topk_group` per token,
    weights scaled by `routed_scaling_factor`, the sequence-wise aux loss (`seq_aux`, else
    the micro-batch one) of coefficient `aux_loss_alpha` (Bridge's default 1e-4 when
    absent), fp32 router, pre-softmax. Absent keys take DeepseekV3Config's defaults.
    Megatron's sigmoid router always renormalizes the top-k scores, so `norm_topk_prob`
    false is refused."""
    require_normalized_topk(cfg)
    cfg.choice("topk_method", "noaux_tc", ("noaux_tc",))
    cfg.choice("scoring_func", "sigmoid", ("sigmoid",))
    return RouterSpec(
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=True,
        moe_router_enable_expert_bias=True,
        moe_router_num_groups=cfg.optional("n_group", 8),
        moe_router_group_topk=cfg.optional("topk_group", 4),
        moe_router_topk_scaling_factor=cfg.number("routed_scaling_factor", 2.5),
        moe_router_load_balancing_type="seq_aux_loss" if cfg.flag("seq_aux", True) else "aux_loss",
        moe_aux_loss_coeff=cfg.number("aux_loss_alpha", 1e-4),
        moe_router_dtype="fp32",
    )


def nemotron_h_router(cfg: HFConfig) -> RouterSpec:
    """Nemotron-H's routed-expert (``E``) layers (Megatron-Bridge v0.4.0
    ``nemotronh/nemotron_h_bridge.py`` ``provider_bridge``): sigmoid scores with the expert
    bias, the sequence-wise aux loss of coefficient 1e-4 (set by the bridge whatever
    config.json says), fp32 router; `n_group`, `topk_group` and `routed_scaling_factor`
    from config.json (absent: none, as the bridge's CONFIG_MAPPING leaves them). Megatron's
    sigmoid router always renormalizes the top-k scores, so `norm_topk_prob` false is
    refused."""
    require_normalized_topk(cfg)
    given = cfg.data.get("routed_scaling_factor") is not None
    scale = cfg.number("routed_scaling_factor", 1.0) if given else None
    return RouterSpec(
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_num_groups=cfg.optional("n_group"),
        moe_router_group_topk=cfg.optional("topk_group"),
        moe_router_topk_scaling_factor=scale,
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=1e-4,
        moe_router_dtype="fp32",
    )


def require_normalized_topk(cfg: HFConfig) -> None:
    """`SpecError` for ``norm_topk_prob`` false: Megatron-core's sigmoid router always
    renormalizes the top-k scores (moe_utils.py ``topk_routing_with_score_function``)."""
    if not cfg.flag("norm_topk_prob", True):
        raise SpecError(
            f"{cfg.source}: norm_topk_prob false is not supported: Megatron-core's sigmoid "
            "router always normalizes the top-k scores to sum 1 (moe_utils.py "
            "topk_routing_with_score_function); write a paraplan ModelSpec JSON if that "
            "difference is acceptable"
        )
