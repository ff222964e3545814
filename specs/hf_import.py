"""Import a Hugging Face `config.json` as a `ModelSpec`.

Supported `model_type`s: gpt2, gpt_neox, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe,
deepseek_v3, gpt_oss; one small function per family, dispatched by `_FAMILIES`. Each reads the keys
that decide weight shapes the way that family's transformers code does:

- Sizes (layers, hidden, heads, intermediate sizes, vocabulary, positions, expert counts)
  are required; a missing one raises `SpecError` naming the key and the file.
- Structural switches take the family's transformers default when absent
  (`num_key_value_heads` = heads, `tie_word_embeddings` False except gpt2, no biases
  except gpt2 / gpt_neox and Qwen2's QKV bias).
- Values go through the same canonical form as `specs.presets`: `num_query_groups` None
  for plain MHA, `kv_channels` None when head_dim = hidden / heads, `moe_ffn_hidden_size`
  None when it equals `ffn_hidden_size`; so an imported published config equals its preset
  apart from the name.

GPT-OSS's sliding window and layer pattern are read (they change attention FLOPs); other
families' sliding windows are ignored. `rope_theta` (`rotary_base`) and Qwen3's per-head
q/k norms (`qk_layernorm`) are read for the export, and so is the MoE router
(`ModelSpec.router`), with the Megatron settings of Megatron-Bridge's bridge of the family
(`_deepseek_v3_router`, `_qwen3_moe_router`, `_mixtral_router`, `_GPT_OSS_ROUTER`); a router
value Megatron-core cannot run is a `SpecError` naming the key and the supported values.
Other things that change no weight shape are ignored: rotary fraction and scaling,
GPT-NeoX's parallel residual, DeepSeek's multi-token-prediction module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specs.errors import SpecError, did_you_mean
from specs.model import ModelSpec
from specs.router import RouterSpec
from specs.serde import read_json

HeadDimRule = Literal["optional", "required", "ignored"]


@dataclass(frozen=True, slots=True)
class _Config:
    """A parsed config.json with typed getters whose errors name the key and the file."""

    data: Mapping[str, Any]
    """The JSON object."""
    source: str
    """Where it came from (a path, or a description), for error messages."""

    def required(self, key: str) -> int:
        """A required integer."""
        value = self.optional(key)
        if value is None:
            raise SpecError(
                f"{self.source}: required key {key!r} is missing (or null); add it with the "
                "published value"
            )
        return value

    def optional(self, key: str, default: int | None = None) -> int | None:
        """An optional integer; absent or null gives ``default``."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.source}: key {key!r} must be an integer, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        """An optional number; absent or null gives ``default``."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{self.source}: key {key!r} must be a number, got {value!r}")
        return float(value)

    def choice(self, key: str, default: str, supported: tuple[str, ...]) -> str:
        """An optional string among ``supported``; absent or null gives ``default``."""
        value = self.data.get(key)
        if value is None:
            return default
        if value not in supported:
            raise SpecError(
                f"{self.source}: key {key!r} is {value!r}, which Megatron-core's router cannot "
                f"run as this family defines it; supported: {', '.join(supported)}"
            )
        return str(value)

    def flag(self, key: str, default: bool) -> bool:
        """An optional boolean; absent or null gives ``default``."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"{self.source}: key {key!r} must be true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        """An optional list of integers; absent or null gives an empty list."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in value
        ):
            raise SpecError(f"{self.source}: key {key!r} must be a list of integers, got {value!r}")
        return value


def _decoder(cfg: _Config, *, head_dim: HeadDimRule = "optional") -> dict[str, Any]:
    """ModelSpec fields shared by the Llama-like families (HF key names of LlamaConfig).

    ``head_dim`` says how the family treats the `head_dim` key: `optional` (default
    hidden / heads), `required`, or `ignored` (the family always uses hidden / heads)."""
    hidden = cfg.required("hidden_size")
    heads = cfg.required("num_attention_heads")
    groups = cfg.optional("num_key_value_heads", heads)
    if head_dim == "ignored":
        dim = None
    elif head_dim == "required":
        dim = cfg.required("head_dim")
    else:
        dim = cfg.optional("head_dim")
    if dim is not None and hidden % heads == 0 and dim == hidden // heads:
        dim = None
    return {
        "num_layers": cfg.required("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": None if groups == heads else groups,
        "kv_channels": dim,
        "vocab_size": cfg.required("vocab_size"),
        "max_position_embeddings": cfg.required("max_position_embeddings"),
        "tied_embeddings": cfg.flag("tie_word_embeddings", False),
        "rotary_base": cfg.optional("rope_theta", 10000),
    }


def _llama_biases(cfg: _Config) -> dict[str, bool]:
    """LlamaConfig's `attention_bias` (q, k, v, o) and `mlp_bias`. ModelSpec has biases on
    every linear or on QKV only, so attention-only biases map to the QKV flag (the h-sized
    output-projection bias is the only weight lost)."""
    attention = cfg.flag("attention_bias", False)
    mlp = cfg.flag("mlp_bias", False)
    return {"add_bias_linear": attention and mlp, "add_qkv_bias": attention and not mlp}


# ---- routers: the Megatron settings of Megatron-Bridge's bridges (NVIDIA-NeMo/Megatron-Bridge
# 067f987d, src/megatron/bridge/models/), the model facts from config.json ----------------


def _mixtral_router(cfg: _Config) -> RouterSpec:
    """Mixtral: softmax over all experts, top-k, renormalized (MixtralSparseMoeBlock), which
    is Megatron's default softmax over the top-k logits; the aux loss with
    `router_aux_loss_coef` (MixtralConfig default 0.001), as Bridge's CONFIG_MAPPING maps it."""
    return RouterSpec(
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=cfg.number("router_aux_loss_coef", 1e-3),
    )


def _qwen3_moe_router(cfg: _Config) -> RouterSpec:
    """Qwen3-MoE (qwen3_moe_bridge.py): softmax, pre-softmax unless `norm_topk_prob`
    (Qwen3MoeConfig default false: the top-k of a softmax over all experts, not
    renormalized), the aux loss with `router_aux_loss_coef` (default 0.001)."""
    return RouterSpec(
        moe_router_pre_softmax=not cfg.flag("norm_topk_prob", False),
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=cfg.number("router_aux_loss_coef", 1e-3),
    )


_GPT_OSS_ROUTER = RouterSpec(moe_router_load_balancing_type="none")
"""GPT-OSS (gpt_oss_bridge.py): softmax over the top-k logits, no load balancing, so
`router_aux_loss_coef` is unused."""


def _deepseek_v3_router(cfg: _Config) -> RouterSpec:
    """DeepSeek-V3 (deepseek_v3_bridge.py): sigmoid scores (`scoring_func`) with the
    expert bias of `topk_method` noaux_tc, `n_group` groups of which `topk_group` per token,
    weights scaled by `routed_scaling_factor`, the sequence-wise aux loss (`seq_aux`, else
    the micro-batch one) of coefficient `aux_loss_alpha` (Bridge's default 1e-4 when
    absent), fp32 router, pre-softmax. Absent keys take DeepseekV3Config's defaults.
    Megatron's sigmoid router always renormalizes the top-k scores, so `norm_topk_prob`
    false is refused."""
    if not cfg.flag("norm_topk_prob", True):
        raise SpecError(
            f"{cfg.source}: norm_topk_prob false is not supported: Megatron-core's sigmoid "
            "router always normalizes the top-k scores to sum 1 (moe_utils.py "
            "topk_routing_with_score_function); write a paraplan ModelSpec JSON if that "
            "difference is acceptable"
        )
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


def _gpt2(cfg: _Config, name: str) -> ModelSpec:
    """GPT-2: GELU MLP of `n_inner` (null means 4h), LayerNorm, learned positions, tied
    embeddings (GPT2Config's default), biases everywhere."""
    hidden = cfg.required("n_embd")
    return ModelSpec(
        name=name,
        num_layers=cfg.required("n_layer"),
        hidden_size=hidden,
        num_attention_heads=cfg.required("n_head"),
        ffn_hidden_size=cfg.optional("n_inner") or 4 * hidden,
        vocab_size=cfg.required("vocab_size"),
        activation="gelu",
        normalization="layernorm",
        position_embedding="learned",
        max_position_embeddings=cfg.required("n_positions"),
        tied_embeddings=cfg.flag("tie_word_embeddings", True),
        add_bias_linear=True,
    )


def _gpt_neox(cfg: _Config, name: str) -> ModelSpec:
    """GPT-NeoX / Pythia: GELU MLP, LayerNorm, (partial) rotary positions, untied
    embeddings by default, biases on the MLP always and on attention unless
    `attention_bias` is false (kept as all-linear biases: the difference is a few vectors).
    The parallel residual changes no weight shape."""
    fields = _decoder(cfg, head_dim="ignored")
    return ModelSpec(
        name=name,
        **fields,
        ffn_hidden_size=cfg.required("intermediate_size"),
        activation="gelu",
        normalization="layernorm",
        position_embedding="rope",
        add_bias_linear=True,
    )


def _llama(cfg: _Config, name: str) -> ModelSpec:
    """Llama (and Mistral, which only adds a sliding window): SwiGLU, RMSNorm, RoPE, GQA,
    optional `head_dim`, untied embeddings by default."""
    return ModelSpec(
        name=name,
        **_decoder(cfg),
        ffn_hidden_size=cfg.required("intermediate_size"),
        **_llama_biases(cfg),
    )


def _qwen2(cfg: _Config, name: str) -> ModelSpec:
    """Qwen2: Llama-style with biases on q, k and v (always, in Qwen2Attention); small
    checkpoints set `tie_word_embeddings` true."""
    return ModelSpec(
        name=name,
        **_decoder(cfg, head_dim="ignored"),
        ffn_hidden_size=cfg.required("intermediate_size"),
        add_qkv_bias=True,
    )


def _qwen3(cfg: _Config, name: str) -> ModelSpec:
    """Qwen3: Llama-style with an explicit `head_dim` (required: the transformers default
    has changed between releases, and published configs always state it) and an RMSNorm
    on each head's query and key (Qwen3Attention's q_norm/k_norm, always present)."""
    return ModelSpec(
        name=name,
        **_decoder(cfg, head_dim="required"),
        ffn_hidden_size=cfg.required("intermediate_size"),
        qk_layernorm=True,
        **_llama_biases(cfg),
    )


def _mixtral(cfg: _Config, name: str) -> ModelSpec:
    """Mixtral: every layer is MoE with `num_local_experts` SwiGLU experts of
    `intermediate_size`, top-`num_experts_per_tok` routing, no shared expert."""
    return ModelSpec(
        name=name,
        **_decoder(cfg),
        ffn_hidden_size=cfg.required("intermediate_size"),
        num_experts=cfg.required("num_local_experts"),
        moe_top_k=cfg.required("num_experts_per_tok"),
        router=_mixtral_router(cfg),
    )


def _qwen3_moe_layout(cfg: _Config, num_layers: int) -> tuple[int, int]:
    """(moe_first_dense_layers, moe_layer_freq) for Qwen3-MoE's layer pattern.

    transformers makes layer i sparse when i is not in `mlp_only_layers` and
    (i + 1) % decoder_sparse_step == 0: with step k that is layers k-1, 2k-1, ..., i.e.
    k-1 leading dense layers then every k-th. `mlp_only_layers` must then be a leading
    prefix (layers 0..n-1) with step 1."""
    step = cfg.optional("decoder_sparse_step", 1) or 1
    dense_only = sorted(set(cfg.int_list("mlp_only_layers")))
    if not dense_only:
        return min(step - 1, num_layers), step
    if step == 1 and dense_only == list(range(len(dense_only))):
        return len(dense_only), 1
    raise SpecError(
        f"{cfg.source}: mlp_only_layers {dense_only} with decoder_sparse_step {step} is not "
        "a leading run of dense layers followed by every k-th layer MoE, which is all "
        "ModelSpec (moe_first_dense_layers, moe_layer_freq) can express; write a paraplan "
        "ModelSpec JSON with the closest pattern"
    )


def _qwen3_moe(cfg: _Config, name: str) -> ModelSpec:
    """Qwen3-MoE: Qwen3 attention (explicit head_dim) with `num_experts` routed SwiGLU
    experts of `moe_intermediate_size`, no shared expert."""
    fields = _decoder(cfg, head_dim="required")
    ffn = cfg.required("intermediate_size")
    expert_ffn = cfg.required("moe_intermediate_size")
    first_dense, freq = _qwen3_moe_layout(cfg, fields["num_layers"])
    return ModelSpec(
        name=name,
        **fields,
        ffn_hidden_size=ffn,
        num_experts=cfg.required("num_experts"),
        moe_top_k=cfg.required("num_experts_per_tok"),
        moe_ffn_hidden_size=None if expert_ffn == ffn else expert_ffn,
        moe_first_dense_layers=first_dense,
        moe_layer_freq=freq,
        router=_qwen3_moe_router(cfg),
        qk_layernorm=True,
        **_llama_biases(cfg),
    )


def _deepseek_v3(cfg: _Config, name: str) -> ModelSpec:
    """DeepSeek-V3: multi-latent attention, `n_routed_experts` experts of
    `moe_intermediate_size` plus `n_shared_experts` shared ones of the same size, dense
    layers of `intermediate_size` before `first_k_dense_replace`, and
    `num_nextn_predict_layers` multi-token-prediction layers.

    transformers makes layer i MoE when i >= first_k_dense_replace and
    i % moe_layer_freq == 0; the first such layer is first_k rounded up to a multiple of
    the frequency, which is ModelSpec's moe_first_dense_layers."""
    fields = _decoder(cfg, head_dim="ignored")
    layers = fields["num_layers"]
    freq = cfg.optional("moe_layer_freq", 1) or 0
    if freq < 1:
        raise SpecError(f"{cfg.source}: moe_layer_freq must be >= 1, got {freq}")
    first_k = cfg.optional("first_k_dense_replace", 3) or 0
    ffn = cfg.required("intermediate_size")
    expert_ffn = cfg.required("moe_intermediate_size")
    # An absent key takes DeepseekV3Config's default (1); an explicit null means none.
    shared = cfg.optional("n_shared_experts", 0 if "n_shared_experts" in cfg.data else 1)
    return ModelSpec(
        name=name,
        **fields,
        ffn_hidden_size=ffn,
        num_experts=cfg.required("n_routed_experts"),
        moe_top_k=cfg.required("num_experts_per_tok"),
        moe_ffn_hidden_size=None if expert_ffn == ffn else expert_ffn,
        moe_shared_expert_size=(shared or 0) * expert_ffn,
        moe_layer_freq=freq,
        moe_first_dense_layers=min(math.ceil(first_k / freq) * freq, layers),
        mtp_num_layers=cfg.optional("num_nextn_predict_layers", 0) or 0,
        router=_deepseek_v3_router(cfg),
        q_lora_rank=cfg.optional("q_lora_rank"),
        kv_lora_rank=cfg.required("kv_lora_rank"),
        qk_head_dim=cfg.required("qk_nope_head_dim"),
        qk_pos_emb_head_dim=cfg.required("qk_rope_head_dim"),
        v_head_dim=cfg.required("v_head_dim"),
    )


def _window_every(cfg: _Config, num_layers: int) -> int | None:
    """`sliding_window_every` for GPT-OSS's `layer_types`: k when layer i is
    `full_attention` exactly for i % k == k - 1 and `sliding_attention` otherwise; None when
    every layer is full. transformers' default (absent key) alternates, sliding first."""
    types = cfg.data.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    if not isinstance(types, list) or len(types) != num_layers:
        raise SpecError(f"{cfg.source}: layer_types must list one type per layer ({num_layers})")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if len(full) == num_layers:
        return None
    every = full[0] + 1 if full else num_layers + 1
    expected = [
        "full_attention" if i % every == every - 1 else "sliding_attention"
        for i in range(num_layers)
    ]
    if types != expected:
        raise SpecError(
            f"{cfg.source}: layer_types is not a repeating run of sliding layers ending in one "
            "full layer, which is all ModelSpec (sliding_window_every) can express; write a "
            "paraplan ModelSpec JSON with the closest pattern"
        )
    return every


def _gpt_oss(cfg: _Config, name: str) -> ModelSpec:
    """GPT-OSS: every layer MoE with `num_local_experts` SwiGLU experts of
    `intermediate_size` (biased, as are q/k/v/o under `attention_bias`), top-
    `num_experts_per_tok` routing (`_GPT_OSS_ROUTER`), one sink logit per head, and
    `sliding_window` on the `sliding_attention` layers of `layer_types`. The router's bias
    (one per expert and layer) has no ModelSpec field and is left out."""
    fields = _decoder(cfg, head_dim="required")
    every = _window_every(cfg, fields["num_layers"])
    window = cfg.required("sliding_window") if every is not None else None
    return ModelSpec(
        name=name,
        **fields,
        ffn_hidden_size=cfg.required("intermediate_size"),
        num_experts=cfg.required("num_local_experts"),
        moe_top_k=cfg.required("num_experts_per_tok"),
        add_bias_linear=cfg.flag("attention_bias", True),
        attention_sinks=True,
        router=_GPT_OSS_ROUTER,
        sliding_window=window,
        sliding_window_every=every or 2,
    )


_FAMILIES: dict[str, Callable[[_Config, str], ModelSpec]] = {
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "llama": _llama,
    "mistral": _llama,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}


def supported_model_types() -> list[str]:
    """The `model_type` values this importer understands."""
    return list(_FAMILIES)


def model_from_hf_config(
    config: Mapping[str, Any], *, name: str, source: str | None = None
) -> ModelSpec:
    """Build a `ModelSpec` from a parsed Hugging Face config.json.

    ``source`` names the file in error messages (default: "config.json of <name>").
    """
    where = source or f"config.json of {name!r}"
    if not isinstance(config, Mapping):
        raise SpecError(f"{where}: expected a JSON object, got {type(config).__name__}")
    cfg = _Config(config, where)
    model_type = config.get("model_type")
    if model_type is None:
        raise SpecError(
            f"{where}: required key 'model_type' is missing; supported: {', '.join(_FAMILIES)}"
        )
    family = _FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        hint = did_you_mean(model_type, _FAMILIES) if isinstance(model_type, str) else ""
        raise SpecError(
            f"{where}: model_type {model_type!r} is not supported{hint}; supported: "
            f"{', '.join(_FAMILIES)}; for another architecture write a paraplan ModelSpec "
            "JSON instead"
        )
    try:
        return family(cfg, name)
    except SpecError as exc:
        if str(exc).startswith(where):
            raise
        # ModelSpec's own checks (e.g. heads not divisible by kv heads) name the spec,
        # not the file the values came from.
        raise SpecError(f"{where}: {exc}") from exc


def load_hf_config(path: str | Path, *, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face config.json; the name defaults to `default_model_name`."""
    p = Path(path)
    data = read_json(p)
    return model_from_hf_config(data, name=name or default_model_name(p, data), source=str(p))


def default_model_name(path: Path, config: Any) -> str:
    """A config file's model name, from the config itself: the last part of its
    ``_name_or_path`` (``meta-llama/Meta-Llama-3-8B`` -> ``Meta-Llama-3-8B``, as
    `save_pretrained` records it), else the file's stem unless it is the generic ``config``,
    else its ``model_type``. The folder holding the file is never used: it is often a
    checkout or download directory, not the model."""
    if isinstance(config, Mapping):
        recorded = str(config.get("_name_or_path") or "").strip().rstrip("/")
        if recorded:
            return recorded.rsplit("/", 1)[-1]
    if path.stem != "config" or not isinstance(config, Mapping) or "model_type" not in config:
        return path.stem
    return str(config["model_type"])
