"""Decoder layers an FP8 or NVFP4 job keeps in bf16 (`ExecutionOptions.first_last_layers_bf16`):
which they are, the job and options they are priced with, their linear weights and the
screen's kind tags. The rules Megatron-core and paraplan apply to them are
`costmodel.bf16_layer_rules`'s.

Megatron-core decides per decoder layer from its global index ``layer_no`` (0-based, over
the whole model: ``TransformerBlock`` passes ``global_layer_number - 1`` and the hybrid block
``i + pp_layer_offset``, so pipeline stages, virtual stages and uneven splits do not change
which layers they are): a layer is bf16 when ``layer_no < num_layers_at_start_in_bf16`` or
``layer_no >= num_layers - num_layers_at_end_in_bf16`` (``megatron/core/fp8_utils.py``
``is_first_last_bf16_layer``; the same test in ``megatron/core/fp4_utils.py``
``get_fp4_context``). Such a layer gets a ``nullcontext`` in place of Transformer Engine's
``fp8_autocast`` for its forward and for its construction (``is_init=True``: no
``fp8_model_init``), so:

- its linear GEMMs run on the bf16 curve (with the sustained 16-bit factor,
  `costmodel.execution_presets.framework_profile`), with no quantization kernels, no
  current-scaling amax reductions and no FP8/NVFP4 host launches of its MoE experts, and its
  attention is a bf16 job's (FP8 attention is a property of the autocast it leaves):
  `bf16_layer_job`, `bf16_layer_options`, priced by the
  Megatron runtime per layer (`costmodel.runtimes.megatron.pricing.chunk_costs`, the
  screen's upper-case kind tags);
- it saves its activations as a bf16 job does (`costmodel.activations.stage_activations`);
- its linear weights are bf16 parameters with no cached FP8/NVFP4 copy or transpose, and the
  distributed optimizer's all-gather moves them in bf16 (`bf16_linear_params`, subtracted
  from `costmodel.rank_params.StageParams.linear` where `Fp8WeightStorage` prices it).

Not priced: Adam's state of the precision-aware optimizer with fp32 master weights, which
keeps 16-bit remainders for bf16 parameters (`costmodel.optimizer_state.adam_state_bytes`),
is the job's for every parameter; Megatron-FSDP's whole layers held beside the shard
(`costmodel.runtimes.megatron.megatron_fsdp.largest_layer_weight_bytes`) keep the job's
linear-weight size; the MTP depths run in the job's precision
(``multi_token_prediction.py`` enters ``get_fp8_context(config)`` with no layer number).
"""

from __future__ import annotations

import dataclasses

from costmodel.bf16_layer_rules import LOW_PRECISIONS, bf16_layer_counts, check_bf16_layers
from costmodel.execution import ExecutionOptions
from costmodel.rank_params import StageParams, chunk_params
from specs.job import TrainingJob
from specs.layer_kinds import KIND_TAGS
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def bf16_tag(tag: str) -> str:
    """The screen's column tag of a layer kind kept in bf16: its `LayerKind.tag` upper-cased
    (``d`` -> ``D``)."""
    return tag.upper()


PRICED_TAGS: tuple[str, ...] = KIND_TAGS + tuple(bf16_tag(tag) for tag in KIND_TAGS)
"""Every kind tag the screen's per-kind columns may carry: `KIND_TAGS`, then their
`bf16_tag`."""


def bf16_layers(model: ModelSpec, job: TrainingJob, options: ExecutionOptions) -> frozenset[int]:
    """Global indices (0-based, `ModelSpec.layer_kinds` order) of the decoder layers kept in
    bf16 (module docstring); empty for a job that is not fp8 or nvfp4, where nothing is
    quantized. `SpecError` from `costmodel.bf16_layer_rules.check_bf16_layers` for settings
    the job, its recipe or the model cannot take."""
    check_bf16_layers(model, job, options)
    start, end = bf16_layer_counts(options)
    if job.precision not in LOW_PRECISIONS or not start + end:
        return frozenset()
    n = model.num_layers
    return frozenset(i for i in range(n) if i < start or i >= n - end)


def bf16_layer_job(job: TrainingJob) -> TrainingJob:
    """``job`` as a layer kept in bf16 computes it: precision bf16, the rest unchanged."""
    return dataclasses.replace(job, precision="bf16")


def bf16_layer_options(options: ExecutionOptions) -> ExecutionOptions:
    """``options`` as a bf16 layer runs them: no FP8 attention (Megatron-core's
    ``fp8_dot_product_attention`` acts inside the layer's ``fp8_autocast``, which a bf16
    layer does not enter)."""
    if not options.fp8_attention:
        return options
    return dataclasses.replace(options, fp8_attention=False)


def bf16_linear_params(
    model: ModelSpec, plan: ParallelPlan, layers: tuple[int, ...], bf16: frozenset[int]
) -> StageParams:
    """Parameters one rank holds of the bf16 layers among ``layers``
    (`costmodel.rank_params.chunk_params`): their ``linear`` are the linear weights kept as
    bf16 parameters, their ``expert`` the routed experts among them."""
    return chunk_params(model, plan, [i for i in layers if i in bf16], first=False, last=False)


def without_bf16_linear(params: StageParams, bf16: StageParams) -> StageParams:
    """``params`` with the linear weights of its bf16 layers (``bf16``, `bf16_linear_params`)
    taken out of ``linear``, the weights `Fp8WeightStorage` stores in FP8 or NVFP4: they
    count as the job's other 16-bit weights."""
    return dataclasses.replace(params, linear=params.linear - bf16.linear)
