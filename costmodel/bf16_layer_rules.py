"""The rules Megatron-core and paraplan apply to the decoder layers an FP8 or NVFP4 job keeps
in bf16 (`costmodel.execution.ExecutionOptions.first_last_layers_bf16`,
``num_layers_at_start_in_bf16``, ``num_layers_at_end_in_bf16``; which layers they are and
how they are priced: `costmodel.bf16_layers`): the field rules the options'
``__post_init__`` applies (`check_bf16_layer_fields`, through
`costmodel.execution_rules.check_options`), the rules of the model, the job and the recipe
(`check_bf16_layers`), and the per-stage bound on an fp8 job's count
(`bf16_layer_violations`). The options are read through a protocol, so that this module,
which `costmodel.execution_rules` imports, does not import `costmodel.execution` back.

Source: Megatron-core ``TransformerConfig.first_last_layers_bf16``,
``num_layers_at_start_in_bf16`` and ``num_layers_at_end_in_bf16`` (defaults False, 1, 1;
``megatron/core/transformer/transformer_config.py``), read by
``megatron/core/fp8_utils.py`` ``is_first_last_bf16_layer`` and
``megatron/core/fp4_utils.py`` ``get_fp4_context``.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import Violation

BF16_LAYERS_RULE = "bf16_layers_need_low_precision"
"""Rule id of `check_bf16_layers`: the job, the recipe or the model cannot take them."""
BF16_LAYERS_STAGE_RULE = "bf16_layers_per_stage"
"""Rule id of `bf16_layer_violations`: an FP8 job's count above the layers per stage."""
PpDegree = TypeVar("PpDegree")
"""A pipeline degree: an int, or a numpy array of them in the closed-form screen."""
LOW_PRECISIONS = ("fp8", "nvfp4")
"""Job precisions whose layers can be kept in bf16."""
BF16_LAYERS_FIELD_RULE = "bf16_layers_fields"
"""Rule id of `check_bf16_layer_fields`."""


class Bf16LayerOptions(Protocol):
    """The `costmodel.execution.ExecutionOptions` fields these rules read."""

    @property
    def first_last_layers_bf16(self) -> bool: ...
    @property
    def num_layers_at_start_in_bf16(self) -> int: ...
    @property
    def num_layers_at_end_in_bf16(self) -> int: ...
    @property
    def fp8_recipe(self) -> str: ...


def bf16_layer_counts(options: Bf16LayerOptions) -> tuple[int, int]:
    """(first, last) decoder layers kept in bf16: Megatron-core's
    ``num_layers_at_start_in_bf16`` and ``num_layers_at_end_in_bf16`` under
    ``first_last_layers_bf16``, else (0, 0) (``is_first_last_bf16_layer``)."""
    if not options.first_last_layers_bf16:
        return 0, 0
    return options.num_layers_at_start_in_bf16, options.num_layers_at_end_in_bf16


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
            "executor) runs every layer in the job's precision: use runtime='megatron', or drop "
            "first_last_layers_bf16"
        )


def check_bf16_layers(model: ModelSpec, job: TrainingJob, options: Bf16LayerOptions) -> None:
    """`SpecError` [`BF16_LAYERS_RULE`] for ``first_last_layers_bf16`` in a job that is not fp8
    or nvfp4 (nothing is quantized to keep in bf16), under the ``delayed`` FP8 recipe
    (Megatron-core ``TransformerConfig.__post_init__``: "Delayed scaling does not support
    first / last layer in BF16"), and with more bf16 layers than the model's decoder
    layers."""
    if not options.first_last_layers_bf16:
        return
    start, end = bf16_layer_counts(options)
    fix = "or drop --first-last-layers-bf16"
    if job.precision not in LOW_PRECISIONS:
        raise SpecError(
            f"[{BF16_LAYERS_RULE}] first_last_layers_bf16 keeps layers of an fp8 or nvfp4 job "
            f"in bf16, and the job is {job.precision}: use --precision fp8 or nvfp4, {fix}"
        )
    if job.precision == "fp8" and options.fp8_recipe == "delayed":
        raise SpecError(
            f"[{BF16_LAYERS_RULE}] Megatron-core refuses first_last_layers_bf16 with the "
            "delayed FP8 recipe (its amax reduction spans the whole fp8_autocast region): use "
            f"--fp8-recipe tensorwise or mxfp8, {fix}"
        )
    if start + end > model.num_layers:
        raise SpecError(
            f"[{BF16_LAYERS_RULE}] num_layers_at_start_in_bf16 ({start}) + "
            f"num_layers_at_end_in_bf16 ({end}) = {start + end} exceeds the model's "
            f"{model.num_layers} decoder layers: lower them to a sum of at most "
            f"{model.num_layers}, {fix}"
        )


def stage_limit(model: ModelSpec, job: TrainingJob, pp: PpDegree) -> PpDegree | None:
    """The most bf16 layers at either end Megatron-core takes for an fp8 job over ``pp``
    stages (an int, or a numpy array of them in the screen), ``num_layers // pp``
    (``TransformerConfig.__post_init__`` under ``fp8``); None for another job, which it
    does not check."""
    return model.num_layers // pp if job.precision == "fp8" else None  # type: ignore[operator]


def bf16_layer_violations(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, options: Bf16LayerOptions
) -> list[Violation]:
    """Megatron-core's per-stage bound on an fp8 job's bf16 layers (`stage_limit`), as a plan
    violation that `paraplan estimate` reports before pricing and the screen marks
    unrunnable."""
    start, end = bf16_layer_counts(options)
    limit = stage_limit(model, job, plan.pp)
    if limit is None or max(start, end) <= limit:
        return []
    return [
        Violation(
            rule=BF16_LAYERS_STAGE_RULE,
            message=f"an fp8 job keeps at most num_layers // pp = {model.num_layers} // "
            f"{plan.pp} = {limit} layers in bf16 at either end (Megatron-core "
            f"TransformerConfig), got num_layers_at_start_in_bf16 ({start}) and "
            f"num_layers_at_end_in_bf16 ({end}): lower them to {limit} or use a smaller pp",
        )
    ]
