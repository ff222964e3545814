"""Costs around one column-parallel / row-parallel linear pair of a layer on one rank
(QKV and output projection, or FC1 and FC2), for one microbatch: the TP collectives and
the part of them left exposed (`tp_pair`), and the FP8 or NVFP4 quantization of the
pair's operands with its TP amax reduction (`fp8_pair_s`, `fp8_amax_pair`).

TP communication per layer (size S = T·h·e bytes, the full activation): forward 2
all-reduces of S without SP, 2 all-gathers + 2 reduce-scatters with SP; the same in
backward (megatron-facts.md §6). An fp8 or nvfp4 job's SP all-gathers move the quantized
copies instead of S (`sp_all_gather_bytes`, `userbuffers_all_gather_bytes`), its reductions
S. Exposed unless `tp_comm_overlap`, which runs Transformer
Engine's userbuffers overlaps (`costmodel.runtimes.megatron.userbuffers`): the
collectives split with their GEMMs into chunks, priced per the framework's userbuffers
methods (`ExecutionOptions.tp_overlap_rs_method`, ``tp_overlap_bulk_sm_margin``). The
SP backward re-gather of the column-parallel input runs asynchronously under dgrad in
Megatron and is not counted without the overlap.

A LoRA job's frozen pair (``frozen``) has no weight-gradient GEMM: the reduction of the
input gradient has nothing to hide under, and its quantized operands need no column-wise
copy for one (`fp8_pair_s`). The userbuffers overlaps are priced as for a trained pair: how
Transformer Engine's bulk overlaps run without a wgrad GEMM is not modelled.
"""

from __future__ import annotations

from costmodel.collectives import collective_time_s
from costmodel.compute import DTYPE_BYTES, LOW_PRECISION_GEMM_DTYPES, Direction
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_quantization import (
    NormQuantization,
    fp8_gather_transpose_time_s,
    fp8_quantize_time_s,
    gathered_bytes_per_element,
    norm_quantization,
    nvfp4_gather_fixup_time_s,
    operand_recipe,
)
from costmodel.memory_allowances import MXFP8_BLOCK_ELEMENTS, Fp8Recipe
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.fp8_scaling import amax_reduction_pair
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3, layer_shape
from costmodel.runtimes.megatron.userbuffers import Shape, tp_overlap_pair_s
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.plan import ParallelPlan


def tp_pair(
    profile: HardwareProfile,
    plan: ParallelPlan,
    x: LayerShape,
    h: int,
    groups: CommGroups,
    first: Shape,
    second: Shape | None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    *,
    frozen: bool = False,
    norm_returned: bool = False,
) -> tuple[PassCost, PassCost]:
    """TP collectives around one column-parallel / row-parallel GEMM pair (§6): one
    all-reduce each way without SP (after the row-parallel GEMM forward, of the
    column-parallel input gradient backward); with SP an all-gather before the
    column-parallel GEMM and a reduce-scatter after the row-parallel one, each way.
    ``first`` and ``second`` are the pair's GEMM shapes (``second`` None when the layer
    has no row-parallel GEMM of its own, MLA here: its reduce-scatter is exposed).

    `ExecutionOptions.tp_dgrad_overlap` of ``options``: without `tp_comm_overlap`, the
    backward reduction of the column-parallel input gradient (reduce-scatter with SP,
    all-reduce without) is launched asynchronously and waited for after the layer's
    weight-gradient GEMM, so only max(0, comm - wgrad) of it is exposed (Transformer
    Engine `_LayerNormLinear.backward` and `_Linear.backward`, "Overlap dgrad-RS/AR with
    wgrad"; Megatron-LM `LinearWithGradAccumulationAndAsyncCommunication`); the
    all-gather of the row-parallel output gradient before its dgrad stays exposed. A
    ``frozen`` pair (LoRA) has no wgrad GEMM, so the reduction is exposed whole. The SP
    all-gathers move `sp_all_gather_bytes` (FP8 or NVFP4 copies in a quantized job,
    ``options.fp8_recipe``; ``norm_returned``: a LoRA adapter on the column-parallel
    layer), the reductions T·h·e; the userbuffers overlaps `_userbuffers_pair`."""
    if x.tp < 2:
        return ZERO, ZERO
    size = x.tokens * h * x.elem
    if plan.tp_comm_overlap and x.sp:
        return _userbuffers_pair(profile, x, h, groups, first, second, options, frozen=frozen)
    wgrad = 0.0 if frozen else gemm3(profile, x, *first)[2]
    if not x.sp:
        ar = collective_time_s(profile, "all_reduce", size, groups.tp)
        return (
            PassCost(tp_s=ar, tp_exposed_s=ar, tp_bytes=size),
            _reduction_under_wgrad(0.0, ar, size, size, wgrad, options),
        )
    rs = collective_time_s(profile, "reduce_scatter", size, groups.tp)
    recipe = options.fp8_recipe
    gathered = (
        sp_all_gather_bytes(x, h, "forward", recipe=recipe, norm_returned=norm_returned),
        sp_all_gather_bytes(x, h, "backward", frozen=frozen, recipe=recipe),
    )
    ag_f, ag_b = (collective_time_s(profile, "all_gather", b, groups.tp) for b in gathered)
    forward = PassCost(tp_s=ag_f + rs, tp_exposed_s=ag_f + rs, tp_bytes=gathered[0] + size)
    return forward, _reduction_under_wgrad(ag_b, rs, gathered[1], size, wgrad, options)


def _userbuffers_pair(
    profile: HardwareProfile,
    x: LayerShape,
    h: int,
    groups: CommGroups,
    first: Shape,
    second: Shape | None,
    options: ExecutionOptions,
    *,
    frozen: bool,
) -> tuple[PassCost, PassCost]:
    """`tp_pair` with `tp_comm_overlap`: the userbuffers overlaps
    (`costmodel.runtimes.megatron.userbuffers.tp_overlap_pair_s`) with each all-gather at
    `userbuffers_all_gather_bytes` and each reduce-scatter at T·h·e.

    An MXFP8 job's ``fill_userbuffers_buffer_for_all_gather`` (TE `pytorch/module/base.py`,
    v2.5 to HEAD) gathers each copy's E8M0 scales (T·h/32 bytes) with a blocking NCCL
    ``all_gather_into_tensor`` beside the buffer: exposed forward for the norm output and
    backward for the output gradient's row-wise copy (``grad_output_preprocess``) and the
    norm output's column-wise copy (the ``bulk`` dgrad overlap); a ``frozen`` pair gathers
    the row-wise output gradient alone. Its wgrad reads a column-wise output gradient
    gathered separately ("we can't convert row-scaled MXFP8 to column-scaled",
    ``_Linear.backward``): data and scales on the dgrad GEMM's communication stream
    (``tex.bulk_overlap_ag_with_external_gemm``), counted in the traffic, not exposed."""
    size = x.tokens * h * x.elem
    gather = userbuffers_all_gather_bytes(x, h)
    ag = collective_time_s(profile, "all_gather", gather, groups.tp)
    rs = collective_time_s(profile, "reduce_scatter", size, groups.tp)
    fwd, bwd = tp_overlap_pair_s(
        profile,
        x.tp,
        x.dtype,
        size,
        groups.tp,
        first,
        second,
        options=options,
        gather_bytes=gather,
    )
    forward = PassCost(tp_s=ag + rs, tp_exposed_s=fwd, tp_bytes=gather + size)
    backward = PassCost(tp_s=ag + rs, tp_exposed_s=bwd, tp_bytes=gather + size)
    if x.dtype != "fp8" or options.fp8_recipe != "mxfp8":
        return forward, backward
    scales = x.tokens * h / MXFP8_BLOCK_ELEMENTS
    scale_s = collective_time_s(profile, "all_gather", scales, groups.tp)
    exposed = 1 if frozen else 2
    hidden = ZERO if frozen else PassCost(tp_s=ag + scale_s, tp_bytes=gather + scales)
    forward = forward.plus(PassCost(tp_s=scale_s, tp_exposed_s=scale_s, tp_bytes=scales))
    backward = backward.plus(hidden).plus(
        PassCost(tp_s=exposed * scale_s, tp_exposed_s=exposed * scale_s, tp_bytes=exposed * scales)
    )
    return forward, backward


def _reduction_under_wgrad(
    gather_s: float,
    reduce_s: float,
    gather_bytes: float,
    reduce_bytes: float,
    wgrad_s: float,
    options: ExecutionOptions,
) -> PassCost:
    """The backward's TP collectives of a pair on the NCCL path (`tp_pair`): the exposed
    gather of the row-parallel output gradient (0 without SP) and the reduction of the
    column-parallel input gradient, hidden under ``wgrad_s`` as far as
    `ExecutionOptions.tp_dgrad_overlap` allows."""
    hidden = min(reduce_s, wgrad_s) if options.tp_dgrad_overlap else 0.0
    total = gather_s + reduce_s
    return PassCost(tp_s=total, tp_exposed_s=total - hidden, tp_bytes=gather_bytes + reduce_bytes)


def sp_all_gather_bytes(
    x: LayerShape,
    h: int,
    direction: Direction,
    *,
    frozen: bool = False,
    recipe: Fp8Recipe = "delayed",
    norm_returned: bool = False,
) -> float:
    """Bytes of one sequence-parallel all-gather of a linear pair on the NCCL path (the
    full [T, h] tensor, nccl-tests size): forward the column-parallel input (the norm
    output), backward the row-parallel output gradient.

    16-bit jobs: T·h·e. A quantized job gathers the copies each rank quantized on its
    T/tp rows (TE ``gather_along_first_dim``, `pytorch/distributed.py`: the norm output is
    quantized by the norm kernel or right after it, ``_LayerNormLinear.forward``; the
    output gradient by ``grad_output_preprocess`` in ``module/base.py``, v2.5 to HEAD and
    the Megatron-Bridge pins 5671fd36, 71bbefbf, 4220403e; TE 1.x the same),
    `costmodel.fp8_quantization.gathered_bytes_per_element` of the operand's recipe
    (``recipe``: `ExecutionOptions.fp8_recipe`, ``nvfp4`` in an nvfp4 job) per element
    and copy:

    - forward, every recipe: the row-wise copy alone (``_LayerNormLinear.forward`` sets
      the input quantizer to ``rowwise=True, columnwise=False`` before the gather; MXFP8
      and NVFP4 keep their local column-wise copy for the wgrad re-gather);
    - backward, ``delayed`` and ``tensorwise``: the row-wise copy alone
      (``_all_gather_fp8`` quantizes row-wise only, the column-wise copy is a transpose
      after the gather on Hopper: `costmodel.fp8_quantization.fp8_gather_transpose_time_s`);
    - backward, ``mxfp8`` and ``nvfp4``: the row-wise and the column-wise copy
      (``_Linear.backward`` sets the output-gradient quantizer to both usages before
      ``grad_output_preprocess``; ``_all_gather_mxfp8`` and ``_all_gather_nvfp4`` gather
      each copy with its scales), the row-wise one alone for a ``frozen`` pair (no bias,
      no wgrad: ``columnwise=False``).

    ``norm_returned`` (a LoRA adapter on the column-parallel layer): Megatron-Bridge sets
    ``return_layernorm_output_gathered`` on a ``TELayerNormColumnParallelLinear`` with
    sequence parallelism and no userbuffers all-gather (``src/megatron/bridge/peft/
    utils.py``, v0.5.0), and TE then gathers the 16-bit norm output ("Perform all-gather in
    high precision if gathered norm output will be returned") and quantizes the gathered
    tensor: the forward gather moves T·h·e in every job."""
    quantized = x.dtype in LOW_PRECISION_GEMM_DTYPES
    if not quantized or (norm_returned and direction == "forward"):
        return x.tokens * h * x.elem
    operand = operand_recipe(x.dtype, recipe)
    both = operand in ("mxfp8", "nvfp4") and direction == "backward" and not frozen
    return x.tokens * h * (2 if both else 1) * gathered_bytes_per_element(operand)


def userbuffers_all_gather_bytes(x: LayerShape, h: int) -> float:
    """Bytes of one all-gather of Transformer Engine's userbuffers overlap
    (`tp_comm_overlap`) for a linear pair: the full [T, h] tensor, one copy.

    An fp8 job, every recipe: 1 byte per element. Megatron-LM registers FP8 buffers under
    ``--fp8-format`` (``_initialize_tp_communicators``, `megatron/training/initialize.py`:
    ``UserBufferQuantizationMode.FP8``, ``use_fp8`` before TE 2.7), and TE allocates
    uint8 buffers for the all-gather GEMMs (``initialize_ub``, ``fp8_buf`` for
    ``layers_all_gather_overlap``: ``qkv_fprop``, ``qkv_dgrad``, ``proj_dgrad``,
    ``fc1_fprop``, ``fc1_dgrad``, ``fc2_dgrad``; `pytorch/module/base.py`, v1.7 to HEAD);
    ``fill_userbuffers_buffer_for_all_gather`` copies the rank's quantized shard (one usage
    at a time: the row-wise copy forward and for dgrad, the column-wise copy for the MXFP8
    wgrad re-gathers), MXFP8's scales travel by NCCL beside it (`_userbuffers_pair`).

    16-bit and nvfp4 jobs: T·h·e. TE has no NVFP4 userbuffers path:
    ``fill_userbuffers_buffer_for_all_gather`` raises "Unsupported quantizer for
    Userbuffers" for an ``NVFP4Quantizer`` (and a ``Float8BlockQuantizer``) at every TE
    pin through the 2026-08 HEAD, and Megatron-LM registers 16-bit buffers when
    ``--fp8-format`` is unset: the plan rule ``tp_comm_overlap_not_with_nvfp4``
    (`specs.rules_features`) refuses such a plan; called directly, the 16-bit size."""
    per_element = DTYPE_BYTES["fp8"] if x.dtype == "fp8" else x.elem
    return x.tokens * h * per_element


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
) -> tuple[float, float]:
    """`fp8_pair_quantize_s` of one rank's `LayerShape`. A ``frozen`` pair (LoRA) writes
    only the row-wise copy of both inputs and of the row-parallel output gradient (TE
    ``Linear``, no bias, no wgrad), both copies of the column-parallel output gradient
    (TE 4220403e's ``LayerNormLinear`` backward asks for both whatever ``requires_wgrad``);
    with ``norm_returned`` (a LoRA adapter on the column-parallel layer) TE returns the
    16-bit norm output and quantizes it on the ``separate`` path
    (``with_quantized_norm`` is False under ``return_layernorm_output``), and with
    sequence parallelism quantizes the gathered 16-bit norm output again for the GEMM,
    row-wise, on T rows (``return_layernorm_output_gathered``: `sp_all_gather_bytes`).
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
    MXFP8 and NVFP4 write both copies locally (they gather column-wise data)."""
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

    path = norm_quantization(operand, cudnn_norm=cudnn_norm, rows=x.norm_tokens, hidden=h)
    path = "separate" if norm_returned else path
    forward = quantize(x.norm_tokens * h, norm=path, copies=sharded)
    backward = quantize(x.tokens * column_out)
    if norm_returned and x.sp and x.tp > 1:
        forward += quantize(x.tokens * h, copies=1)  # the gathered 16-bit norm output
    if row_in > 0:
        forward += quantize(x.tokens * row_in, copies=inputs)
        backward += quantize(x.norm_tokens * h, copies=1 if gathered else inputs)
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
