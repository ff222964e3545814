"""Rules of a `specs.model.ModelSpec`'s multi-token prediction (``mtp_num_layers``,
``mtp_hybrid_pattern``, ``mtp_repeated_layer``) and the layer kinds of one MTP depth
(`mtp_depth_kinds`).

Megatron-LM d98e8a64 (the mirror's HEAD):
- A transformer's MTP depth is one decoder layer of the last decoder layer's kind
  (``megatron/training/training.py`` ``transformer_flops``: ``last_layer_is_moe``).
- A hybrid model's depths are written in its unified pattern ``<main>/<mtp>/<mtp>...``
  (``megatron/core/models/hybrid/hybrid_layer_allocation.py``: ``MTP_SEPARATOR``,
  ``ParsedHybridPattern``), one identical part per depth; ``validate_args``
  (``megatron/training/arguments.py``) takes ``--mtp-num-layers`` from the number of parts
  and only warns about a hybrid model with ``--mtp-num-layers`` and no part, whose depths
  would hold no layer. paraplan stores the part once (``mtp_hybrid_pattern``) and the
  depth count in ``mtp_num_layers``.
- ``mtp_use_repeated_layer`` (`TransformerConfig`, flag ``--mtp-use-repeated-layer``)
  builds one depth module and runs it at every depth
  (``megatron/core/transformer/multi_token_prediction.py``,
  ``MultiTokenPredictionBlock._build_layers``)."""

from __future__ import annotations

from typing import Protocol

from specs.errors import SpecError
from specs.layer_kinds import LayerKind, parse_mtp_pattern


class MtpFields(Protocol):
    """The `specs.model.ModelSpec` fields these checks read (a protocol, so that this module,
    which `specs.model` imports, does not import it back)."""

    @property
    def name(self) -> str: ...
    @property
    def is_hybrid(self) -> bool: ...
    @property
    def is_moe(self) -> bool: ...
    @property
    def mtp_num_layers(self) -> int: ...
    @property
    def mtp_hybrid_pattern(self) -> str | None: ...
    @property
    def mtp_repeated_layer(self) -> bool: ...


def check_mtp(model: MtpFields) -> None:
    """`SpecError` (rule, values, fix) for MTP fields that do not describe a model: a depth
    pattern on a transformer or without depths, a hybrid model's depths without a pattern,
    an unknown symbol, routed experts in the depth of a model without experts, repeated
    weights without depths."""
    where = f"ModelSpec {model.name!r}"
    pattern, depths = model.mtp_hybrid_pattern, model.mtp_num_layers
    if model.mtp_repeated_layer and not depths:
        raise SpecError(
            f"{where}: mtp_repeated_layer is set but mtp_num_layers is 0: one set of MTP "
            "weights needs MTP depths to run at; set mtp_num_layers, or drop "
            "mtp_repeated_layer"
        )
    if pattern is not None and not model.is_hybrid:
        raise SpecError(
            f"{where}: mtp_hybrid_pattern {pattern!r} is set on a transformer (no "
            "hybrid_layer_pattern): a transformer's MTP depth is one layer of the last "
            "layer's kind; drop mtp_hybrid_pattern, or set hybrid_layer_pattern"
        )
    if pattern is not None and not depths:
        raise SpecError(
            f"{where}: mtp_hybrid_pattern {pattern!r} is set but mtp_num_layers is 0: set "
            "mtp_num_layers to the number of MTP depths, or drop mtp_hybrid_pattern"
        )
    if model.is_hybrid and depths and pattern is None:
        raise SpecError(
            f"{where}: a hybrid model with mtp_num_layers {depths} needs the layers of one "
            "MTP depth (Megatron-core's unified pattern '<main>/<mtp>/...'): set "
            "mtp_hybrid_pattern, e.g. '*E' (attention, then routed experts)"
        )
    if pattern is None:
        return
    kinds = parse_mtp_pattern(pattern, where=where)
    if any(kind.is_moe for kind in kinds) and not model.is_moe:
        raise SpecError(
            f"{where}: mtp_hybrid_pattern {pattern!r} has E (routed-expert) layers but "
            "num_experts is 0: set num_experts, moe_top_k and moe_ffn_hidden_size, or use - "
            "(MLP) layers"
        )


def mtp_depth_kinds(model: MtpFields, main_kinds: tuple[LayerKind, ...]) -> tuple[LayerKind, ...]:
    """The layer kinds of one MTP depth, in order (module docstring): a hybrid model's
    ``mtp_hybrid_pattern``, a transformer's last layer kind (``main_kinds[-1]``); none
    without MTP."""
    if not model.mtp_num_layers:
        return ()
    if model.is_hybrid:
        return parse_mtp_pattern(model.mtp_hybrid_pattern or "", where=model.name)
    return (main_kinds[-1],)
