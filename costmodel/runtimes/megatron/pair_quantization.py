"""FP8 and NVFP4 quantization of one column-parallel / row-parallel linear pair of a layer
on one rank, for one microbatch (`fp8_pair_s`), and the pair's TP amax reduction
(`fp8_amax_pair`): which operands Transformer Engine casts, on how many rows, into which
copies, by recipe, sequence parallelism, LoRA (a frozen pair, a returned norm output), the
userbuffers overlap and the attention projection's saved 16-bit input. The TP collectives
of the pair are in `costmodel.runtimes.megatron.linear_pairs`.
"""

from __future__ import annotations

from costmodel.compute import LOW_PRECISION_GEMM_DTYPES
from costmodel.fp8_quantization import (
    NormQuantization,
    fp8_gather_transpose_time_s,
    fp8_quantize_time_s,
    norm_quantization,
    nvfp4_gather_fixup_time_s,
    operand_recipe,
)
from costmodel.memory_allowances import Fp8Recipe
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.fp8_scaling import amax_reduction_pair
from costmodel.runtimes.megatron.layer_shape import LayerShape, layer_shape
from costmodel.runtimes.megatron.requant_costs import saved_input_requant_s
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.plan import ParallelPlan


def fp8_pair_quantize_s(
    profile: HardwareProfile,
    job: TrainingJob,
    plan: ParallelPlan,
    h: int,
    column_out: float,
    row_in: float,
    *,
    recipe: Fp8Recipe,
    cudnn_norm: bool = False,
) -> tuple[float, float]:
    """FP8 quantization of one column-parallel / row-parallel linear pair (QKV and output
    projection, or FC1 and FC2) under Transformer Engine's ``recipe`` (forward, backward),
    in seconds; 0 unless the job runs fp8 or nvfp4 GEMMs (an nvfp4 job quantizes under
    ``nvfp4`` whatever ``recipe`` says: `costmodel.fp8_quantization.operand_recipe`).

    Forward quantizes the column-parallel input where the norm of the ``LayerNormLinear``
    writes it (with sequence parallelism on T/tp tokens, before the fp8 all-gather), on the
    path `costmodel.fp8_quantization.norm_quantization` gives for the recipe and the norm backend
    (``cudnn_norm``: `ExecutionOptions.cudnn_norm`), and the row-parallel input (T x
    ``row_in`` per rank). Backward quantizes
    both output gradients: the column-parallel one (T x ``column_out``) and the row-parallel
    one (T/tp x h with sequence parallelism); bytes per element and the current-scaling
    amax pass in `costmodel.fp8_quantization.fp8_quantize_time_s`, the current-scaling amax
    all-reduce in `costmodel.runtimes.megatron.fp8_scaling`. ``column_out`` and ``row_in``
    are per-rank widths. The fp8 weight copies (and their amax) are made on the first
    microbatch of an iteration (TE ``is_first_microbatch``, the cached weight workspace)
    or after the optimizer step (``fp8_param``): not counted."""
    x = layer_shape(job, plan)
    return fp8_pair_s(profile, x, h, column_out, row_in, recipe, cudnn_norm)


def fp8_pair_s(
    profile: HardwareProfile,
    x: LayerShape,
    h: int,
    column_out: float,
    row_in: float,
    recipe: Fp8Recipe,
    cudnn_norm: bool,
    *,
    frozen: bool = False,
    norm_returned: bool = False,
    fused_rht: bool = True,
    tn_gemm_only: bool = True,
    userbuffers: bool = False,
    row_saves_input: bool = False,
    column_saves_input: bool = False,
) -> tuple[float, float]:
    """`fp8_pair_quantize_s` of one rank's `LayerShape`. A ``frozen`` pair (LoRA) writes
    only the row-wise copy of both inputs and of the row-parallel output gradient (TE
    ``Linear``, no bias, no wgrad), both copies of the column-parallel output gradient
    (TE 4220403e's ``LayerNormLinear`` backward asks for both whatever ``requires_wgrad``);
    with ``norm_returned`` (a LoRA adapter on the column-parallel layer) TE returns the
    16-bit norm output and quantizes it on the ``separate`` path
    (``with_quantized_norm`` is False under ``return_layernorm_output``), and with
    sequence parallelism quantizes the gathered 16-bit norm output again for the GEMM,
    row-wise, on T rows (``return_layernorm_output_gathered``: `linear_pairs.sp_all_gather_bytes`).
    ``fused_rht``:
    `ExecutionOptions.nvfp4_fused_rht_cast` (nvfp4 jobs only). An nvfp4 job with sequence
    parallelism also re-orders each gathered column-wise copy in the backward
    (`costmodel.fp8_quantization.nvfp4_gather_fixup_time_s`).

    Per-tensor FP8 (``delayed``, ``tensorwise``) with sequence parallelism quantizes the
    norm output and the row-parallel output gradient on its T/tp rows into the row-wise
    copy alone, the one ``_all_gather_fp8`` gathers (``_LayerNormLinear.forward``:
    ``supports_only_rowwise_all_gather`` sets ``columnwise=False``; TE
    `pytorch/distributed.py`, v2.5 to HEAD); with ``tn_gemm_only``
    (`ExecutionOptions.fp8_tn_gemm_only`, Hopper) the backward transposes each gathered
    copy the wgrad GEMM reads (`costmodel.fp8_quantization.fp8_gather_transpose_time_s`).
    MXFP8 and NVFP4 write both copies locally (they gather column-wise data).

    ``userbuffers`` (`tp_comm_overlap` with sequence parallelism): a returned norm output is
    quantized on its T/tp rows before the NCCL gather, not again after it; an MXFP8
    row-parallel output gradient is cast row-wise alone here, its column-wise copy on the
    communication stream (`costmodel.runtimes.megatron.linear_pairs`: ``tp_pair``,
    ``mxfp8_wgrad_gradient``).

    ``row_saves_input`` (the attention output projection, which Megatron-core marks with
    ``set_save_original_input`` under ``fp8`` with a recipe other than ``delayed`` from TE
    2.6 and under ``fp4`` from TE 2.7: ``Attention.__init__``,
    `megatron/core/transformer/attention.py`): TE's ``_Linear.forward`` casts the input
    row-wise alone ("No need for column-wise data since this tensor will not be cached")
    and saves the 16-bit input, which ``_Linear.backward`` quantizes again for the wgrad
    GEMM ("Quantize input tensor", `module/linear.py`, v2.7 to HEAD): column-wise alone for
    MXFP8 and NVFP4 (the NVFP4 copy through the Hadamard column-wise cast, reading e again),
    row-wise and column-wise with a new amax pass for current scaling
    (``supports_only_rowwise_all_gather``, no gather on a row-parallel input). A frozen
    pair has no wgrad GEMM and no backward cast.

    ``column_saves_input`` (a MoE layer's shared expert ``linear_fc1``:
    `costmodel.saved_inputs.shared_fc1_saves_input`): the same for the column-parallel
    input, the norm output on the rank's rows: the forward writes its row-wise copy alone,
    the backward quantizes the 16-bit norm output again on those rows, row-wise alone for
    current scaling when it is then all-gathered (sequence parallelism; the gather and
    Hopper's transpose are the ones the saved copy takes), column-wise alone for MXFP8 and
    NVFP4 (`costmodel.runtimes.megatron.requant_costs.saved_input_requant_s`)."""
    if x.dtype not in LOW_PRECISION_GEMM_DTYPES:
        return 0.0, 0.0
    operand = operand_recipe(x.dtype, recipe)
    inputs = 1 if frozen else 2
    gathered = x.sp and x.tp > 1 and operand in ("delayed", "tensorwise") and not norm_returned
    sharded = 1 if gathered else inputs  # copies of the norm output and row-parallel gradient

    def quantize(elements: float, norm: NormQuantization | None = None, copies: int = 2) -> float:
        return fp8_quantize_time_s(
            profile,
            elements,
            x.elem,
            recipe=operand,
            norm=norm,
            copies=copies,
            fused_rht=fused_rht,
        )

    def again(elements: float, gathered_input: bool) -> float:
        return saved_input_requant_s(
            profile, elements, x.elem, operand, gathered=gathered_input, fused_rht=fused_rht
        )

    path = norm_quantization(operand, cudnn_norm=cudnn_norm, rows=x.norm_tokens, hidden=h)
    path = "separate" if norm_returned else path
    column_original = column_saves_input and operand != "delayed" and not frozen
    forward = quantize(x.norm_tokens * h, norm=path, copies=1 if column_original else sharded)
    backward = quantize(x.tokens * column_out)
    if column_original:
        backward += again(x.norm_tokens * h, x.sp and x.tp > 1)
    ub = userbuffers and x.sp and x.tp > 1
    if norm_returned and x.sp and x.tp > 1 and not ub:
        forward += quantize(x.tokens * h, copies=1)  # the gathered 16-bit norm output
    if row_in > 0:
        original = row_saves_input and operand != "delayed" and not frozen
        forward += quantize(x.tokens * row_in, copies=1 if original else inputs)
        if original:
            backward += again(x.tokens * row_in, False)
        split = ub and operand == "mxfp8" and not frozen  # column-wise copy: comm stream
        backward += quantize(x.norm_tokens * h, copies=1 if gathered or split else inputs)
    gathers = 2 if row_in > 0 else 1  # wgrad's norm output, the row-parallel gradient
    if x.dtype == "fp4" and x.sp and x.tp > 1 and not frozen:
        backward += gathers * nvfp4_gather_fixup_time_s(profile, x.tokens * h)
    if gathered and tn_gemm_only and not frozen:
        backward += gathers * fp8_gather_transpose_time_s(profile, x.tokens * h)
    return forward, backward


def fp8_amax_pair(
    profile: HardwareProfile, x: LayerShape, groups: CommGroups, recipe: Fp8Recipe, row_in: float
) -> tuple[PassCost, PassCost]:
    if x.dtype not in LOW_PRECISION_GEMM_DTYPES:
        return ZERO, ZERO
    return amax_reduction_pair(
        profile,
        recipe=operand_recipe(x.dtype, recipe),
        sequence_parallel=x.sp,
        tp_group=groups.tp,
        row_parallel=row_in > 0,
    )
