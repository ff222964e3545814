"""What each decoder layer of a `specs.model.ModelSpec` holds (`LayerKind`): its token mixer
(self-attention, a Mamba-2 mixer, a gated DeltaNet, or none) and its feed-forward part (a
dense MLP, routed experts, or none).

A transformer layer holds both: self-attention and a dense MLP (`DENSE_LAYER`) or routed
experts (`MOE_LAYER`, Megatron `--moe-layer-freq`). A hybrid model
(``ModelSpec.hybrid_layer_pattern``, Megatron-core's `--hybrid-override-pattern`,
``megatron/core/models/hybrid/hybrid_layer_allocation.py``) stacks single-part layers, one
per symbol of its pattern (`HYBRID_SYMBOLS`): ``M`` a Mamba-2 mixer, ``G`` a gated DeltaNet
(``megatron/core/ssm/gated_delta_net/gdn.py``, `GatedDeltaNet`), ``*`` self-attention,
``-`` a dense MLP, ``E`` routed experts, each with its own pre-norm and residual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specs.errors import SpecError

MixerKind = Literal["attention", "mamba", "gdn", "none"]
MlpKind = Literal["dense", "moe", "none"]


@dataclass(frozen=True, slots=True, order=True)
class LayerKind:
    """The parts of one decoder layer."""

    mixer: MixerKind
    """Token mixer: ``attention`` (self-attention), ``mamba`` (Mamba-2 mixer), ``gdn`` (gated
    DeltaNet) or ``none``."""
    mlp: MlpKind
    """Feed-forward part: ``dense`` (MLP), ``moe`` (routed experts, with the shared expert
    where the model has one) or ``none``."""

    @property
    def is_moe(self) -> bool:
        """True when the layer has routed experts."""
        return self.mlp == "moe"

    @property
    def tag(self) -> str:
        """A one-letter name of the kind, for per-kind columns and keys: ``d`` and ``m`` the
        transformer layers (dense, MoE), ``a`` attention alone, ``s`` a Mamba-2 mixer
        alone, ``g`` a gated DeltaNet alone, ``f`` a dense MLP alone, ``e`` routed experts
        alone."""
        return _TAGS[(self.mixer, self.mlp)]


DENSE_LAYER = LayerKind(mixer="attention", mlp="dense")
"""A transformer layer with a dense MLP."""
MOE_LAYER = LayerKind(mixer="attention", mlp="moe")
"""A transformer layer with routed experts."""

HYBRID_SYMBOLS: dict[str, LayerKind] = {
    "M": LayerKind(mixer="mamba", mlp="none"),
    "G": LayerKind(mixer="gdn", mlp="none"),
    "*": LayerKind(mixer="attention", mlp="none"),
    "-": LayerKind(mixer="none", mlp="dense"),
    "E": LayerKind(mixer="none", mlp="moe"),
}
"""Megatron-core hybrid pattern symbols the specs express (``Symbols`` in
``megatron/core/models/hybrid/hybrid_layer_allocation.py``)."""

_NOT_EXPRESSED = {
    "D": "DeepSeek sparse-attention layers",
    "+": "multi-latent attention layers",
    "|": "pipeline-stage separators (the plan's pipeline split places the layers)",
    "/": "multi-token-prediction depths (set mtp_hybrid_pattern and mtp_num_layers)",
}
"""Hybrid pattern symbols of Megatron-core the specs do not express, with what they mean."""

_TAGS: dict[tuple[str, str], str] = {
    ("attention", "dense"): "d",
    ("attention", "moe"): "m",
    ("attention", "none"): "a",
    ("mamba", "none"): "s",
    ("none", "dense"): "f",
    ("none", "moe"): "e",
    ("gdn", "none"): "g",
}


KIND_TAGS: tuple[str, ...] = tuple(_TAGS.values())
"""Every `LayerKind.tag`, transformer layers first."""


def parse_hybrid_pattern(pattern: str, *, num_layers: int, where: str) -> tuple[LayerKind, ...]:
    """The layer kinds of a hybrid pattern, one symbol per layer (`HYBRID_SYMBOLS`);
    `SpecError` naming the rule, the values and the fix for an unknown or unexpressed symbol
    or a length other than ``num_layers``."""
    kinds = _pattern_kinds(pattern, field="hybrid_layer_pattern", where=where)
    if len(pattern) != num_layers:
        raise SpecError(
            f"{where}: hybrid_layer_pattern has {len(pattern)} symbols but num_layers is "
            f"{num_layers}: one symbol per layer; set num_layers to {len(pattern)}"
        )
    return kinds


def parse_mtp_pattern(pattern: str, *, where: str) -> tuple[LayerKind, ...]:
    """The layer kinds of one multi-token-prediction depth of a hybrid model
    (``ModelSpec.mtp_hybrid_pattern``): one symbol per layer, as `parse_hybrid_pattern`,
    at least one. Megatron-core's unified pattern ``<main>/<mtp>/<mtp>...`` repeats this
    part once per depth, every part identical (``hybrid_layer_allocation.py``
    ``parse_hybrid_pattern``, which also forbids ``|`` in it)."""
    if not pattern:
        raise SpecError(
            f"{where}: mtp_hybrid_pattern is empty: an MTP depth holds at least one layer; "
            "give its symbols (e.g. '*E'), or set mtp_num_layers to 0"
        )
    return _pattern_kinds(pattern, field="mtp_hybrid_pattern", where=where)


def _pattern_kinds(pattern: str, *, field: str, where: str) -> tuple[LayerKind, ...]:
    """The kinds of ``pattern``'s symbols; `SpecError` for an unknown or unexpressed one."""
    for symbol, meaning in _NOT_EXPRESSED.items():
        if symbol in pattern:
            raise SpecError(
                f"{where}: {field} {pattern!r} holds {symbol!r} ({meaning}), which "
                f"paraplan does not express; use only {', '.join(HYBRID_SYMBOLS)}"
            )
    unknown = sorted(set(pattern) - set(HYBRID_SYMBOLS))
    if unknown:
        raise SpecError(
            f"{where}: {field} {pattern!r} holds unknown symbols "
            f"{', '.join(map(repr, unknown))}; use M (Mamba-2), G (gated DeltaNet), "
            "* (attention), - (MLP), E (routed experts)"
        )
    return tuple(HYBRID_SYMBOLS[s] for s in pattern)
