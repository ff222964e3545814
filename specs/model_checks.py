"""The checks of a `specs.model.ModelSpec` that relate its fields to each other, run by its
``__post_init__`` after the per-field ranges (`check_relations`). They read the model
through a protocol, so that this module, which `specs.model` imports, does not import it
back.
"""

from __future__ import annotations

from typing import Protocol

from specs.block_checks import BlockFields, check_layer_block
from specs.dsa_checks import DsaFields, check_dsa
from specs.errors import SpecError
from specs.gdn_checks import GateFields, check_gates
from specs.hybrid_checks import HybridFields, check_hybrid
from specs.mtp_checks import MtpFields, check_mtp
from specs.router import RouterSpec, check_router


class ModelRelationFields(HybridFields, MtpFields, GateFields, DsaFields, BlockFields, Protocol):
    """The `specs.model.ModelSpec` fields `check_relations` reads, with those of the hybrid,
    MTP, gate and DSA checks it calls."""

    @property
    def kv_channels(self) -> int | None: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def query_groups(self) -> int: ...
    @property
    def moe_top_k(self) -> int: ...
    @property
    def moe_capacity_factor(self) -> float | None: ...
    @property
    def moe_latent_size(self) -> int | None: ...
    @property
    def router(self) -> RouterSpec: ...
    @property
    def kv_lora_rank(self) -> int | None: ...
    @property
    def qk_head_dim(self) -> int | None: ...
    @property
    def v_head_dim(self) -> int | None: ...


def check_relations(model: ModelRelationFields) -> None:
    """`SpecError` (rule, values, fix) for a `ModelSpec` whose fields contradict each other:
    heads and widths, query groups, MoE top-k, dense prefix, capacity factor and latent size,
    the router (`specs.router.check_router`), the gates (`specs.gdn_checks`), the layer
    block (`specs.block_checks`), the hybrid
    pattern (`specs.hybrid_checks`), MTP (`specs.mtp_checks`), DeepSeek sparse attention
    (`specs.dsa_checks`) and multi-latent attention; the order is the order the checks run."""
    if not model.name:
        raise SpecError("ModelSpec.name must not be empty")
    if model.kv_channels is None and model.hidden_size % model.num_attention_heads:
        raise SpecError(
            f"ModelSpec {model.name!r}: hidden_size ({model.hidden_size}) must be divisible "
            f"by num_attention_heads ({model.num_attention_heads}) when kv_channels is not "
            "given; set kv_channels explicitly"
        )
    groups = model.query_groups
    if model.num_attention_heads % groups:
        raise SpecError(
            f"ModelSpec {model.name!r}: num_attention_heads ({model.num_attention_heads}) "
            f"must be divisible by num_query_groups ({groups})"
        )
    if model.is_moe and model.moe_top_k > model.num_experts:
        raise SpecError(
            f"ModelSpec {model.name!r}: moe_top_k ({model.moe_top_k}) must not exceed "
            f"num_experts ({model.num_experts})"
        )
    if model.moe_first_dense_layers > model.num_layers:
        raise SpecError(
            f"ModelSpec {model.name!r}: moe_first_dense_layers ({model.moe_first_dense_layers})"
            f" exceeds num_layers ({model.num_layers})"
        )
    if model.moe_capacity_factor is not None and model.moe_capacity_factor <= 0:
        raise SpecError(
            f"ModelSpec {model.name!r}: moe_capacity_factor must be > 0 or null (dropless), "
            f"got {model.moe_capacity_factor}"
        )
    if model.moe_latent_size is not None and not model.is_moe:
        raise SpecError(
            f"ModelSpec {model.name!r}: moe_latent_size ({model.moe_latent_size}) projects "
            "the routed experts' tokens, but num_experts is 0 (a dense model): set "
            "num_experts, or drop moe_latent_size"
        )
    if model.is_moe:
        check_router(
            model.router,
            where=f"ModelSpec {model.name!r}",
            num_experts=model.num_experts,
            top_k=model.moe_top_k,
            capacity_factor=model.moe_capacity_factor,
        )
    check_gates(model)
    check_layer_block(model)
    if model.hybrid_layer_pattern is not None:
        check_hybrid(model)
    check_mtp(model)
    check_dsa(model)
    mla = (model.kv_lora_rank, model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim)
    if any(v is not None for v in mla) and any(v is None for v in mla):
        raise SpecError(
            f"ModelSpec {model.name!r}: multi-latent attention needs all of kv_lora_rank, "
            "qk_head_dim, qk_pos_emb_head_dim and v_head_dim"
        )
