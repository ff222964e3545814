"""The field rules of the layers an FP8 or NVFP4 job keeps in bf16
(`costmodel.execution.ExecutionOptions.first_last_layers_bf16`,
``num_layers_at_start_in_bf16``, ``num_layers_at_end_in_bf16``), applied by the options'
``__post_init__`` (`costmodel.execution_rules.check_options`), and the job such a layer
computes (`bf16_layer_job`, which `costmodel.activations` reads without the options). The
rules that need the model, the job or the plan are `costmodel.bf16_layers`'s.

Source: Megatron-core ``TransformerConfig.first_last_layers_bf16``,
``num_layers_at_start_in_bf16`` and ``num_layers_at_end_in_bf16`` (defaults False, 1, 1;
``megatron/core/transformer/transformer_config.py``), read by
``megatron/core/fp8_utils.py`` ``is_first_last_bf16_layer`` and
``megatron/core/fp4_utils.py`` ``get_fp4_context``.
"""

from __future__ import annotations

import dataclasses

from specs.errors import SpecError
from specs.job import TrainingJob

BF16_LAYERS_FIELD_RULE = "bf16_layers_fields"
"""Rule id of `check_bf16_layer_fields`."""


def bf16_layer_job(job: TrainingJob) -> TrainingJob:
    """``job`` as a layer kept in bf16 computes it: precision bf16, the rest unchanged."""
    return dataclasses.replace(job, precision="bf16")


def check_bf16_layer_fields(
    *, first_last_layers_bf16: bool, start: int, end: int, runtime: str
) -> None:
    """`SpecError` [`BF16_LAYERS_FIELD_RULE`] for a negative count of bf16 layers (Megatron-core
    ``TransformerConfig.__post_init__`` refuses one below 0), and for bf16 layers under a
    runtime other than ``megatron``: paraplan's executor runs every layer in the job's
    precision, as `costmodel.runtimes.torch` prices it."""
    for name, count in (
        ("num_layers_at_start_in_bf16", start),
        ("num_layers_at_end_in_bf16", end),
    ):
        if count < 0:
            raise SpecError(
                f"[{BF16_LAYERS_FIELD_RULE}] {name} counts decoder layers kept in bf16, got "
                f"{count}: use 0 or more"
            )
    if first_last_layers_bf16 and runtime != "megatron":
        raise SpecError(
            f"[{BF16_LAYERS_FIELD_RULE}] first_last_layers_bf16 keeps layers of an FP8 or "
            f"NVFP4 job in bf16 under Megatron-core, and the {runtime} runtime (paraplan's "
            "executor) runs every layer in the job's precision: use runtime megatron, or drop "
            "first_last_layers_bf16"
        )
