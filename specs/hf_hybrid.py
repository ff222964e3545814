"""The `ModelSpec` builder of Hugging Face `model_type` ``nemotron_h`` (Nemotron-H,
Nemotron Nano 2, Nemotron 3 Nano), registered in `specs.hf_families.FAMILIES`.

Keys, as ``NemotronHConfig`` names them and Megatron-Bridge's ``NemotronHBridge``
(tag v0.4.0, ``src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py``) maps them:
``hybrid_override_pattern`` (one symbol per layer, `specs.layer_kinds.HYBRID_SYMBOLS`;
newer configs give ``layers_block_type``, a list of ``mamba``, ``attention``, ``mlp``,
``moe``), ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``,
``conv_kernel``, the attention head dim as ``head_dim`` or ``attention_head_dim``, and for
``E`` layers ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
``moe_shared_expert_intermediate_size`` (the shared experts' total width, as the bridge
passes it to Megatron) and the router (`specs.hf_routers.nemotron_h_router`). A latent MoE
model's ``moe_latent_size`` (Nemotron 3 Super) is read for every family by
`specs.hf_import.model_from_hf_config`.

The MLP's ``mlp_hidden_act`` ``relu2`` (squared ReLU, non-gated: up and down projections)
is modelled as ``gelu``, the same two GEMMs (`specs.preset_hybrid`). There is no position
embedding (the bridge sets ``position_embedding_type`` "none"). What Megatron-core's hybrid
layers cannot run or `ModelSpec` does not express is a `SpecError` naming the key: a biased
Mamba projection (``mamba_proj_bias``; `MambaMixer` asserts ``not bias``), an unbiased
convolution (``use_conv_bias`` false; it asserts ``conv_bias``), another MLP activation,
and multi-token prediction without its pattern (``num_nextn_predict_layers`` without
``mtp_hybrid_override_pattern``, which the bridge refuses too). An unknown pattern symbol is
the `SpecError` of `specs.layer_kinds.parse_hybrid_pattern`.

Multi-token prediction (`mtp_fields`) as ``NemotronHBridge.provider_bridge`` maps it
(Megatron-Bridge ``_hf_mtp_config`` and ``provider_bridge``, the mirror's HEAD):
``num_nextn_predict_layers`` -> ``mtp_num_layers``, ``mtp_hybrid_override_pattern`` -> the
layers of one depth (`ModelSpec.mtp_hybrid_pattern`), and ``mtp_use_repeated_layer`` ->
``mtp_repeated_layer``, which the bridge sets True whenever there is a depth unless the
config says otherwise (``getattr(hf_config, "mtp_use_repeated_layer", True)``).
Nemotron 3 Super's config gives one depth of ``*E``; its Megatron-Bridge recipes then run
that one set of weights at two depths (``mtp_num_layers = 2``), a recipe setting that an
imported spec does not carry.
"""

from __future__ import annotations

from typing import Any

from specs.errors import SpecError
from specs.hf_config import HFConfig, llama_biases
from specs.hf_routers import nemotron_h_router
from specs.model import ModelSpec

_BLOCK_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""``layers_block_type`` names -> hybrid pattern symbols (NemotronHConfig)."""


def _pattern(cfg: HFConfig) -> str:
    """The hybrid pattern: ``hybrid_override_pattern``, else ``layers_block_type``."""
    pattern = cfg.data.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            raise SpecError(
                f"{cfg.source}: key 'hybrid_override_pattern' must be a string, got {pattern!r}"
            )
        return pattern
    blocks = cfg.data.get("layers_block_type")
    if blocks is None:
        raise SpecError(
            f"{cfg.source}: required key 'hybrid_override_pattern' (or 'layers_block_type') "
            "is missing; add the published layer pattern"
        )
    unknown = [b for b in blocks if b not in _BLOCK_SYMBOLS] if isinstance(blocks, list) else []
    if not isinstance(blocks, list) or unknown:
        raise SpecError(
            f"{cfg.source}: key 'layers_block_type' must list layer types among "
            f"{', '.join(_BLOCK_SYMBOLS)}, got {blocks!r}"
        )
    return "".join(_BLOCK_SYMBOLS[b] for b in blocks)


def _refuse_unexpressed(cfg: HFConfig) -> None:
    """`SpecError` for the keys whose value the hybrid layers cannot run or express."""
    data = cfg.data
    checks = (
        ("mlp_hidden_act", data.get("mlp_hidden_act", "relu2") != "relu2", "relu2 (squared ReLU)"),
        ("mamba_proj_bias", cfg.flag("mamba_proj_bias", False), "false"),
        ("use_conv_bias", not cfg.flag("use_conv_bias", True), "true"),
        (
            "num_nextn_predict_layers",
            bool(cfg.optional("num_nextn_predict_layers", 0))
            and not data.get("mtp_hybrid_override_pattern"),
            "0, or an mtp_hybrid_override_pattern with the MTP depth's layers",
        ),
    )
    for key, bad, supported in checks:
        if bad:
            raise SpecError(
                f"{cfg.source}: key {key!r} is {data[key]!r}, which paraplan's hybrid layers do "
                "not express (Megatron-core's MambaMixer and hybrid layer specs); supported: "
                f"{supported}; write a paraplan ModelSpec JSON with the closest model"
            )


def _experts(cfg: HFConfig, ffn: int) -> dict[str, Any]:
    """The `ModelSpec` fields of the ``E`` layers."""
    expert_ffn = cfg.required("moe_intermediate_size")
    return {
        "num_experts": cfg.required("n_routed_experts"),
        "moe_top_k": cfg.required("num_experts_per_tok"),
        "moe_ffn_hidden_size": None if expert_ffn == ffn else expert_ffn,
        "moe_shared_expert_size": cfg.optional("moe_shared_expert_intermediate_size", 0) or 0,
        "router": nemotron_h_router(cfg),
    }


def mtp_fields(cfg: HFConfig) -> dict[str, Any]:
    """The `ModelSpec` MTP fields of a ``nemotron_h`` config (module docstring): none
    without ``num_nextn_predict_layers``."""
    depths = cfg.optional("num_nextn_predict_layers", 0) or 0
    if not depths:
        return {}
    pattern = cfg.data["mtp_hybrid_override_pattern"]
    if not isinstance(pattern, str):
        raise SpecError(
            f"{cfg.source}: key 'mtp_hybrid_override_pattern' must be a string of layer "
            f"symbols, got {pattern!r}"
        )
    return {
        "mtp_num_layers": depths,
        "mtp_hybrid_pattern": pattern,
        "mtp_repeated_layer": cfg.flag("mtp_use_repeated_layer", True),
    }


def nemotron_h(cfg: HFConfig, name: str) -> ModelSpec:
    """Nemotron-H: one layer per symbol of the hybrid pattern (``M`` Mamba-2, ``*``
    attention, ``-`` squared-ReLU MLP, ``E`` routed experts), RMSNorm, no position
    embedding, untied embeddings unless `tie_word_embeddings` (module docstring)."""
    _refuse_unexpressed(cfg)
    pattern = _pattern(cfg)
    hidden = cfg.required("hidden_size")
    heads = cfg.required("num_attention_heads")
    groups = cfg.optional("num_key_value_heads", 8)  # NemotronHConfig's default
    head_dim = cfg.optional("head_dim") or cfg.optional("attention_head_dim", 128)
    head_dim = None if hidden % heads == 0 and head_dim == hidden // heads else head_dim
    mamba_head_dim = cfg.required("mamba_head_dim")
    mamba_heads = cfg.required("mamba_num_heads")
    ffn = cfg.required("intermediate_size")
    experts = _experts(cfg, ffn) if "E" in pattern else {}
    return ModelSpec(
        name=name,
        num_layers=cfg.required("num_hidden_layers"),
        hybrid_layer_pattern=pattern,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=None if groups == heads else groups,
        kv_channels=head_dim,
        ffn_hidden_size=ffn,
        vocab_size=cfg.required("vocab_size"),
        max_position_embeddings=cfg.required("max_position_embeddings"),
        tied_embeddings=cfg.flag("tie_word_embeddings", False),
        activation="gelu",
        normalization="rmsnorm",
        position_embedding="none",
        mamba_state_dim=cfg.required("ssm_state_size"),
        mamba_head_dim=mamba_head_dim,
        mamba_num_groups=cfg.required("n_groups"),
        mamba_num_heads=None if mamba_heads * mamba_head_dim == 2 * hidden else mamba_heads,
        mamba_conv_kernel=cfg.optional("conv_kernel", 4) or 4,
        **experts,
        **mtp_fields(cfg),
        **llama_biases(cfg),
    )
