"""Import a Hugging Face `config.json` as a `ModelSpec`: `model_from_hf_config` (a parsed
object), `load_hf_config` (a file), `default_model_name`, `supported_model_types`.

Supported `model_type`s: gpt2, gpt_neox, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe,
deepseek_v3, gpt_oss and the hybrids nemotron_h (`specs.hf_hybrid`) and qwen3_next
(`specs.hf_qwen3next`); one small function per family, dispatched by
`specs.hf_families.FAMILIES`. Each reads the keys that decide weight shapes the way that
family's transformers code does (through `specs.hf_config.HFConfig`):

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
(`specs.hf_routers`); a router value Megatron-core cannot run is a `SpecError` naming the
key and the supported values. ``moe_latent_size`` (latent MoE, `ModelSpec.moe_latent_size`)
is read in every family; a model without routed experts refuses it. Other things that
change no weight shape are ignored: rotary fraction and scaling, GPT-NeoX's parallel
residual, DeepSeek's multi-token-prediction module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specs.errors import SpecError, did_you_mean
from specs.hf_config import HFConfig
from specs.hf_families import FAMILIES
from specs.model import ModelSpec
from specs.serde import read_json


def supported_model_types() -> list[str]:
    """The `model_type` values this importer understands."""
    return list(FAMILIES)


def model_from_hf_config(
    config: Mapping[str, Any], *, name: str, source: str | None = None
) -> ModelSpec:
    """Build a `ModelSpec` from a parsed Hugging Face config.json.

    ``source`` names the file in error messages (default: "config.json of <name>").
    """
    where = source or f"config.json of {name!r}"
    if not isinstance(config, Mapping):
        raise SpecError(f"{where}: expected a JSON object, got {type(config).__name__}")
    cfg = HFConfig(config, where)
    model_type = config.get("model_type")
    if model_type is None:
        raise SpecError(
            f"{where}: required key 'model_type' is missing; supported: {', '.join(FAMILIES)}"
        )
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        hint = did_you_mean(model_type, FAMILIES) if isinstance(model_type, str) else ""
        raise SpecError(
            f"{where}: model_type {model_type!r} is not supported{hint}; supported: "
            f"{', '.join(FAMILIES)}; for another architecture write a paraplan ModelSpec "
            "JSON instead"
        )
    try:
        model = family(cfg, name)
        # a latent MoE config (Megatron-core `moe_latent_size`) in any family: read it
        latent = cfg.optional("moe_latent_size")
        return model if latent == model.moe_latent_size else model.replace(moe_latent_size=latent)
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
