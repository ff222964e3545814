"""The `ModelSpec` builder of Hugging Face `model_type` ``qwen3_next``
(``Qwen3NextForCausalLM``, Qwen3-Next), registered in `specs.hf_families.FAMILIES`.

Keys, as ``Qwen3NextConfig`` names them and Megatron-Bridge's ``Qwen3NextBridge``
(tag v0.6.0, ``src/megatron/bridge/models/qwen/qwen3_next_bridge.py``) maps them: the
Llama-like decoder keys (`specs.hf_config.decoder_fields`, ``head_dim`` required),
``partial_rotary_factor`` (-> ``rotary_percent``), the layout of full and linear attention
as ``full_attention_interval`` (transformers < 5.5) or ``layer_types`` (a list of
``full_attention`` and ``linear_attention``; Bridge ``full_attention_interval_from_hf``),
the gated DeltaNet sizes ``linear_key_head_dim``, ``linear_value_head_dim``,
``linear_num_key_heads``, ``linear_num_value_heads`` and ``linear_conv_kernel_dim``, and the
MoE sizes ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size`` and
``shared_expert_intermediate_size``. The bridge fixes the rest: q/k norms, zero-centred norm
weights (``layernorm_zero_centered_gamma``), gated attention (``attention_output_gate``),
the shared expert's sigmoid gate, and the router
(global aux loss of ``router_aux_loss_coef``, fp32, pre-softmax unless ``norm_topk_prob``).

Each decoder layer is a token mixer and an MoE block, so the spec is a hybrid pattern of
two symbols per layer: ``G`` (gated DeltaNet) or ``*`` (full attention), then ``E``
(`specs.preset_hybrid`). ``intermediate_size`` sizes only the dense MLP of
``mlp_only_layers``, which the spec does not express: a non-empty ``mlp_only_layers`` or a
``decoder_sparse_step`` other than 1 is a `SpecError`; ``ffn_hidden_size`` is set to the
expert size. The config states no multi-token-prediction depth that the bridge reads
(Megatron-Bridge's recipes set ``mtp_num_layers``), so an imported spec has none.
"""

from __future__ import annotations

from specs.errors import SpecError
from specs.hf_config import HFConfig, decoder_fields, llama_biases
from specs.model import ModelSpec
from specs.router import RouterSpec

_LAYER_SYMBOLS = {"linear_attention": "G", "full_attention": "*"}
"""``layer_types`` names -> the hybrid symbol of the layer's token mixer."""


def _mixers(cfg: HFConfig, num_layers: int) -> str:
    """One mixer symbol per layer: ``layer_types`` when given, else layer i (from 0) full
    attention when (i + 1) % ``full_attention_interval`` == 0 (Qwen3NextConfig default 4)."""
    types = cfg.data.get("layer_types")
    if types is None:
        interval = cfg.optional("full_attention_interval", 4) or 4
        return "".join("*" if (i + 1) % interval == 0 else "G" for i in range(num_layers))
    if not isinstance(types, list) or any(t not in _LAYER_SYMBOLS for t in types):
        raise SpecError(
            f"{cfg.source}: key 'layer_types' must be a list of "
            f"{' and '.join(map(repr, _LAYER_SYMBOLS))}, got {types!r}"
        )
    if len(types) != num_layers:
        raise SpecError(
            f"{cfg.source}: key 'layer_types' has {len(types)} entries but "
            f"num_hidden_layers is {num_layers}: one entry per layer"
        )
    return "".join(_LAYER_SYMBOLS[t] for t in types)


def _refuse_dense_layers(cfg: HFConfig) -> None:
    """`SpecError` for dense-MLP layers (``mlp_only_layers``, ``decoder_sparse_step``)."""
    dense = cfg.int_list("mlp_only_layers")
    step = cfg.optional("decoder_sparse_step", 1)
    if dense or step != 1:
        raise SpecError(
            f"{cfg.source}: mlp_only_layers {dense} and decoder_sparse_step {step} make some "
            "layers dense, which this import does not express; write a paraplan ModelSpec "
            "JSON with a hybrid_layer_pattern that marks them - instead of E"
        )


def qwen3_next_router(cfg: HFConfig) -> RouterSpec:
    """Qwen3-Next's router as ``Qwen3NextBridge.provider_bridge`` sets it: the global aux
    loss, fp32, softmax, pre-softmax unless `norm_topk_prob` (Qwen3NextConfig default
    true), coefficient `router_aux_loss_coef` (default 0.001)."""
    return RouterSpec(
        moe_router_pre_softmax=not cfg.flag("norm_topk_prob", True),
        moe_router_load_balancing_type="global_aux_loss",
        moe_aux_loss_coeff=cfg.number("router_aux_loss_coef", 1e-3),
        moe_router_dtype="fp32",
    )


def qwen3_next(cfg: HFConfig, name: str) -> ModelSpec:
    """Qwen3-Next: a ``G``/``*`` mixer and an ``E`` block per layer (module docstring)."""
    _refuse_dense_layers(cfg)
    fields = decoder_fields(cfg, head_dim="required")
    layers = fields.pop("num_layers")
    pattern = "".join(symbol + "E" for symbol in _mixers(cfg, layers))
    expert = cfg.required("moe_intermediate_size")
    shared = cfg.optional("shared_expert_intermediate_size", 0) or 0
    return ModelSpec(
        name=name,
        **fields,
        num_layers=len(pattern),
        hybrid_layer_pattern=pattern,
        ffn_hidden_size=expert,
        rotary_percent=cfg.number("partial_rotary_factor", 0.25),
        qk_layernorm=True,
        layernorm_zero_centered_gamma=True,  # Qwen3NextBridge.provider_bridge sets it
        attention_output_gate=True,
        linear_key_head_dim=cfg.required("linear_key_head_dim"),
        linear_value_head_dim=cfg.required("linear_value_head_dim"),
        linear_num_key_heads=cfg.required("linear_num_key_heads"),
        linear_num_value_heads=cfg.required("linear_num_value_heads"),
        linear_conv_kernel_dim=cfg.optional("linear_conv_kernel_dim", 4) or 4,
        num_experts=cfg.required("num_experts"),
        moe_top_k=cfg.required("num_experts_per_tok"),
        moe_shared_expert_size=shared,
        moe_shared_expert_gate=shared > 0,
        router=qwen3_next_router(cfg),
        **llama_biases(cfg),
    )
