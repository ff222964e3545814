"""The scale bookkeeping of Transformer Engine's per-tensor FP8 recipes that is
communication rather than memory traffic: the amax all-reduce of per-tensor current
scaling over the tensor-parallel group, and delayed scaling's amax reduction and scale
update once per ``fp8_autocast`` region.

Per-tensor current scaling (Megatron-core ``--fp8-recipe tensorwise``, TE
``Float8CurrentScaling``) scales each GEMM operand by the amax of the operand itself. With
sequence parallelism a rank quantizes only its T/tp token rows of an operand that the
layer then all-gathers in FP8 (the column-parallel input in forward, the row-parallel
output gradient in backward), so every rank of the TP group must use the same scale: TE
sets the TP group as the quantizer's ``amax_reduction_group`` (`module/layernorm_linear.py`
and `module/linear.py`, ``set_quantizer_amax_reduction_group`` with ``tp_group if
(sequence_parallel and parallel_mode == "column")`` for the input, ``"row"`` for the output
gradient in ``_linear_backward``), and ``Float8CurrentScalingQuantizer::quantize_impl``
(`pytorch/csrc/quantizer.cpp`) all-reduces the one-element fp32 amax (``ReduceOp::MAX``)
between the amax kernel and the scale kernel, waiting for it (``->wait()``) before the
cast. The compute stream waits for a latency-bound collective, once per linear pair and
direction. Without sequence parallelism every TP rank holds the whole operand: no
reduction. MXFP8 reduces nothing. NVFP4 (``NVFP4BlockScaling``) takes its per-tensor fp32
scale from the operand's amax and sets the same amax reduction group on the same
quantizers (``NVFP4Quantizer`` with ``with_amax_reduction``), so it pays the same
all-reduces.

Delayed scaling (``--fp8-recipe delayed``, TE ``DelayedScaling``, Megatron-core's default)
casts with scales taken from an amax history and records each tensor's new amax inside the
cast. The reduction of those amaxes is not per operand but per ``fp8_autocast`` region:

- *Region.* Megatron-core enters one ``fp8_autocast`` per ``TransformerBlock.forward``,
  i.e. per microbatch and model chunk, around all its layers
  (``megatron/core/transformer/transformer_block.py``: core_v0.5.0 ``fp8_context``; HEAD
  the "outer" context, used only for the delayed recipe, `fp8_utils.get_fp8_context`), with
  ``fp8_group = get_amax_reduction_group(with_context_parallel=True)``: the TP x DP x CP
  ranks of the stage (``parallel_state._TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP``; TP x CP
  only with ``tp_only_amax_red``, default False).
- *Buffer.* Every TE module with FP8 GEMMs holds ``3 * num_gemms`` forward and
  ``2 * num_gemms`` backward fp32 amaxes (input, weight, output; output and input
  gradients: ``module/base.py`` ``set_meta_tensor``). From TE 1.6 each module adds them
  once to a global buffer keyed by (direction, recipe, group)
  (``FP8GlobalStateManager.add_fp8_tensors_to_global_buffer``, `pytorch/fp8.py`), so the
  buffer holds every module of the rank, all its model chunks.
- *Forward.* At the outermost ``fp8_autocast`` exit (``fp8_autocast_exit`` ->
  ``reduce_and_update_fp8_tensors(forward=True)``) TE concatenates the forward buffer
  (``torch.cat``), all-reduces it with ``ReduceOp::MAX`` over the group
  (``reduce_tensor_across_group_op_max``, ``async_op=False``: the compute stream waits),
  skipped when the group has one rank, and runs
  ``fused_amax_and_scale_update_after_reduction``
  (`common/recipe/delayed_scaling.cu`: one ``kernel_bulk`` launch per `AMAX_PARAMS_LIMIT`
  modules; it reads each module's amax history and rolls it, then writes the scales).
- *Backward.* The backward of the region's first module (the last backward of the chunk,
  ``ctx.reduce_and_update_bwd_fp8_tensors``, ``linear.py`` / ``layernorm_linear.py`` /
  ``grouped_linear.py``) runs ``reduce_and_update_fp8_tensors(forward=False)``: the same
  for the backward buffer.

So per microbatch and model chunk: one forward and one backward all-reduce of
4 bytes x 3 (resp. 2) x the rank's FP8 GEMMs, plus two kernels each
(`delayed_scaling_pair`). TE 1.2-1.5 (NeMo 24.03's era) reduced the same once per region
and direction, the forward one launched at the next region's entry, over the buffer of
the region's own modules, and updated scales per module; the collective is latency-bound
at these sizes either way. The recompute pass of full activation recomputation is not
priced (not checked against TE's checkpoint).

Multi-token prediction: each depth runs after the decoder, outside its region, and
``MultiTokenPredictionLayer._proj_and_transformer_layer`` (``megatron/core/transformer/
multi_token_prediction.py``, d98e8a64) enters ``get_fp8_context(config)`` twice, around
``_concat_embeddings`` (whose one FP8 module is ``eh_proj``, a TE ``Linear``) and around the
depth's layers: two regions of their own per depth and microbatch, each reducing the
whole buffer on exit and in the backward of its first module (``eh_proj``, then the
layers' first linear). Where the depth is checkpointed (full ``uniform`` recompute,
`specs.plan.ParallelPlan.checkpoints_mtp_depths`) ``_checkpointed_forward`` enters one
outer context around the checkpoint for the delayed recipe, inside which the two are
nested: one region per depth (`mtp_fp8_regions`); ``block`` runs the depth without it.
The buffer holds each held MTP weight set's ``eh_proj`` beside its layers' modules
(`stage_fp8_modules`).

The memory passes of each recipe's quantization: `costmodel.fp8_quantization.fp8_quantize_time_s`.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel.collectives import collective_time_s
from costmodel.compute import memory_bound_time_s
from costmodel.memory_allowances import QuantRecipe
from costmodel.passes import ZERO, ChunkCost, PassCost
from costmodel.schedules import ChunkPosition
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.params import count_params

AMAX_BYTES = 4
"""Bytes of the amax one current-scaling quantizer all-reduces: one fp32 element."""


def amax_reduction_pair(
    profile: HardwareProfile,
    *,
    recipe: QuantRecipe,
    sequence_parallel: bool,
    tp_group: GroupPlacement,
    row_parallel: bool,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) TP amax all-reduces of one column-parallel / row-parallel linear
    pair of an FP8 layer (module docstring), all exposed.

    Forward: one, for the column-parallel input (``LayerNormLinear``'s norm output, or the
    MLA down projection's input). Backward: one, for the row-parallel output gradient,
    when the pair has a row-parallel GEMM of its own (``row_parallel``). Zero unless
    ``recipe`` is ``tensorwise`` or ``nvfp4`` and ``sequence_parallel`` holds over a TP
    group of 2 or more ranks. Each is an ``all_reduce`` of `AMAX_BYTES`
    (`costmodel.collectives`)."""
    if recipe not in ("tensorwise", "nvfp4") or not sequence_parallel or tp_group.size < 2:
        return ZERO, ZERO
    one = collective_time_s(profile, "all_reduce", AMAX_BYTES, tp_group)
    forward = PassCost(tp_s=one, tp_exposed_s=one, tp_bytes=AMAX_BYTES)
    return forward, forward if row_parallel else ZERO


FORWARD_AMAXES_PER_GEMM = 3
"""Forward amaxes of one FP8 GEMM under delayed scaling: input, weight, output (TE
``module/base.py`` ``set_meta_tensor``)."""
BACKWARD_AMAXES_PER_GEMM = 2
"""Backward amaxes of one FP8 GEMM: output gradient, input gradient."""
AMAX_HISTORY_LEN = 1024
"""Rows of each amax history the scale update reads and rolls: NeMo's FP8 recipes
(``fp8_amax_history_len: 1024`` in ``megatron_gpt_config.yaml`` / ``megatron_llama_config
.yaml``, v1.23.0; ``bf16_with_fp8_mixed`` in ``nemo/collections/llm/recipes/precision/
mixed_precision.py``), which every delayed-scaling row and recipe priced here runs;
Megatron-LM's own ``--fp8-amax-history-len`` default is 1."""
AMAX_PARAMS_LIMIT = (32768 - 24) // 24
"""Modules one ``kernel_bulk`` launch of the scale update takes: 32 KiB of kernel
parameters less the 24-byte ``OtherParams``, 24 bytes per ``AmaxParam``
(TE v2.8 `common/recipe/delayed_scaling.cu`, CUDA >= 12.1)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fp8Modules:
    """Transformer Engine modules with FP8 GEMMs, and their GEMMs, on some layers."""

    modules: int
    """TE linear modules (a grouped linear counts once)."""
    gemms: int
    """FP8 GEMMs of those modules (a grouped linear has one per local expert)."""

    def plus(self, other: Fp8Modules) -> Fp8Modules:
        """Both counts summed."""
        return Fp8Modules(modules=self.modules + other.modules, gemms=self.gemms + other.gemms)


NO_MODULES = Fp8Modules(modules=0, gemms=0)
"""No FP8 module: the sum over no layers."""
EH_PROJ_MODULES = Fp8Modules(modules=1, gemms=1)
"""An MTP depth's ``eh_proj``: one TE ``Linear`` with one GEMM."""


def layer_fp8_modules(model: ModelSpec, *, kind: LayerKind, ep: int) -> Fp8Modules:
    """FP8 modules of one decoder layer of ``kind`` under Megatron-core's Transformer
    Engine spec.

    Attention: ``linear_qkv`` and ``linear_proj`` (2); multi-latent attention
    (`megatron/core/transformer/multi_latent_attention.py`): ``linear_q_proj`` or
    ``linear_q_down_proj`` + ``linear_q_up_proj`` (with ``q_lora_rank``), then
    ``linear_kv_down_proj``, ``linear_kv_up_proj`` and ``linear_proj``. Mamba-2 mixer
    (`megatron/core/ssm/mamba_mixer.py`) and gated DeltaNet (`gated_delta_net/common.py`):
    ``in_proj`` and ``out_proj`` (2). Dense MLP:
    ``linear_fc1``, ``linear_fc2``. MoE layer: the routed experts as two TE grouped
    linears (``TEGroupedMLP``) with one GEMM per local expert (num_experts / ep each), the
    shared experts' two linears where present, a latent MoE layer's two ``TELinear``
    projections (``fc1_latent_proj``, ``fc2_latent_proj``); the router computes in
    bf16/fp32, outside FP8."""
    mla = 5 if model.q_lora_rank is not None else 4
    mixer = {"attention": mla if model.uses_mla else 2, "mamba": 2, "gdn": 2, "none": 0}[kind.mixer]
    if kind.mlp == "none":
        return Fp8Modules(modules=mixer, gemms=mixer)
    if not kind.is_moe:
        return Fp8Modules(modules=mixer + 2, gemms=mixer + 2)
    local = max(model.num_experts // max(ep, 1), 1)
    shared = 2 if model.moe_shared_expert_size > 0 else 0
    shared += 2 if model.moe_latent_size is not None else 0  # the two latent projections
    return Fp8Modules(modules=mixer + 2 + shared, gemms=mixer + 2 * local + shared)


def stage_fp8_modules(model: ModelSpec, chunks: tuple[ChunkPosition, ...], ep: int) -> Fp8Modules:
    """FP8 modules of every chunk of one stage (the rank's delayed-scaling buffer): their
    decoder layers and the layers and ``eh_proj`` of their multi-token-prediction depths
    (`ModelSpec.mtp_depth_kinds`), once per set of MTP weights the rank holds
    (`specs.params.ParamCounts.mtp_weights`: repeated weights are one set of modules). The
    output layer is Megatron's own ``ColumnParallelLinear``, outside FP8."""
    kinds = model.layer_kinds()
    depth_kinds = model.mtp_depth_kinds()
    counts = count_params(model)
    total = NO_MODULES
    for at in chunks:
        for i in at.layers:
            total = total.plus(layer_fp8_modules(model, kind=kinds[i], ep=ep))
        for _ in counts.mtp_weights(at.mtp_layers):
            total = total.plus(EH_PROJ_MODULES)
            for kind in depth_kinds:
                total = total.plus(layer_fp8_modules(model, kind=kind, ep=ep))
    return total


def mtp_fp8_regions(*, checkpointed: bool) -> int:
    """``fp8_autocast`` regions of one MTP depth per microbatch: two, the concatenation's
    and the layers'; one when the depth is ``checkpointed``, whose outer context nests them
    (module docstring)."""
    return 1 if checkpointed else 2


def delayed_scaling_pair(
    profile: HardwareProfile, fp8: Fp8Modules, group: GroupPlacement
) -> tuple[PassCost, PassCost]:
    """(forward, backward) delayed-scaling bookkeeping of one ``fp8_autocast`` region (one
    microbatch of one model chunk) on a rank whose buffer holds ``fp8`` (module docstring).

    Each direction: an ``all_reduce`` of 4 bytes x `FORWARD_AMAXES_PER_GEMM` (resp.
    `BACKWARD_AMAXES_PER_GEMM`) x ``fp8.gemms`` over ``group`` (TP x DP x CP), all exposed,
    booked as TP communication; none for a group of one rank. Kernels: the ``torch.cat`` of
    the buffer (read and write) and ``ceil(modules / AMAX_PARAMS_LIMIT)`` scale-update
    launches that read and write every `AMAX_HISTORY_LEN`-row history and write the
    scales (`costmodel.compute.memory_bound_time_s`)."""
    if fp8.gemms == 0:
        return ZERO, ZERO

    def one(per_gemm: int) -> PassCost:
        amaxes = per_gemm * fp8.gemms
        size = AMAX_BYTES * amaxes
        launches = 1 + math.ceil(fp8.modules / AMAX_PARAMS_LIMIT)
        moved = AMAX_BYTES * amaxes * (2 + 2 * AMAX_HISTORY_LEN + 1)
        kernels = PassCost(compute_s=memory_bound_time_s(profile, moved, num_ops=launches))
        if group.size < 2:
            return kernels
        reduce_s = collective_time_s(profile, "all_reduce", size, group)
        return kernels.plus(PassCost(tp_s=reduce_s, tp_exposed_s=reduce_s, tp_bytes=size))

    return one(FORWARD_AMAXES_PER_GEMM), one(BACKWARD_AMAXES_PER_GEMM)


def with_delayed_scaling(
    row: tuple[ChunkCost, ...],
    chunks: tuple[ChunkPosition, ...],
    model: ModelSpec,
    profile: HardwareProfile,
    *,
    ep: int,
    group: GroupPlacement,
    mtp_checkpointed: bool = False,
) -> tuple[ChunkCost, ...]:
    """``row`` (one stage's chunk costs, in chunk order) with `delayed_scaling_pair` of the
    stage's buffer (`stage_fp8_modules` of its ``chunks``, the stage's
    `costmodel.schedules.plan_pipeline_chunks` row) added to every chunk's forward and
    backward, once for the chunk's region and once per region of each MTP depth it runs
    (`mtp_fp8_regions`, ``mtp_checkpointed``: the plan's
    `specs.plan.ParallelPlan.checkpoints_mtp_depths`); ``group`` is the TP
    x DP x CP placement (`costmodel.passes.CommGroups.tp_dp_cp`). The caller passes only
    fp8 jobs under the ``delayed`` recipe."""
    forward, backward = delayed_scaling_pair(profile, stage_fp8_modules(model, chunks, ep), group)
    per_depth = mtp_fp8_regions(checkpointed=mtp_checkpointed)
    out = []
    for cost, at in zip(row, chunks, strict=True):
        regions = 1 + per_depth * at.mtp_layers
        fwd, bwd = cost.forward, cost.backward
        for _ in range(regions):
            fwd, bwd = fwd.plus(forward), bwd.plus(backward)
        out.append(dataclasses.replace(cost, forward=fwd, backward=bwd))
    return tuple(out)
