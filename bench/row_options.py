"""A published row's execution options: its software era and what its recipe sets.

The execution options are those of the row's software era (`row_era`, `bench/row_era.py`):
dated from the stack versions, arXiv identifier or year the row states, `MEGATRON_2021`
before FlashAttention reached Megatron-LM (2023-01), FlashAttention-2-class attention before
Transformer Engine v1.11 brought FlashAttention-3 (2024-10), Megatron-LM's current defaults
after it or without a date; Megatron-Bridge rows, NeMo 2.0 rules and `MEGATRON_2023_STACKS`
are more specific and come first, and `ERA_BY_SOURCE` names the sources whose text does not
date their stack. On top of the era, `options_for_row` applies what the row's recipe sets
(CUDA graphs, MoE dispatcher, userbuffers, allocator, FP8 weights, gradient and optimizer
precision, norm backend), each from the recipe module that cites it (Nemotron 3 Nano and
Nemotron-H: `hybrid_recipes`).
"""

from __future__ import annotations

import dataclasses

from gpt_oss_recipes import gpt_oss_runtime_fields
from hybrid_recipes import hybrid_runtime_fields
from moe_recipes import moe_runtime_fields
from nemo_options import nemo_option_fields
from norm_recipes import norm_backend_fields
from overlap_recipes import userbuffers_fields
from precision_recipes import (
    bf16_layer_fields,
    fp4_weight_fields,
    fp8_weight_fields,
    grad_sync_fields,
    nvfp4_cast_fields,
    optimizer_precision_fields,
)
from row_columns import column_text
from row_era import Era, RowDate, era_for, era_options, row_date
from row_recipes import expandable_segments
from zero3_recipes import zero3_options

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2023
from specs.plan import ParallelPlan

ERA_BY_SOURCE: tuple[tuple[str, Era], ...] = (("BLOOM-", "megatron_2021"), ("LLAMA3-", "current"))
"""``source_id`` prefix -> era (`bench/row_era.py`), for the sources whose own text does not
date their stack:
- BLOOM-176B prints no date (its ``source``, ``source_locator`` and ``source_version`` name
  repository paths only; its notes, a Megatron-DeepSpeed fork): the 2021 options it has
  always been priced with;
- Llama 3 (arXiv 2407.21783, 2024-07) ran Meta's own stack (the rows' notes: NCCLX
  collectives, all-gather context parallelism), not a Megatron-LM, NeMo or Transformer
  Engine release, whose dates the FlashAttention thresholds are: it keeps the current
  defaults it was validated with. Its date would select FlashAttention-2-class attention,
  which moves its unstated-vpp errors (`bench/unstated_vpp.py`) by +1 to +23 points.
Every other row's era is its date's (`row_era`)."""

MEGATRON_BRIDGE_PERF = dataclasses.replace(
    DEFAULT_OPTIONS, main_grad_bytes=2, cross_entropy_fusion="te"
)
"""Megatron-Bridge's performance scripts (NVIDIA-NeMo/Megatron-Bridge
``scripts/performance/utils/helpers.py``, ``set_basic_perf_overrides``) set
``mixed_precision.grad_reduce_in_fp32 = False`` and ``ddp.grad_reduce_in_fp32 = False``:
bf16 main gradients and bf16 gradient reduction (2 bytes per element). Applied to every
MBRIDGE release; releases whose helper predates the override ran fp32 gradients. The loss
runs Transformer Engine's fused cross entropy (`ExecutionOptions.cross_entropy_fusion`
``te``) in every release: ``GPTProvider.cross_entropy_loss_fusion = True``
(``src/megatron/bridge/models/gpt_provider.py``) with ``cross_entropy_fusion_impl: "te"``
in the 25.09 performance configs (tag v0.1.0rc4, ``scripts/performance/configs/*/
*_llm_pretrain.yaml``) and in the common performance overrides from 25.11 on
(``utils/helpers.py`` at v0.2.x, ``utils/overrides.py`` ``_set_common_perf_overrides``
from v0.3.0); the containers of those releases ship Transformer Engine before v2.18
(v0.2.0 pins ``>=2.9.0a0,<2.10.0``, v0.3.0 ``<2.13.0``; v2.18 was tagged after v0.5.0,
the 26.06 release)."""


MEGATRON_2023_STACKS = ("Megatron-LM commit 285068c8",)
"""``source_version`` markers of Megatron-LM of early 2023 (`MEGATRON_2023` options; no
`--overlap-grad-reduce` yet, so the gradient all-reduce follows the pipeline)."""


TE1_DEFAULT_UB_STACKS = ("Megatron-Core r0.8.0",)
"""``source_version`` markers of Megatron-LM stacks that overlap TP communication with
Transformer Engine 1.x's default userbuffers configuration: Megatron-LM r0.8.0 passes
``ub_cfgs = {}`` to ``initialize_ub`` without ``--tp-comm-overlap-cfg``
(``megatron/training/initialize.py``, ``_initialize_tp_communicators``), and TE before
v2.0 (2025-02) then registers every method with ``set_sm_margin`` 0 (``add_ub`` default,
``transformer_engine/pytorch/module/base.py`` v1.7 to v1.13): the ``bulk`` and
``pipeline`` GEMMs keep every SM (`PRE_TE2_USERBUFFERS`). NeMo stacks pass their own
userbuffers configurations and are not listed."""

PRE_TE2_USERBUFFERS = {"tp_overlap_bulk_sm_margin": False, "tp_overlap_pipeline_sm_margin": False}
"""`ExecutionOptions` userbuffers fields of `TE1_DEFAULT_UB_STACKS`."""


def options_for_row(raw: dict[str, str], plan: ParallelPlan | None = None) -> ExecutionOptions:
    """`MEGATRON_BRIDGE_PERF` for Megatron-Bridge rows, `MEGATRON_2023` for
    `MEGATRON_2023_STACKS`, `DEEPSPEED_ZERO3_2021` for DeepSpeed ZeRO-3 rows
    (`zero3_recipes.zero3_options`), otherwise the options of the row's era (`row_era`:
    `MEGATRON_2021` before FlashAttention, FlashAttention-2-class attention before
    FlashAttention-3, Megatron-LM's current defaults after it or without a date); plus the
    CUDA graph scopes and MoE dispatcher of the row's recipe (`moe_recipes`,
    `gpt_oss_recipes`, `hybrid_recipes`), for a
    ``plan`` with TP overlap, the recipe's userbuffers methods (`userbuffers_fields`; TE
    1.x's defaults on `TE1_DEFAULT_UB_STACKS`, `PRE_TE2_USERBUFFERS`), its
    allocator's expandable segments (`row_recipes.expandable_segments`), FP8 and NVFP4
    weights (`precision_recipes.fp8_weight_fields`, `precision_recipes.fp4_weight_fields`),
    the NVFP4 cast kernels of the row's Transformer Engine
    (`precision_recipes.nvfp4_cast_fields`),
    the layers kept in bf16 (`precision_recipes.bf16_layer_fields`),
    gradient-reduction element size (`precision_recipes.grad_sync_fields`), Adam state dtypes
    (`precision_recipes.optimizer_precision_fields`) and norm backend
    (`norm_recipes.norm_backend_fields`). Whether FP8 GEMMs take only the TN layout is the
    device's (``fp8_tn_gemm_only`` None: `costmodel.execution_presets.device_options` resolves it
    from the row's profile, as for every `estimate_plan` caller)."""
    options = _era_options(raw)
    fields = moe_runtime_fields(raw) | gpt_oss_runtime_fields(raw) | hybrid_runtime_fields(raw)
    if plan is not None:
        fields = {**fields, **userbuffers_fields(raw, plan.tp_comm_overlap)}
        if plan.tp_comm_overlap and _te1_default_userbuffers(raw):
            fields = {**fields, **PRE_TE2_USERBUFFERS}
    if expandable_segments(raw):
        fields["expandable_segments"] = True
    fields.update(fp8_weight_fields(raw))
    fields.update(fp4_weight_fields(raw))
    fields.update(nvfp4_cast_fields(raw))
    fields.update(bf16_layer_fields(raw))
    fields.update(grad_sync_fields(raw))
    fields.update(optimizer_precision_fields(raw))
    fields.update(nemo_option_fields(raw, plan is not None and plan.tp_comm_overlap))
    fields.update(norm_backend_fields(raw))
    return dataclasses.replace(options, **fields) if fields else options


def _te1_default_userbuffers(raw: dict[str, str]) -> bool:
    return any(m in column_text(raw, "source_version") for m in TE1_DEFAULT_UB_STACKS)


def row_era(raw: dict[str, str]) -> tuple[Era, RowDate | None]:
    """The row's era and the date it follows from: `ERA_BY_SOURCE` for the sources listed
    there (no date), else `row_era.era_for` of `row_era.row_date`."""
    source = column_text(raw, "source_id")
    for prefix, era in ERA_BY_SOURCE:
        if source.startswith(prefix):
            return era, None
    date = row_date(raw)
    return era_for(date), date


def _era_options(raw: dict[str, str]) -> ExecutionOptions:
    zero3 = zero3_options(raw)
    if zero3 is not None:
        return zero3
    if column_text(raw, "source_id").startswith("MBRIDGE-"):
        return MEGATRON_BRIDGE_PERF
    if any(m in column_text(raw, "source_version") for m in MEGATRON_2023_STACKS):
        return MEGATRON_2023
    return era_options(*row_era(raw))
