"""The registry entries of `specs.presets` by architecture style: a preset is a
``(name, factory)`` pair whose factory is `ModelSpec` with the style's fixed fields bound.

- `llama_style`: SwiGLU MLP, RMSNorm, RoPE, untied embeddings, no linear biases (Llama,
  Mixtral, Qwen3, DeepSeek, GPT-OSS with its biases turned on);
- `gpt_style`: Megatron's GPT defaults: GELU MLP, LayerNorm, learned positions, tied
  embeddings, biases on every linear layer.

A preset's own dimensions are keyword arguments of the entry, under `ModelSpec`'s field
names.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from specs.model import ModelSpec

Factory = Callable[[], ModelSpec]
"""A preset's zero-argument `ModelSpec` factory."""


def llama_style(name: str, **dims: Any) -> tuple[str, Factory]:
    """A registry entry for a Llama-style decoder: SwiGLU MLP, RMSNorm, RoPE, untied
    input/output embeddings and no linear biases (Llama, Mixtral, Qwen3, DeepSeek)."""
    return name, partial(
        ModelSpec,
        name=name,
        activation="swiglu",
        normalization="rmsnorm",
        position_embedding="rope",
        tied_embeddings=False,
        **{"add_bias_linear": False, **dims},
    )


def gpt_style(name: str, **dims: Any) -> tuple[str, Factory]:
    """A registry entry for a Megatron GPT: GELU MLP, LayerNorm, learned positions, tied
    embeddings and biases on every linear layer (Megatron's GPT defaults)."""
    return name, partial(
        ModelSpec,
        name=name,
        activation="gelu",
        normalization="layernorm",
        position_embedding="learned",
        tied_embeddings=True,
        add_bias_linear=True,
        **dims,
    )
