"""The model preset registry: named `ModelSpec` factories with published architectures,
looked up by `get_preset` (an unknown name lists the valid ones) and listed by
`preset_names`.

One registry, `PRESETS` (name -> zero-argument factory), in a fixed order: tiny test
models, the GPT-3 family of Megatron-LM's SC21 paper (Narayanan et al. 2021, Table 1),
Llama 2 / 3 / 3.1 (`specs.preset_dense`), Mixtral, Qwen3 MoE, DeepSeek-V3, GPT-OSS and
Kimi K2 (`specs.preset_moe`), GLM-5.1 and GLM-5.2 with DeepSeek sparse attention
(`specs.preset_dsa`), Nemotron-4 15B and 340B and GPT-NeoX-20B (`specs.preset_dense`), and
the hybrid Mamba-2 models Nemotron-H 8B, 47B, 56B, Nemotron 3 Nano and Super and the gated
DeltaNet hybrid Qwen3-Next 80B-A3B (`specs.preset_hybrid`);
the entries are built by `specs.preset_styles` (the hybrids by
`specs.preset_hybrid.nemotron_h_style`). Values are the published ones (the models'
Hugging Face `config.json` files, the SC21 table, NeMo's Nemotron-4 recipe, Megatron-Bridge's
Nemotron-H providers and Qwen3-Next bridge).

Conventions, shared with `specs.hf_import` so an imported config equals its preset:
`num_query_groups` is left None for plain multi-head attention, `kv_channels` only when the
head dim differs from hidden / heads, `moe_ffn_hidden_size` only when an expert's inner
size differs from `ffn_hidden_size`, and `mamba_num_heads` only when it differs from
2·hidden / mamba_head_dim. Multi-token-prediction heads (DeepSeek-V3) and tiny per-head
vectors ModelSpec has no field for (Qwen3's q/k norms) are left out.
"""

from __future__ import annotations

from specs.errors import SpecError, unknown_name_message
from specs.model import ModelSpec
from specs.preset_dense import LLAMA, NEMOTRON, NEOX, SC21_GPT, TINY
from specs.preset_dsa import DSA
from specs.preset_hybrid import HYBRID
from specs.preset_moe import MOE, RECIPE_MOE
from specs.preset_styles import Factory

PRESETS: dict[str, Factory] = dict(
    (*TINY, *SC21_GPT, *LLAMA, *MOE, *RECIPE_MOE, *DSA, *NEMOTRON, *NEOX, *HYBRID)
)
"""Every preset, name -> factory, in registry order."""


def preset_names() -> list[str]:
    """Preset names in registry order."""
    return list(PRESETS)


def get_preset(name: str) -> ModelSpec:
    """The `ModelSpec` of a named preset; an unknown name lists every valid one."""
    factory = PRESETS.get(name)
    if factory is None:
        raise SpecError(unknown_name_message("model preset", name, PRESETS))
    return factory()
