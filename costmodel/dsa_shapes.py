"""Element sizes and the layer share of a DeepSeek-sparse-attention layer's indexer tensors,
shared by its work counts (`costmodel.dsa_work`) and its saved tensors
(`costmodel.dsa_activations`)."""

from __future__ import annotations

from specs.model import ModelSpec

INDEX_BYTES = 4
"""Bytes of one top-k index (int32, cuDNN's ``indexer_top_k_wrapper``)."""
SCORE_BYTES = 4
"""Bytes of one indexer logit (fp32)."""


def indexer_layer_share(model: ModelSpec) -> float:
    """Share of the attention layers (decoder and MTP) that hold an indexer and compute
    their top-k (`specs.model.ModelSpec.dsa_indexer_mask`): 1 without index sharing, 0
    without DSA."""
    mask = model.dsa_indexer_mask()
    return sum(mask) / len(mask) if mask else 0.0
