"""FP8 and NVFP4 quantization of one column-parallel / row-parallel linear pair of a layer
on one rank, for one microbatch (`fp8_pair_s`), and the pair's TP amax reduction
(`fp8_amax_pair`): which operands Transformer Engine casts, on how many rows, into which
copies, by recipe, sequence parallelism, LoRA (a frozen pair, a returned norm output), the
userbuffers overlap and the attention projection's saved 16-bit input. The TP collectives
of the pair are in `costmodel.runtimes.megatron.linear_pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute import LOW_PRECISION_GEMM_DTYPES
from costmodel.fp8_quantization import (
    NormQuantization,
    QuantRecipe,
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


@dataclass(frozen=True, kw_only=True)
class PairCast:
    """The cast kernels of one linear pair on one rank: the recipe an operand is quantized
    under (`costmodel.fp8_quantization.operand_recipe`), the rank's `LayerShape`,
    ``fused_rht`` (`ExecutionOptions.nvfp4_fused_rht_cast`, nvfp4 jobs only), whether the
    pair is ``frozen`` (LoRA), whether per-tensor FP8 all-gathers the row-wise copy alone
    (``gathered``) and whether userbuffers overlap the sequence-parallel TP collectives
    (``userbuffers``)."""

    profile: HardwareProfile
    x: LayerShape
    operand: QuantRecipe
    fused_rht: bool
    frozen: bool
    gathered: bool
    userbuffers: bool

    @property
    def inputs(self) -> int:
        """Copies of an input a pair writes: the row-wise one alone when frozen (no wgrad
        GEMM), else row-wise and column-wise."""
        return 1 if self.frozen else 2

    def quantize(
        self, elements: float, norm: NormQuantization | None = None, copies: int = 2
    ) -> float:
        """Seconds to quantize ``elements`` 16-bit values into ``copies`` copies (row-wise,
        column-wise), on the norm path ``norm`` where a norm writes them:
        `costmodel.fp8_quantization.fp8_quantize_time_s`."""
        return fp8_quantize_time_s(
            self.profile,
            elements,
            self.x.elem,
            recipe=self.operand,
            norm=norm,
            copies=copies,
            fused_rht=self.fused_rht,
        )

    def again(self, elements: float, gathered_input: bool) -> float:
        """Seconds for the backward to quantize a saved 16-bit input of ``elements`` values
        again for the wgrad GEMM:
        `costmodel.runtimes.megatron.requant_costs.saved_input_requant_s`."""
        return saved_input_requant_s(
            self.profile,
            elements,
            self.x.elem,
            self.operand,
            gathered=gathered_input,
            fused_rht=self.fused_rht,
        )

    def saves_original(self, saves_input: bool) -> bool:
        """Whether a layer marked ``saves_input`` keeps its 16-bit input for the backward:
        not under ``delayed`` scaling, not in a frozen pair."""
        return saves_input and self.operand != "delayed" and not self.frozen


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
    (TE 4220403e's ``LayerNormLinear`` backward asks for both whatever ``requires_wgrad``).

    Per-tensor FP8 (``delayed``, ``tensorwise``) with sequence parallelism quantizes the
    norm output and the row-parallel output gradient on its T/tp rows into the row-wise
    copy alone, the one ``_all_gather_fp8`` gathers (``_LayerNormLinear.forward``:
    ``supports_only_rowwise_all_gather`` sets ``columnwise=False``; TE
    `pytorch/distributed.py`, v2.5 to HEAD); MXFP8 and NVFP4 write both copies locally
    (they gather column-wise data). The layers' casts are in `column_parallel_casts_s` and
    `row_parallel_casts_s`, the fix-ups of gathered copies in `gathered_copy_fixups_s`."""
    if x.dtype not in LOW_PRECISION_GEMM_DTYPES:
        return 0.0, 0.0
    operand = operand_recipe(x.dtype, recipe)
    sp = x.sp and x.tp > 1
    gathered = sp and operand in ("delayed", "tensorwise") and not norm_returned
    cast = PairCast(
        profile=profile,
        x=x,
        operand=operand,
        userbuffers=userbuffers and sp,
        fused_rht=fused_rht,
        frozen=frozen,
        gathered=gathered,
    )
    forward, backward = column_parallel_casts_s(
        cast, h, column_out, cudnn_norm, norm_returned, column_saves_input
    )
    if row_in > 0:
        row_forward, row_again, row_backward = row_parallel_casts_s(
            cast, h, row_in, row_saves_input
        )
        forward += row_forward
        backward += row_again
        backward += row_backward
    backward += gathered_copy_fixups_s(cast, h, row_in, tn_gemm_only)
    return forward, backward


def column_parallel_casts_s(
    cast: PairCast,
    h: int,
    column_out: float,
    cudnn_norm: bool,
    norm_returned: bool,
    saves_input: bool,
) -> tuple[float, float]:
    """Casts of the column-parallel layer of a pair (forward, backward), in seconds: the
    norm output on the rank's rows (the row-wise copy alone when ``cast.gathered``), on the
    path `costmodel.fp8_quantization.norm_quantization` gives for the recipe and the norm
    backend (``cudnn_norm``: `ExecutionOptions.cudnn_norm`), and both copies of the output
    gradient (T x ``column_out``, a per-rank width).

    With ``norm_returned`` (a LoRA adapter on the column-parallel layer) TE returns the
    16-bit norm output and quantizes it on the ``separate`` path (``with_quantized_norm`` is
    False under ``return_layernorm_output``), and with sequence parallelism quantizes the
    gathered 16-bit norm output again for the GEMM, row-wise, on T rows
    (``return_layernorm_output_gathered``: `linear_pairs.sp_all_gather_bytes`); under
    userbuffers it is quantized on its T/tp rows before the NCCL gather, not after it.

    ``saves_input`` (a MoE layer's shared expert ``linear_fc1``:
    `costmodel.saved_inputs.shared_fc1_saves_input`): the forward writes the norm output's
    row-wise copy alone, the backward quantizes the 16-bit norm output again on those rows,
    row-wise alone for current scaling when it is then all-gathered (sequence parallelism;
    the gather and Hopper's transpose are the ones the saved copy takes), column-wise alone
    for MXFP8 and NVFP4 (`costmodel.runtimes.megatron.requant_costs.saved_input_requant_s`)."""
    x = cast.x
    sp = x.sp and x.tp > 1
    path = norm_quantization(cast.operand, cudnn_norm=cudnn_norm, rows=x.norm_tokens, hidden=h)
    path = "separate" if norm_returned else path
    original = cast.saves_original(saves_input)
    copies = 1 if original or cast.gathered else cast.inputs
    forward = cast.quantize(x.norm_tokens * h, norm=path, copies=copies)
    backward = cast.quantize(x.tokens * column_out)
    if original:
        backward += cast.again(x.norm_tokens * h, sp)
    if norm_returned and sp and not cast.userbuffers:
        forward += cast.quantize(x.tokens * h, copies=1)  # the gathered 16-bit norm output
    return forward, backward


def row_parallel_casts_s(
    cast: PairCast, h: int, row_in: float, saves_input: bool
) -> tuple[float, float, float]:
    """Casts of the row-parallel layer of a pair, in seconds: (forward cast of the input,
    T x ``row_in`` per rank; backward re-quantization of a saved input, 0 without one;
    backward cast of the output gradient on the rank's rows, the row-wise copy alone when
    ``cast.gathered``).

    ``saves_input`` (the attention output projection, which Megatron-core marks with
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

    With userbuffers (`tp_comm_overlap` with sequence parallelism) an MXFP8 output gradient
    is cast row-wise alone here, its column-wise copy on the communication stream
    (`costmodel.runtimes.megatron.linear_pairs`: ``tp_pair``, ``mxfp8_wgrad_gradient``)."""
    x = cast.x
    original = cast.saves_original(saves_input)
    forward = cast.quantize(x.tokens * row_in, copies=1 if original else cast.inputs)
    again = cast.again(x.tokens * row_in, False) if original else 0.0
    split = cast.userbuffers and cast.operand == "mxfp8" and not cast.frozen  # comm stream
    copies = 1 if cast.gathered or split else cast.inputs
    backward = cast.quantize(x.norm_tokens * h, copies=copies)
    return forward, again, backward


def gathered_copy_fixups_s(cast: PairCast, h: int, row_in: float, tn_gemm_only: bool) -> float:
    """Backward seconds to make the copies a pair all-gathers under sequence parallelism fit
    the wgrad GEMM, one per gathered tensor (the norm output, and the row-parallel output
    gradient when ``row_in`` > 0); 0 for a frozen pair (no wgrad GEMM).

    An nvfp4 job re-orders each gathered column-wise copy
    (`costmodel.fp8_quantization.nvfp4_gather_fixup_time_s`); per-tensor FP8 with
    ``tn_gemm_only`` (`ExecutionOptions.fp8_tn_gemm_only`, Hopper) transposes each gathered
    row-wise copy (`costmodel.fp8_quantization.fp8_gather_transpose_time_s`)."""
    x = cast.x
    if cast.frozen or not (x.sp and x.tp > 1):
        return 0.0
    gathers = 2 if row_in > 0 else 1  # wgrad's norm output, the row-parallel gradient
    if x.dtype == "fp4":
        return gathers * nvfp4_gather_fixup_time_s(cast.profile, x.tokens * h)
    if cast.gathered and tn_gemm_only:
        return gathers * fp8_gather_transpose_time_s(cast.profile, x.tokens * h)
    return 0.0


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
