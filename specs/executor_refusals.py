"""The model features paraplan's executor does not build, in one place for the executor
(`executor.model.check_model_supported`) and the torch runtime that prices it
(`costmodel.runtimes.torch.runtime`)."""

from __future__ import annotations

from specs.block_checks import executor_block_refusal
from specs.dsa_checks import executor_dsa_refusal
from specs.gdn_checks import executor_gate_refusal
from specs.hybrid_checks import executor_hybrid_refusal
from specs.latent_checks import executor_latent_moe_refusal
from specs.model import ModelSpec


def executor_model_refusal(model: ModelSpec) -> str | None:
    """The first refusal of a model the executor does not build: a hybrid model
    (`specs.hybrid_checks.executor_hybrid_refusal`), a latent MoE model
    (`specs.latent_checks.executor_latent_moe_refusal`), an output gate
    (`specs.gdn_checks.executor_gate_refusal`), DeepSeek sparse attention
    (`specs.dsa_checks.executor_dsa_refusal`), a parallel attention+MLP block
    (`specs.block_checks.executor_block_refusal`); None when it builds every one."""
    for refuse in (
        executor_hybrid_refusal,
        executor_latent_moe_refusal,
        executor_gate_refusal,
        executor_dsa_refusal,
        executor_block_refusal,
    ):
        refusal = refuse(model)
        if refusal is not None:
            return refusal
    return None
