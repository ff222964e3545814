"""Where a latent MoE model (``ModelSpec.moe_latent_size``) is refused: paraplan's executor
builds no latent projections (`executor_latent_moe_refusal`, shared by the executor and the
``torch`` runtime that prices it). The torchtitan export's refusal lives with that export
(`planner.export_torchtitan_model.torchtitan_model`)."""

from __future__ import annotations

from typing import Protocol


class LatentFields(Protocol):
    """The `specs.model.ModelSpec` fields these checks read."""

    @property
    def name(self) -> str: ...
    @property
    def moe_latent_size(self) -> int | None: ...


EXECUTOR_LATENT_MOE_RULE = "latent_moe_not_in_executor"
"""Rule id of `executor_latent_moe_refusal`."""


def executor_latent_moe_refusal(model: LatentFields) -> str | None:
    """Why paraplan's executor (and the ``torch`` runtime, which prices it) cannot run
    ``model``, or None without ``moe_latent_size``: its MoE layer moves and multiplies
    h-wide rows and has no h -> ℓ -> h projections (Megatron-LM ``MoELayer``
    ``fc1_latent_proj`` / ``fc2_latent_proj``)."""
    if model.moe_latent_size is None:
        return None
    return (
        f"[{EXECUTOR_LATENT_MOE_RULE}] model {model.name!r} is a latent MoE model "
        f"(moe_latent_size {model.moe_latent_size}): the executor's MoE layer has no latent "
        "projections, and the torch runtime prices that executor: use --runtime megatron "
        "(the plan runs with Megatron-LM's --moe-latent-size)"
    )
