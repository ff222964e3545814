"""A Hugging Face `config.json` as read by the importer (`specs.hf_import`).

- `HFConfig`: the parsed JSON object with typed getters (integer, number, flag, choice,
  list of integers) whose errors name the key and the file; an absent or null key takes
  the family's transformers default, which the caller passes.
- `decoder_fields`: the `ModelSpec` fields every Llama-like family reads the same way
  (LlamaConfig's key names): layers, hidden size, heads, key-value heads, head dim,
  vocabulary, positions, tied embeddings and `rope_theta`, in the canonical form of
  `specs.presets` (`num_query_groups` None for plain MHA, `kv_channels` None when the head
  dim is hidden / heads).
- `llama_biases`: LlamaConfig's `attention_bias` and `mlp_bias` as `ModelSpec`'s two bias
  flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specs.errors import SpecError

HeadDimRule = Literal["optional", "required", "ignored"]
"""How a family treats the `head_dim` key (`decoder_fields`)."""


@dataclass(frozen=True, slots=True)
class HFConfig:
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


def decoder_fields(cfg: HFConfig, *, head_dim: HeadDimRule = "optional") -> dict[str, Any]:
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


def llama_biases(cfg: HFConfig) -> dict[str, bool]:
    """LlamaConfig's `attention_bias` (q, k, v, o) and `mlp_bias`. ModelSpec has biases on
    every linear or on QKV only, so attention-only biases map to the QKV flag (the h-sized
    output-projection bias is the only weight lost)."""
    attention = cfg.flag("attention_bias", False)
    mlp = cfg.flag("mlp_bias", False)
    return {"add_bias_linear": attention and mlp, "add_qkv_bias": attention and not mlp}
