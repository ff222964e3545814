"""A published row's model: the `ModelSpec` of its architecture columns (`model_for`).

A row of ``published-runs-dev.csv`` states the model's shape (``ARCHITECTURE_COLUMNS``) and,
in ``arch_notes``, its style (gated MLP, normalization, position embedding, MLA, window
attention); `model_for` maps exactly those and raises `NotExpressible` for layers the cost
model does not price (a parallel transformer block whose norms the row does not state,
hybrid Mamba layers without a preset,
sliding-window attention outside GPT-OSS) and for a row that names no MLP
activation where its model family does not tell it (`SWIGLU_FAMILIES`, `GELU_FAMILIES`).
Nemotron 3 Nano, Nemotron 3 Super and Nemotron-H rows take their preset
(`specs.preset_hybrid`, `bench/hybrid_recipes.py`), whose architecture the rows do not
print. Recipe-set
fields (MTP layers, untied embeddings, token-drop capacity, NeMo model overrides) come
from the recipe modules cited in
`bench/row_recipes.py`, `bench/moe_recipes.py` and `bench/nemo_recipes.py`.

Defaults for what a row leaves empty, each Megatron-LM's own (column guide:
``published-runs-dev.md``):
- ffn 4·h for GPT-style rows (``--ffn-hidden-size`` default), the expert width for MoE rows;
- MHA when ``num_query_groups`` is empty (Megatron-LM without ``--group-query-attention``).

A GPT-style row whose notes name GPT-NeoX's parallel block (`PARALLEL_MARKERS`) takes
``layer_block="parallel"``; "rotary" in the notes is RoPE.
"""

from __future__ import annotations

import dataclasses
import re

from hybrid_recipes import check_stated_architecture, hybrid_model_fields, hybrid_preset
from moe_recipes import token_drop_capacity
from nemo_recipes import nemo_model_fields
from recipe_keys import NotExpressible
from row_columns import column_int, column_text
from row_recipes import mtp_layers, sliding_window_fields, untied_embeddings

from specs.model import ModelSpec
from specs.presets import get_preset

ARCHITECTURE_COLUMNS = (
    "arch_notes",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "num_experts",
    "moe_top_k",
    "moe_ffn_hidden_size",
    "moe_shared_expert_ffn",
)
"""Columns of ``published-runs-dev.csv`` that describe the model (what `model_for` reads):
a row built for a recipe copies them from a dev-set row of the same model."""


SWIGLU_FAMILIES = ("llama", "mistral", "mixtral", "qwen", "deepseek", "kimi")
"""Model names (lower case, prefix) of families with SwiGLU MLPs, RMSNorm and rotary
positions (``hidden_act: silu`` in each family's Hugging Face ``config.json``), for rows
whose ``arch_notes`` do not say so."""

GELU_FAMILIES = ("gpt", "bloom", "mt-nlg", "megatron")
"""Model names (lower case, prefix) of GPT-style models: GeLU MLP of 4h, LayerNorm."""

GELU_MARKERS = ("gelu", "gpt", "ffn=4h", "relu")
"""``arch_notes`` texts (lower case) that name a GPT-style MLP: two weight matrices around an
element-wise activation (``ModelSpec.activation="gelu"``). A ReLU MLP (OPT; Megatron-core
``TransformerConfig.activation_func=F.relu``, which ``MLP.forward`` applies unfused) runs the
same two GEMMs and saves one ``[tokens, ffn]`` tensor for its backward, as GeLU does (ReLU its
output, GeLU its input), so it is priced as this class."""

PARALLEL_MARKERS = ("parallel attn", "parallel residual", "gpt_j_residual")
"""``arch_notes`` texts (lower case) of the parallel attention+MLP block with two norms of
the layer input (``ModelSpec.layer_block="parallel"``): GPT-NeoX's ``gpt_j_residual``
with its default untied norms (``gpt_j_tied: false``, EleutherAI/gpt-neox
``configs/20B.yml`` sets no ``gpt_j_tied``)."""

HYBRID_FAMILIES = ("nemotron_3", "nemotron-3", "nemotron-h", "nemotron_h")
"""Model names (lower case, prefix) of hybrid Mamba-2/attention models; those without a
preset (`hybrid_recipes.hybrid_preset`) are not priced."""


def _architecture(raw: dict[str, str]) -> dict[str, object]:
    """ModelSpec style fields from ``arch_notes``; NotExpressible for layers not modelled."""
    notes = column_text(raw, "arch_notes").lower()
    model = column_text(raw, "model").lower()
    if "sliding-window" in notes and not sliding_window_fields(raw):
        raise NotExpressible(
            f"arch_notes name sliding-window attention for model {column_text(raw, 'model')!r}: "
            "priced only in "
            "GPT-OSS rows (`row_recipes.sliding_window_fields`)"
        )
    if "parallel transformer block" in notes:
        raise NotExpressible(
            "arch_notes name a parallel transformer block without its norms: state "
            "'parallel residual' (two norms of the layer input, GPT-NeoX) to price it"
        )
    block = {"layer_block": "parallel"} if any(m in notes for m in PARALLEL_MARKERS) else {}
    if model.startswith(HYBRID_FAMILIES) or "mamba" in notes:
        raise NotExpressible(
            f"model {column_text(raw, 'model')!r} has hybrid Mamba layers and no preset: "
            "priced are Nemotron 3 Nano, Nemotron 3 Super and Nemotron-H "
            "(`hybrid_recipes.hybrid_preset`)"
        )
    gated = any(k in notes for k in ("swiglu", "llama", "experts")) or "mla" in notes
    if gated or model.startswith(SWIGLU_FAMILIES):
        return {"activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope"}
    if "squared-relu" in notes:
        # Non-gated two-matrix MLP: the same GEMMs as GELU (`specs.presets` Nemotron-4).
        return {"activation": "gelu", "normalization": "layernorm", "position_embedding": "rope"}
    if not any(k in notes for k in GELU_MARKERS) and not model.startswith(GELU_FAMILIES):
        raise NotExpressible(
            f"MLP activation not stated: arch_notes {notes!r} name no activation and model "
            f"{model!r} is no family of known architecture; add 'SwiGLU' or 'GeLU' to arch_notes"
        )
    position = "rope" if "rotary" in notes else "none" if "alibi" in notes else "learned"
    return {
        **block,
        "activation": "gelu",
        "normalization": "layernorm",
        "position_embedding": position,
        "tied_embeddings": not untied_embeddings(raw),
    }


def _mla(raw: dict[str, str]) -> dict[str, object]:
    """DeepSeek-V3-style MLA and dense-layer fields (deepseek-ai/DeepSeek-V3 config.json)."""
    notes = column_text(raw, "arch_notes").lower()
    if "mla" not in notes:
        return {}
    dense = 3 if "first 3 layers dense" in notes else 1 if "first layer dense" in notes else 0
    return {
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_head_dim": 128,
        "qk_pos_emb_head_dim": 64,
        "v_head_dim": 128,
        "moe_first_dense_layers": dense,
    }


QK_LAYERNORM_FAMILIES = ("qwen3",)
"""Model names (lower case, prefix) whose architecture normalizes each head's query and
key: Qwen3 dense and MoE (Megatron-Bridge ``models/qwen/qwen3_bridge.py`` and
``qwen3_moe_bridge.py`` set ``provider.qk_layernorm = True``)."""


def uses_qk_layernorm(raw: dict[str, str]) -> bool:
    """Whether the row's model has query/key norms (`QK_LAYERNORM_FAMILIES`)."""
    return column_text(raw, "model").lower().startswith(QK_LAYERNORM_FAMILIES)


def hybrid_model(raw: dict[str, str], preset: str) -> ModelSpec:
    """The ``preset`` (`hybrid_recipes.hybrid_preset`) under the row's model name, with the
    row's token-drop capacity and its config's model fields
    (`hybrid_recipes.hybrid_model_fields`); NotExpressible where an architecture column the
    row states contradicts it."""
    spec = get_preset(preset)
    check_stated_architecture(
        raw,
        {
            "num_layers": spec.num_layers,
            "hidden_size": spec.hidden_size,
            "num_attention_heads": spec.num_attention_heads,
            "num_query_groups": spec.query_groups,
            "ffn_hidden_size": spec.ffn_hidden_size,
            "vocab_size": spec.vocab_size,
            "num_experts": spec.num_experts or None,
            "moe_top_k": spec.moe_top_k if spec.num_experts else None,
            "moe_ffn_hidden_size": spec.expert_ffn_hidden_size if spec.num_experts else None,
            "moe_shared_expert_ffn": spec.moe_shared_expert_size or None,
        },
    )
    capacity = token_drop_capacity(raw) if spec.num_experts else None
    spec = dataclasses.replace(spec, name=column_text(raw, "model"), moe_capacity_factor=capacity)
    return dataclasses.replace(spec, **hybrid_model_fields(raw))


def model_for(raw: dict[str, str]) -> ModelSpec:
    """The row's `ModelSpec` from its architecture columns, or its hybrid preset."""
    preset = hybrid_preset(raw)
    if preset is not None:
        return hybrid_model(raw, preset)
    if not column_text(raw, "model"):
        raise NotExpressible("model not stated: name the model (its family sets unstated fields)")
    style = {**_architecture(raw), **sliding_window_fields(raw)}
    hidden = column_int(raw, "hidden_size")
    heads = column_int(raw, "num_attention_heads")
    kv = re.search(r"kv_channels (\d+)", column_text(raw, "arch_notes"))
    experts = column_int(raw, "num_experts", 0)
    moe: dict[str, object] = {}
    if experts:
        moe = {
            "num_experts": experts,
            "moe_top_k": column_int(raw, "moe_top_k"),
            "moe_ffn_hidden_size": column_int(raw, "moe_ffn_hidden_size"),
            "moe_shared_expert_size": column_int(raw, "moe_shared_expert_ffn", 0),
            "moe_capacity_factor": token_drop_capacity(raw),
        }
    ffn_default = 4 * hidden if style["activation"] == "gelu" else None
    if experts:
        ffn_default = int(moe["moe_ffn_hidden_size"])
    ffn = column_int(raw, "ffn_hidden_size", ffn_default)
    spec = ModelSpec(
        name=column_text(raw, "model"),
        num_layers=column_int(raw, "num_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=column_int(raw, "num_query_groups", heads),
        kv_channels=int(kv.group(1)) if kv else None,
        ffn_hidden_size=ffn,
        vocab_size=column_int(raw, "vocab_size"),
        max_position_embeddings=column_int(raw, "seq_length"),
        **style,
        mtp_num_layers=mtp_layers(raw),
        qk_layernorm=uses_qk_layernorm(raw),
        **moe,
        **_mla(raw),
    )
    nemo = nemo_model_fields(raw)
    if not experts:
        nemo.pop("moe_capacity_factor", None)
    return dataclasses.replace(spec, **nemo) if nemo else spec
