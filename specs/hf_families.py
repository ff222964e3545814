"""One `ModelSpec` builder per Hugging Face `model_type` (`specs.hf_import`), registered in
`FAMILIES`.

Each reads the keys that decide weight shapes the way that family's transformers code
does (`specs.hf_config` for the reader and the fields the Llama-like families share,
`specs.hf_routers` for the MoE routers). Layer patterns that `ModelSpec` cannot express
(Qwen3-MoE's `mlp_only_layers`, GPT-OSS's `layer_types`) are a `SpecError` naming the
key and suggesting a paraplan ModelSpec JSON. The hybrid ``nemotron_h`` builder is
`specs.hf_hybrid`'s, the hybrid ``qwen3_next`` builder `specs.hf_qwen3next`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from specs.errors import SpecError
from specs.hf_config import HFConfig, decoder_fields, llama_biases
from specs.hf_hybrid import nemotron_h
from specs.hf_qwen3next import qwen3_next
from specs.hf_routers import GPT_OSS_ROUTER, deepseek_v3_router, mixtral_router, qwen3_moe_router
from specs.model import ModelSpec


def _gpt2(cfg: HFConfig, name: str) -> ModelSpec:
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


def _gpt_neox(cfg: HFConfig, name: str) -> ModelSpec:
    """GPT-NeoX / Pythia: GELU MLP, LayerNorm, (partial) rotary positions, untied
    embeddings by default, biases on the MLP always and on attention unless
    `attention_bias` is false (kept as all-linear biases: the difference is a few vectors).
    `use_parallel_residual` (default true) is the parallel attention+MLP block with its two
    norms, ``input_layernorm`` and ``post_attention_layernorm`` of the layer input
    (``GPTNeoXLayer.forward``): ``layer_block="parallel"``. `rotary_pct` (GPTNeoXConfig
    default 0.25) is the rotary share."""
    fields = decoder_fields(cfg, head_dim="ignored")
    parallel = cfg.flag("use_parallel_residual", True)
    return ModelSpec(
        name=name,
        **fields,
        ffn_hidden_size=cfg.required("intermediate_size"),
        activation="gelu",
        normalization="layernorm",
        position_embedding="rope",
        add_bias_linear=True,
        layer_block="parallel" if parallel else "sequential",
        rotary_percent=cfg.number("rotary_pct", 0.25),
    )


def _llama(cfg: HFConfig, name: str) -> ModelSpec:
    """Llama (and Mistral, which only adds a sliding window): SwiGLU, RMSNorm, RoPE, GQA,
    optional `head_dim`, untied embeddings by default."""
    return ModelSpec(
        name=name,
        **decoder_fields(cfg),
        ffn_hidden_size=cfg.required("intermediate_size"),
        **llama_biases(cfg),
    )


def _qwen2(cfg: HFConfig, name: str) -> ModelSpec:
    """Qwen2: Llama-style with biases on q, k and v (always, in Qwen2Attention); small
    checkpoints set `tie_word_embeddings` true."""
    return ModelSpec(
        name=name,
        **decoder_fields(cfg, head_dim="ignored"),
        ffn_hidden_size=cfg.required("intermediate_size"),
        add_qkv_bias=True,
    )


def _qwen3(cfg: HFConfig, name: str) -> ModelSpec:
    """Qwen3: Llama-style with an explicit `head_dim` (required: the transformers default
    has changed between releases, and published configs always state it) and an RMSNorm
    on each head's query and key (Qwen3Attention's q_norm/k_norm, always present)."""
    return ModelSpec(
        name=name,
        **decoder_fields(cfg, head_dim="required"),
        ffn_hidden_size=cfg.required("intermediate_size"),
        qk_layernorm=True,
        **llama_biases(cfg),
    )


def _mixtral(cfg: HFConfig, name: str) -> ModelSpec:
    """Mixtral: every layer is MoE with `num_local_experts` SwiGLU experts of
    `intermediate_size`, top-`num_experts_per_tok` routing, no shared expert."""
    return ModelSpec(
        name=name,
        **decoder_fields(cfg),
        ffn_hidden_size=cfg.required("intermediate_size"),
        num_experts=cfg.required("num_local_experts"),
        moe_top_k=cfg.required("num_experts_per_tok"),
        router=mixtral_router(cfg),
    )


def _qwen3_moe_layout(cfg: HFConfig, num_layers: int) -> tuple[int, int]:
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


def _qwen3_moe(cfg: HFConfig, name: str) -> ModelSpec:
    """Qwen3-MoE: Qwen3 attention (explicit head_dim) with `num_experts` routed SwiGLU
    experts of `moe_intermediate_size`, no shared expert."""
    fields = decoder_fields(cfg, head_dim="required")
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
        router=qwen3_moe_router(cfg),
        qk_layernorm=True,
        **llama_biases(cfg),
    )


def _deepseek_v3(cfg: HFConfig, name: str) -> ModelSpec:
    """DeepSeek-V3: multi-latent attention, `n_routed_experts` experts of
    `moe_intermediate_size` plus `n_shared_experts` shared ones of the same size, dense
    layers of `intermediate_size` before `first_k_dense_replace`, and
    `num_nextn_predict_layers` multi-token-prediction layers.

    transformers makes layer i MoE when i >= first_k_dense_replace and
    i % moe_layer_freq == 0; the first such layer is first_k rounded up to a multiple of
    the frequency, which is ModelSpec's moe_first_dense_layers."""
    fields = decoder_fields(cfg, head_dim="ignored")
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
        router=deepseek_v3_router(cfg),
        q_lora_rank=cfg.optional("q_lora_rank"),
        kv_lora_rank=cfg.required("kv_lora_rank"),
        qk_head_dim=cfg.required("qk_nope_head_dim"),
        qk_pos_emb_head_dim=cfg.required("qk_rope_head_dim"),
        v_head_dim=cfg.required("v_head_dim"),
    )


def _glm_moe_dsa(cfg: HFConfig, name: str) -> ModelSpec:
    """GLM-5 / 5.1 / 5.2 (``GlmMoeDsaForCausalLM``): DeepSeek-V3's layout (`_deepseek_v3`)
    with DeepSeek sparse attention, as Megatron-Bridge v0.6.0's `GLM5Bridge.provider_bridge`
    maps it (``models/glm_moe_dsa/glm5_bridge.py``): ``index_n_heads``, ``index_head_dim``,
    ``index_topk``, ``index_topk_freq`` (1 when absent) and ``index_skip_topk_offset`` (0);
    the rotary width qk_head_dim - qk_nope_head_dim when ``qk_head_dim`` is given (the
    bridge's recovery of it); ``rope_parameters.rope_theta``; the indexer loss the bridge
    sets (coefficient 0.001, sparse). The config has no ``aux_loss_alpha``, so the
    sequence-wise aux loss keeps TransformerConfig's coefficient 0."""
    spec = _deepseek_v3(cfg, name)
    rope = cfg.optional("qk_rope_head_dim")
    if cfg.optional("qk_head_dim") is not None:
        rope = cfg.required("qk_head_dim") - cfg.required("qk_nope_head_dim")
    parameters = cfg.data.get("rope_parameters") or {}
    theta = parameters.get("rope_theta", spec.rotary_base)
    return spec.replace(
        qk_pos_emb_head_dim=rope,
        rotary_base=int(theta),
        router=dataclasses.replace(
            spec.router, moe_aux_loss_coeff=cfg.number("aux_loss_alpha", 0.0)
        ),
        dsa_indexer_n_heads=cfg.required("index_n_heads"),
        dsa_indexer_head_dim=cfg.required("index_head_dim"),
        dsa_indexer_topk=cfg.required("index_topk"),
        dsa_indexer_topk_freq=cfg.optional("index_topk_freq", 1) or 1,
        dsa_indexer_skip_topk_offset=cfg.optional("index_skip_topk_offset", 0) or 0,
        dsa_indexer_loss_coeff=0.001,
        dsa_indexer_use_sparse_loss=True,
    )


def _window_every(cfg: HFConfig, num_layers: int) -> int | None:
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


def _gpt_oss(cfg: HFConfig, name: str) -> ModelSpec:
    """GPT-OSS: every layer MoE with `num_local_experts` SwiGLU experts of
    `intermediate_size` (biased, as are q/k/v/o under `attention_bias`), top-
    `num_experts_per_tok` routing (`GPT_OSS_ROUTER`), one sink logit per head, and
    `sliding_window` on the `sliding_attention` layers of `layer_types`. The router's bias
    (one per expert and layer) has no ModelSpec field and is left out."""
    fields = decoder_fields(cfg, head_dim="required")
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
        router=GPT_OSS_ROUTER,
        sliding_window=window,
        sliding_window_every=every or 2,
    )


FAMILIES: dict[str, Callable[[HFConfig, str], ModelSpec]] = {
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "llama": _llama,
    "mistral": _llama,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "glm_moe_dsa": _glm_moe_dsa,
    "gpt_oss": _gpt_oss,
    "nemotron_h": nemotron_h,
    "qwen3_next": qwen3_next,
}
"""The builder of every supported `model_type`, in the order error messages list them."""
