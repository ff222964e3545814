"""TP collectives around one column-parallel / row-parallel linear pair of a layer on one
rank (QKV and output projection, or FC1 and FC2), for one microbatch, and the part of them
left exposed (`tp_pair`). The FP8 or NVFP4 quantization of the pair's operands and its TP
amax reduction are in `costmodel.runtimes.megatron.pair_quantization`.

TP communication per layer (size S = T·h·e bytes, the full activation): forward 2
all-reduces of S without SP, 2 all-gathers + 2 reduce-scatters with SP; the same in
backward (megatron-facts.md §6). A parallel attention+MLP block (``ModelSpec.layer_block``)
reduces its two branches once: forward 1 all-reduce (2 all-gathers + 1 reduce-scatter with
SP), backward 2 all-reduces (1 all-gather + 2 reduce-scatters with SP), its MLP pair
priced with ``row_reduction=False``. An fp8 or nvfp4 job's SP all-gathers move the quantized
copies instead of S (`sp_all_gather_bytes`, `userbuffers_all_gather_bytes`), its reductions
S. Exposed unless `tp_comm_overlap`, which runs Transformer
Engine's userbuffers overlaps (`costmodel.runtimes.megatron.userbuffers`): the
collectives split with their GEMMs into chunks, priced per the framework's userbuffers
methods (`ExecutionOptions.tp_overlap_rs_method`, ``tp_overlap_bulk_sm_margin``). The
SP backward re-gather of the column-parallel input runs asynchronously under dgrad in
Megatron and is not counted without the overlap.

A LoRA job's frozen pair (``frozen``) has no weight-gradient GEMM: the reduction of the
input gradient has nothing to hide under, and its quantized operands need no column-wise
copy for one (`costmodel.runtimes.megatron.pair_quantization.fp8_pair_s`). The
userbuffers overlaps are priced as for a trained pair, except the forward all-gather of a
column-parallel layer that returns its norm output to an adapter, which runs through NCCL
(`_userbuffers_pair`); how Transformer Engine's bulk overlaps run without a wgrad GEMM is
not modelled.
"""

from __future__ import annotations

from costmodel.collectives import collective_time_s
from costmodel.compute import DTYPE_BYTES, LOW_PRECISION_GEMM_DTYPES, Direction
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_quantization import (
    fp8_quantize_time_s,
    gathered_bytes_per_element,
    operand_recipe,
)
from costmodel.memory_allowances import MXFP8_BLOCK_ELEMENTS, Fp8Recipe
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3
from costmodel.runtimes.megatron.userbuffers import Shape, ring_send_tail_s, tp_overlap_pair_s
from profiles.schema import HardwareProfile
from specs.errors import SpecError
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
    row_reduction: bool = True,
) -> tuple[PassCost, PassCost]:
    """TP collectives around one column-parallel / row-parallel GEMM pair (§6): one
    all-reduce each way without SP (after the row-parallel GEMM forward, of the
    column-parallel input gradient backward); with SP an all-gather before the
    column-parallel GEMM and a reduce-scatter after the row-parallel one, each way
    (`_sp_pair`). ``first`` and ``second`` are the pair's GEMM shapes (``second`` None when
    the layer has no row-parallel GEMM of its own, MLA here: its reduce-scatter is exposed).

    `ExecutionOptions.tp_dgrad_overlap` of ``options``: without `tp_comm_overlap`, the
    backward reduction of the column-parallel input gradient (reduce-scatter with SP,
    all-reduce without) is launched asynchronously and waited for after the layer's
    weight-gradient GEMM, so only max(0, comm - wgrad) of it is exposed (Transformer
    Engine `_LayerNormLinear.backward` and `_Linear.backward`, "Overlap dgrad-RS/AR with
    wgrad"; Megatron-LM `LinearWithGradAccumulationAndAsyncCommunication`); the
    all-gather of the row-parallel output gradient before its dgrad stays exposed. A
    ``frozen`` pair (LoRA) has no wgrad GEMM, so the reduction is exposed whole. The
    userbuffers overlaps are `_userbuffers_pair`.

    ``row_reduction`` False: the pair's row-parallel output is left unreduced, the MLP of
    a parallel attention+MLP block (``ModelSpec.layer_block``; `_sp_pair` for what it
    leaves out): without SP the pair has no forward all-reduce. Refused with
    `tp_comm_overlap` (`specs.rules_block`)."""
    if x.tp < 2:
        return ZERO, ZERO
    size = x.tokens * h * x.elem
    if plan.tp_comm_overlap and x.sp and not row_reduction:
        raise SpecError(
            "parallel_block_not_with_tp_comm_overlap: a pair without its row-parallel "
            "reduction has no userbuffers overlap to price; set tp_comm_overlap=False"
        )
    if plan.tp_comm_overlap and x.sp:
        return _userbuffers_pair(
            profile,
            x,
            h,
            groups,
            (first, second),
            options,
            frozen=frozen,
            norm_returned=norm_returned,
        )
    wgrad = 0.0 if frozen else gemm3(profile, x, *first)[2]
    if not x.sp:
        ar = collective_time_s(profile, "all_reduce", size, groups.tp)
        forward = PassCost(tp_s=ar, tp_exposed_s=ar, tp_bytes=size) if row_reduction else ZERO
        return forward, _reduction_under_wgrad(0.0, ar, size, size, wgrad, options)
    return _sp_pair(profile, x, h, groups, wgrad, options, frozen, norm_returned, row_reduction)


def _sp_pair(
    profile: HardwareProfile,
    x: LayerShape,
    h: int,
    groups: CommGroups,
    wgrad_s: float,
    options: ExecutionOptions,
    frozen: bool,
    norm_returned: bool,
    row_reduction: bool,
) -> tuple[PassCost, PassCost]:
    """The NCCL collectives of a pair with sequence parallelism (`tp_pair`), forward and
    backward: the all-gather of the column-parallel input and the reduce-scatter of the
    row-parallel output, then the all-gather of the row-parallel output gradient and the
    reduce-scatter of the column-parallel input gradient, hidden under ``wgrad_s`` as far as
    `ExecutionOptions.tp_dgrad_overlap` allows (`_reduction_under_wgrad`). The all-gathers
    move `sp_all_gather_bytes` (FP8 or NVFP4 copies in a quantized job,
    ``options.fp8_recipe``; ``norm_returned``: a LoRA adapter on the column-parallel
    layer), the reduce-scatters T·h·e.

    ``row_reduction`` False (the MLP of a parallel attention+MLP block; GPT-NeoX
    ``ParallelMLP`` with ``parallel_output=True``, whose sum with the attention branch the
    attention pair's reduction carries: GPT-NeoX ``ParallelTransformerLayer.forward``,
    ``self.reduce(output)``): no forward reduce-scatter and no backward all-gather of the
    output gradient (the one all-gather, the backward of the block's reduce-scatter, is the
    attention pair's); the column-parallel input gradient is reduced as in the sequential
    block (its own ``gather_from_sequence_parallel_region``)."""
    size = x.tokens * h * x.elem
    rs = collective_time_s(profile, "reduce_scatter", size, groups.tp)
    recipe = options.fp8_recipe
    gather_b = sp_all_gather_bytes(x, h, "backward", frozen=frozen, recipe=recipe)
    gathered = (
        sp_all_gather_bytes(x, h, "forward", recipe=recipe, norm_returned=norm_returned),
        gather_b if row_reduction else 0.0,
    )
    ag_f = collective_time_s(profile, "all_gather", gathered[0], groups.tp)
    ag_b = (
        collective_time_s(profile, "all_gather", gathered[1], groups.tp) if row_reduction else 0.0
    )
    out_rs, out_size = (rs, size) if row_reduction else (0.0, 0.0)
    forward = PassCost(
        tp_s=ag_f + out_rs, tp_exposed_s=ag_f + out_rs, tp_bytes=gathered[0] + out_size
    )
    return forward, _reduction_under_wgrad(ag_b, rs, gathered[1], size, wgrad_s, options)


def _userbuffers_pair(
    profile: HardwareProfile,
    x: LayerShape,
    h: int,
    groups: CommGroups,
    shapes: tuple[Shape, Shape | None],
    options: ExecutionOptions,
    *,
    frozen: bool,
    norm_returned: bool,
) -> tuple[PassCost, PassCost]:
    """`tp_pair` with `tp_comm_overlap`: the userbuffers overlaps
    (`costmodel.runtimes.megatron.userbuffers.tp_overlap_pair_s`) of the pair's GEMM
    ``shapes`` (column-parallel, row-parallel) with each all-gather at
    `userbuffers_all_gather_bytes` and each reduce-scatter at T·h·e.

    ``norm_returned`` (a LoRA adapter on the column-parallel layer): TE turns the
    userbuffers all-gather of the forward off when the module returns its norm output
    (``ub_overlap_ag_fprop and ... not return_layernorm_output``, ``_LayerNormLinear.forward``,
    v2.5 to HEAD and Bridge's pin 4220403e; Bridge leaves ``return_layernorm_output_gathered``
    unset under the overlap, ``peft/utils.py`` v0.5.0), so the layer gathers its quantized
    (or 16-bit) norm output with a blocking NCCL ``gather_along_first_dim`` before the
    whole GEMM: exposed, at `sp_all_gather_bytes`, its MXFP8 scales inside those bytes.

    An MXFP8 job gathers each copy's E8M0 scales beside the buffer with a blocking NCCL
    all-gather (`mxfp8_scale_gather`): exposed forward for the norm output and
    backward for the output gradient's row-wise copy (``grad_output_preprocess``) and the
    norm output's column-wise copy (the ``bulk`` dgrad overlap); a ``frozen`` pair gathers
    the row-wise output gradient alone. Its wgrad reads a column-wise output gradient
    quantized from the 16-bit one and gathered on the dgrad GEMM's send stream
    (`mxfp8_wgrad_gradient`)."""
    first, second = shapes
    size = x.tokens * h * x.elem
    gather = userbuffers_all_gather_bytes(x, h)
    recipe = options.fp8_recipe
    nccl = sp_all_gather_bytes(x, h, "forward", recipe=recipe) if norm_returned else gather
    ag_first = collective_time_s(profile, "all_gather", nccl, groups.tp)
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
        first_gather_s=ag_first if norm_returned else None,
    )
    forward = PassCost(tp_s=ag_first + rs, tp_exposed_s=fwd, tp_bytes=nccl + size)
    backward = PassCost(tp_s=ag + rs, tp_exposed_s=bwd, tp_bytes=gather + size)
    if x.dtype != "fp8" or recipe != "mxfp8":
        return forward, backward
    scales = mxfp8_scale_gather(profile, x, h, groups)
    if not norm_returned:
        forward = forward.plus(scales)
    backward = backward.plus(scales.scaled(1 if frozen else 2))
    if frozen:
        return forward, backward
    return forward, backward.plus(mxfp8_wgrad_gradient(profile, x, h, groups, second))


def mxfp8_wgrad_gradient(
    profile: HardwareProfile, x: LayerShape, h: int, groups: CommGroups, second: Shape | None
) -> PassCost:
    """The column-wise MXFP8 copy of a row-parallel layer's output gradient under
    `tp_comm_overlap` (TE ``_Linear.backward``, v2.5 to HEAD): the userbuffers all-gather
    carries one usage at a time, so ``grad_output_preprocess`` casts the rank's T/tp x h
    16-bit gradient row-wise alone for the dgrad GEMM
    (`costmodel.runtimes.megatron.pair_quantization.fp8_pair_s` ``userbuffers``), and the
    wgrad copy is a second cast of the same 16-bit
    gradient, column-wise (read e, write 1 + 1/32 bytes per element), on the dgrad GEMM's
    send stream, followed there by the NCCL all-gather of its scales and the userbuffers
    all-gather of its data (T·h bytes). The three run under the dgrad GEMM; what outlasts
    it delays the wgrad GEMM (`costmodel.runtimes.megatron.userbuffers.ring_send_tail_s`),
    booked as exposed TP time. Without the overlap one cast writes both copies and
    ``_all_gather_mxfp8`` gathers them (`sp_all_gather_bytes`). ``second`` None (a layer
    without its own row-parallel GEMM, MLA here): the traffic alone."""
    gather = userbuffers_all_gather_bytes(x, h)
    scales = mxfp8_scale_gather(profile, x, h, groups)
    comm_s = scales.tp_s + collective_time_s(profile, "all_gather", gather, groups.tp)
    if second is None:
        return PassCost(tp_s=comm_s, tp_bytes=gather + scales.tp_bytes)
    cast_s = fp8_quantize_time_s(profile, x.norm_tokens * h, x.elem, recipe="mxfp8", copies=1)
    m, n, k = second
    tail = ring_send_tail_s(profile, x.tp, x.dtype, gather, groups.tp, (m, k, n), cast_s + comm_s)
    return PassCost(tp_s=comm_s, tp_exposed_s=tail, tp_bytes=gather + scales.tp_bytes)


def mxfp8_scale_gather(
    profile: HardwareProfile, x: LayerShape, h: int, groups: CommGroups
) -> PassCost:
    """One NCCL all-gather of the E8M0 scales of one MXFP8 copy of a [T, h] operand beside
    its userbuffers all-gather (`tp_comm_overlap`): T·h/32 bytes (one scale per
    `costmodel.memory_allowances.MXFP8_BLOCK_ELEMENTS` elements) over the TP group, all of
    it exposed. TE ``fill_userbuffers_buffer_for_all_gather`` (`pytorch/module/base.py`,
    v2.5 to HEAD) copies the data into the userbuffers buffer and gathers the scales with a
    blocking ``all_gather_into_tensor``. Read by `_userbuffers_pair` (the norm output's and
    the output gradient's copies, exposed on the main stream) and by `mxfp8_wgrad_gradient`
    (the column-wise output gradient's, on the dgrad GEMM's send stream, where only its
    seconds count)."""
    scales_bytes = x.tokens * h / MXFP8_BLOCK_ELEMENTS
    scale_s = collective_time_s(profile, "all_gather", scales_bytes, groups.tp)
    return PassCost(tp_s=scale_s, tp_exposed_s=scale_s, tp_bytes=scales_bytes)


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
