"""Rules of a hybrid `specs.model.ModelSpec` (``hybrid_layer_pattern``): its pattern parses
(`specs.layer_kinds.parse_hybrid_pattern`), its routed experts and its ``E`` layers come
together, the pattern alone places the MoE layers, the Mamba-2 heads split into whole
groups, and the features the hybrid layers are not priced with (multi-latent attention,
sliding windows, attention sinks) are absent; and why paraplan's executor refuses a hybrid
model (`executor_hybrid_refusal`). Multi-token prediction has its own rules
(`specs.mtp_checks`)."""

from __future__ import annotations

from typing import Protocol

from specs.errors import SpecError
from specs.layer_kinds import parse_hybrid_pattern


class HybridFields(Protocol):
    """The `specs.model.ModelSpec` fields these checks read (a protocol, so that this module,
    which `specs.model` imports, does not import it back)."""

    @property
    def name(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def hybrid_layer_pattern(self) -> str | None: ...
    @property
    def is_hybrid(self) -> bool: ...
    @property
    def num_experts(self) -> int: ...
    @property
    def is_moe(self) -> bool: ...
    @property
    def moe_layer_freq(self) -> int: ...
    @property
    def moe_first_dense_layers(self) -> int: ...
    @property
    def uses_mla(self) -> bool: ...
    @property
    def sliding_window(self) -> int | None: ...
    @property
    def attention_sinks(self) -> bool: ...
    @property
    def mamba_head_dim(self) -> int: ...
    @property
    def mamba_num_heads(self) -> int | None: ...
    @property
    def mamba_heads(self) -> int: ...
    @property
    def mamba_num_groups(self) -> int: ...


def check_hybrid(model: HybridFields) -> None:
    """`SpecError` (rule, values, fix) for a hybrid model the specs cannot express."""
    where = f"ModelSpec {model.name!r}"
    pattern = model.hybrid_layer_pattern or ""
    kinds = parse_hybrid_pattern(pattern, num_layers=model.num_layers, where=where)
    moe_layers = sum(kind.is_moe for kind in kinds)
    if moe_layers and not model.is_moe:
        raise SpecError(
            f"{where}: hybrid_layer_pattern has {moe_layers} E (routed-expert) layers but "
            "num_experts is 0: set num_experts, moe_top_k and moe_ffn_hidden_size, or use - "
            "(MLP) layers"
        )
    if model.is_moe and not moe_layers:
        raise SpecError(
            f"{where}: num_experts is {model.num_experts} but hybrid_layer_pattern has no E "
            "layer: mark the routed-expert layers E, or set num_experts to 0"
        )
    if model.moe_layer_freq != 1 or model.moe_first_dense_layers:
        raise SpecError(
            f"{where}: a hybrid model's pattern places its MoE layers, so moe_layer_freq "
            f"({model.moe_layer_freq}) must be 1 and moe_first_dense_layers "
            f"({model.moe_first_dense_layers}) 0"
        )
    for name, present in (
        ("multi-latent attention", model.uses_mla),
        ("sliding-window attention", model.sliding_window is not None),
        ("attention sinks", model.attention_sinks),
    ):
        if present:
            raise SpecError(
                f"{where}: {name} in a hybrid model is not expressed: the hybrid layers are "
                "priced with standard self-attention; drop it"
            )
    if model.mamba_num_heads is None and (2 * model.hidden_size) % model.mamba_head_dim:
        raise SpecError(
            f"{where}: 2·hidden_size ({2 * model.hidden_size}) must be a multiple of "
            f"mamba_head_dim ({model.mamba_head_dim}) when mamba_num_heads is not given; set "
            "mamba_num_heads"
        )
    if model.mamba_heads % model.mamba_num_groups:
        raise SpecError(
            f"{where}: Mamba-2 heads ({model.mamba_heads}) must be a multiple of "
            f"mamba_num_groups ({model.mamba_num_groups})"
        )


EXECUTOR_HYBRID_RULE = "hybrid_not_in_executor"
"""Rule id of `executor_hybrid_refusal`."""


def executor_hybrid_refusal(model: HybridFields) -> str | None:
    """Why paraplan's executor (and the ``torch`` runtime, which prices it) cannot run
    ``model``, or None for a transformer: the executor builds transformer layers only, no
    Mamba-2 mixer and no single-part hybrid layer. The one check both use
    (`executor.model.check_model_supported`, `costmodel.runtimes.torch.runtime`)."""
    if not model.is_hybrid:
        return None
    return (
        f"[{EXECUTOR_HYBRID_RULE}] model {model.name!r} is a hybrid model (hybrid_layer_pattern "
        f"{model.hybrid_layer_pattern!r}): the executor builds transformer layers only, and "
        "the torch runtime prices that executor: use --runtime megatron (the plan runs with "
        "Megatron-LM's pretrain_hybrid.py)"
    )
