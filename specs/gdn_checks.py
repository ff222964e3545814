"""Rules of a `specs.model.ModelSpec`'s gated DeltaNet layers (hybrid symbol ``G``) and of
its output gates (gated attention, the shared expert's gate), and why paraplan's executor
refuses a model with an output gate (`executor_gate_refusal`).

Sources: Megatron-LM d98e8a64 ``megatron/core/transformer/transformer_config.py``
(`TransformerConfig.__post_init__`: ``linear_num_value_heads`` a multiple of
``linear_num_key_heads``; `MLATransformerConfig`: "Output gate is not supported for MLA
yet"), ``megatron/core/ssm/gated_delta_net/common.py`` (`_GDNBase`) and
``megatron/core/transformer/moe/shared_experts.py`` (`SharedExpertMLP`, ``gate_weight``).
"""

from __future__ import annotations

from typing import Protocol

from specs.errors import SpecError


class GateFields(Protocol):
    """The `specs.model.ModelSpec` fields these checks read (a protocol, so that this module,
    which `specs.model` imports, does not import it back)."""

    @property
    def name(self) -> str: ...
    @property
    def hybrid_layer_pattern(self) -> str | None: ...
    @property
    def mtp_hybrid_pattern(self) -> str | None: ...
    @property
    def linear_num_key_heads(self) -> int: ...
    @property
    def linear_num_value_heads(self) -> int: ...
    @property
    def attention_output_gate(self) -> bool: ...
    @property
    def moe_shared_expert_gate(self) -> bool: ...
    @property
    def moe_shared_expert_size(self) -> int: ...
    @property
    def uses_mla(self) -> bool: ...
    @property
    def rotary_percent(self) -> float: ...


def has_gdn(model: GateFields) -> bool:
    """True when the model's pattern or its MTP depth holds a gated DeltaNet (``G``)."""
    return "G" in (model.hybrid_layer_pattern or "") + (model.mtp_hybrid_pattern or "")


def check_gates(model: GateFields) -> None:
    """`SpecError` (rule, values, fix) for gated DeltaNet heads Megatron-core cannot build,
    an output gate on multi-latent attention, a shared-expert gate without a shared expert,
    or a rotary share outside (0, 1]."""
    where = f"ModelSpec {model.name!r}"
    keys, values = model.linear_num_key_heads, model.linear_num_value_heads
    if has_gdn(model) and values % keys:
        raise SpecError(
            f"{where}: linear_num_value_heads ({values}) must be a multiple of "
            f"linear_num_key_heads ({keys}): each gated DeltaNet key head serves a whole "
            "number of value heads (Megatron's TransformerConfig asserts it)"
        )
    if model.attention_output_gate and model.uses_mla:
        raise SpecError(
            f"{where}: attention_output_gate with multi-latent attention: Megatron-core's "
            "MLATransformerConfig raises 'Output gate is not supported for MLA yet'; drop "
            "one of them"
        )
    if model.moe_shared_expert_gate and not model.moe_shared_expert_size:
        raise SpecError(
            f"{where}: moe_shared_expert_gate gates the shared expert, but "
            "moe_shared_expert_size is 0: set the shared expert's size, or drop the gate"
        )
    if not 0 < model.rotary_percent <= 1:
        raise SpecError(
            f"{where}: rotary_percent must be in (0, 1], got {model.rotary_percent}: the "
            "share of each head's channels RoPE rotates (Hugging Face partial_rotary_factor)"
        )


EXECUTOR_GATE_RULE = "output_gate_not_in_executor"
"""Rule id of `executor_gate_refusal`."""


def executor_gate_refusal(model: GateFields) -> str | None:
    """Why paraplan's executor (and the ``torch`` runtime, which prices it) cannot run
    ``model``, or None: its attention and shared expert have no output gate. The one check
    both use (`executor.model.check_model_supported`, `costmodel.runtimes.torch.runtime`)."""
    gates = [
        name
        for name, present in (
            ("attention_output_gate", model.attention_output_gate),
            ("moe_shared_expert_gate", model.moe_shared_expert_gate),
        )
        if present
    ]
    if not gates:
        return None
    return (
        f"[{EXECUTOR_GATE_RULE}] model {model.name!r} sets {' and '.join(gates)}: the "
        "executor's attention and shared expert have no sigmoid output gate, and the torch "
        "runtime prices that executor: use --runtime megatron (Megatron-LM "
        "--attention-output-gate, --moe-shared-expert-gate)"
    )
