"""Memory passes of FP8 and NVFP4 quantization on one device, from a `HardwareProfile`.

Transformer Engine casts each bf16 GEMM operand of an fp8 linear layer to FP8 under the
run's recipe (``delayed``, ``tensorwise`` current scaling, ``mxfp8``), and of an nvfp4
linear layer to NVFP4 (``nvfp4``, TE ``NVFP4BlockScaling``; `operand_recipe` names the
recipe of a GEMM dtype): the cast itself (`fp8_cast_bytes_per_element`), the amax pass of
current scaling and NVFP4 (`fp8_amax_time_s`), and for the norm output of a
``LayerNormLinear`` the path its norm kernel takes (`norm_quantization`). Each is a
memory-bound pass (`costmodel.compute.memory_bound_time_s`); `fp8_quantize_time_s` sums
them for one operand.

NVFP4 (TE ``docs/features/low_precision_training/nvfp4/nvfp4.rst``; NVIDIA, arXiv
2509.25149): E2M1 values with one FP8 E4M3 scale per 16 elements and a per-tensor fp32
scale from the tensor's amax, so an amax pass precedes the cast as under current scaling
(and, with sequence parallelism, the same TP amax all-reduce:
`costmodel.runtimes.megatron.fp8_scaling.amax_reduction_pair`). The cast writes a row-wise
and a column-wise NVFP4 copy (`costmodel.compute.NVFP4_BYTES` each), in one kernel from TE
v2.14 on and in two before (``ExecutionOptions.nvfp4_fused_rht_cast``). The 16 x 16 Random
Hadamard Transform that the recipe applies to both wgrad operands (the column-wise copies
of the input and of the output gradient) runs inside their cast, and its amax with the
amax pass (TE's fused Hadamard-amax kernel): no extra pass is priced. Stochastic rounding
of gradients is a hardware conversion instruction, no extra pass either.
"""

from __future__ import annotations

from typing import Literal

from costmodel.compute import NVFP4_BYTES, memory_bound_time_s
from costmodel.memory_allowances import (
    FP8_RECIPES,
    MXFP8_BLOCK_ELEMENTS,
    Fp8Recipe,
    QuantRecipe,
)
from profiles.schema import HardwareProfile
from specs.errors import SpecError

QUANT_RECIPES: tuple[QuantRecipe, ...] = (*FP8_RECIPES, "nvfp4")
"""Every recipe the quantization functions take: the FP8 recipes and ``nvfp4``."""


def operand_recipe(dtype: str, fp8_recipe: Fp8Recipe) -> QuantRecipe:
    """The recipe that quantizes a GEMM operand of GEMM dtype ``dtype``
    (`costmodel.compute.gemm_dtype`): ``nvfp4`` for fp4 GEMMs (an nvfp4 job), else the
    run's FP8 recipe ``fp8_recipe`` (`ExecutionOptions.fp8_recipe`)."""
    return "nvfp4" if dtype == "fp4" else fp8_recipe


def _require_recipe(recipe: str) -> None:
    if recipe not in QUANT_RECIPES:
        raise SpecError(
            f"fp8 recipe must be one of {', '.join(FP8_RECIPES)} (or nvfp4 for an nvfp4 "
            f"job), got {recipe!r}; delayed is Megatron-core's default"
        )


def fp8_quantize_time_s(
    profile: HardwareProfile,
    elements: float,
    elem: int,
    *,
    recipe: QuantRecipe,
    norm: NormQuantization | None = None,
    copies: int = 2,
    fused_rht: bool = True,
) -> float:
    """Quantizing one bf16 GEMM operand of ``elements`` elements to FP8 for a Transformer
    Engine linear layer under the FP8 ``recipe``: the cast (`fp8_cast_bytes_per_element`)
    plus, for per-tensor current scaling, the amax pass before it (`fp8_amax_time_s`).

    The cast writes the row-wise copy the GEMM reads and the column-wise (transposed) copy
    the other GEMM of the pair reads (wgrad for inputs, dgrad for output gradients), one
    byte each (TE ``cast_transpose``). Delayed scaling takes its scale from the amax
    history and records the new amax inside the cast (one kernel); MXFP8 computes its
    32-element block scales inside the cast (``MXFP8Quantizer::quantize``, one
    ``nvte_quantize_v2``; TE ``common/cast/mxfp8/quantize_mxfp8.cuh``), no extra pass.
    NVFP4 writes its two copies at `costmodel.compute.NVFP4_BYTES` each, after an amax
    pass (module docstring).

    ``norm``: the operand is the output of the norm of a ``LayerNormLinear`` (TE
    `module/layernorm_linear.py`, ``with_quantized_norm``), quantized along the path
    `norm_quantization` names, priced beyond the bf16 norm; None: a plain operand.
    ``copies``: the quantized copies written; ``fused_rht``: NVFP4's two copies in one
    kernel (`fp8_cast_bytes_per_element`).
    """
    if elements < 0:
        raise SpecError(f"fp8_quantize_time_s: elements must be >= 0, got {elements}")
    per_element = fp8_cast_bytes_per_element(
        elem, recipe=recipe, norm=norm, copies=copies, fused_rht=fused_rht
    )
    cast = memory_bound_time_s(profile, per_element * elements)
    return cast + fp8_amax_time_s(profile, elements, elem, recipe=recipe, norm=norm)


NormQuantization = Literal["fused", "fused_amax", "separate"]
"""How Transformer Engine quantizes a ``LayerNormLinear``'s norm output (`norm_quantization`):
the norm kernel writes FP8 itself, writes bf16 and its amax, or writes bf16 for a separate
quantization."""

CUDNN_NORM_TILE = 128
"""Rows and hidden size of the cuDNN MXFP8 norm kernel's tile: TE takes the fused MXFP8 path
only when both are multiples of it (``outer_size % 128 == 0 && inner_size % 128 == 0``)."""


def norm_quantization(
    recipe: QuantRecipe, *, cudnn_norm: bool, rows: float, hidden: int
) -> NormQuantization:
    """The path on which Transformer Engine quantizes the norm output of a ``LayerNormLinear``
    (``rows`` token rows on this rank, ``hidden`` wide) under the FP8 ``recipe``, with its
    norm kernels on cuDNN (``cudnn_norm``: ``NVTE_NORM_FWD_USE_CUDNN=1``) or its own.

    TE v2.8 to v2.18 ``pytorch/csrc/extensions/normalization.cpp`` (``layernorm_fwd``,
    ``rmsnorm_fwd``: ``Impl``):

    - delayed (``Float8Quantizer``): ``FULLY_FUSED`` on either backend, ``fused``;
    - MXFP8: ``FULLY_FUSED`` only with cuDNN and full 128 x 128 tiles (`CUDNN_NORM_TILE`),
      ``fused``; otherwise ``UNFUSED``, a bf16 norm then ``quantize``, ``separate``;
    - current scaling: ``FUSED_NORM_AMAX_FP8`` without cuDNN, ``fused_amax`` (the TE
      kernel writes bf16 and its amax, ``quantize_with_amax`` follows); with cuDNN
      ``UNFUSED`` (cuDNN has no amax output for an unquantized tensor,
      ``common/normalization/layernorm/ln_api.cpp``), ``separate``. TE v2.7 took
      ``fused_amax`` on either backend (it moved the norm back to its own kernel).
    - NVFP4: ``UNFUSED``, ``separate``, on either backend: the input quantizer of
      ``NVFP4BlockScaling`` applies the Random Hadamard Transform to its column-wise copy
      and takes the post-transform amax itself (``with_rht && with_post_rht_amax``); only
      without it would TE's kernel write the amax (``FUSED_NORM_AMAX_NVFP4``).
    """
    if recipe == "delayed":
        return "fused"
    if recipe == "mxfp8":
        tiles = all(float(n) % CUDNN_NORM_TILE == 0 for n in (rows, hidden))
        return "fused" if cudnn_norm and tiles else "separate"
    if recipe == "tensorwise":
        return "separate" if cudnn_norm else "fused_amax"
    _require_recipe(recipe)
    return "separate"


def fp8_cast_bytes_per_element(
    elem: int,
    *,
    recipe: QuantRecipe,
    norm: NormQuantization | None = None,
    copies: int = 2,
    fused_rht: bool = True,
) -> float:
    """Bytes per element the FP8 cast of one GEMM operand moves, beyond what the bf16 run
    moves (``elem`` = e, the activation element size).

    ``copies``: 2, the row-wise and the column-wise copy; 1, the row-wise copy alone, for
    an operand no weight-gradient GEMM reads (a frozen LoRA base layer: TE sets the input
    quantizer's column-wise usage to ``backward_needs_input``, False for a frozen weight,
    and a ``Linear`` without bias drops the output gradient's column-wise usage when
    ``not requires_wgrad``; ``pytorch/module/linear.py``, ``layernorm_linear.py`` at
    4220403e, the pin of Megatron-Bridge v0.5.0). Each copy fewer writes one FP8 byte
    (0.5625 NVFP4 bytes) less per element; the fused delayed-scaling norm also skips its
    ``nvte_transpose`` (read 1, write 1).

    Plain operand (``norm`` None), every FP8 recipe: read e, write the two FP8 copies,
    e + 2; ``nvfp4``: read e, write the two NVFP4 copies, e + 2 x 0.5625 (the Hadamard
    transform of the column-wise copy inside the cast), on every path (`norm_quantization`
    gives NVFP4 norm outputs ``separate``); without ``fused_rht``
    (`costmodel.execution.ExecutionOptions.nvfp4_fused_rht_cast`, TE before v2.14) the two
    copies come from two kernels that each read the operand, 2e + 2 x 0.5625.

    Norm output (``norm``, `norm_quantization`), with two copies:

    - ``fused``, delayed: the norm kernel writes the row-wise FP8 copy, one byte per element
      instead of e, and ``nvte_transpose`` adds the column-wise copy (read 1, write 1), net
      3 - e (TE ``ln_api.cpp``: "Compute FP8 transpose if required", tensor scaling only).
    - ``fused``, MXFP8: cuDNN's norm writes both MXFP8 copies (``_z_mx_row`` and, in
      training, ``_z_mx_col``: TE ``common/normalization/common.cpp``), net 2 - e.
    - ``fused_amax`` (current scaling, TE's kernel): the norm writes bf16 and its amax,
      then ``Float8CurrentScalingQuantizer::quantize_with_amax`` casts it, e + 2, without
      the amax read (`fp8_amax_time_s`).
    - ``separate``: a bf16 norm, then the plain cast, e + 2 (current scaling with its full
      amax pass).
    """
    _require_recipe(recipe)
    if copies not in (1, 2):
        raise SpecError(
            f"fp8_cast_bytes_per_element: copies must be 1 (row-wise) or 2 (row-wise and "
            f"column-wise), got {copies!r}"
        )
    if recipe == "nvfp4":
        if norm in ("fused", "fused_amax"):
            raise SpecError(
                f"fp8_cast_bytes_per_element: NVFP4 norm outputs take the separate path, got "
                f"{norm!r}; take the path from norm_quantization"
            )
        reads = 1 if fused_rht or copies == 1 else 2
        return reads * elem + copies * NVFP4_BYTES
    if norm == "fused":
        if recipe == "tensorwise":
            raise SpecError(
                "fp8_cast_bytes_per_element: current scaling (tensorwise) has no fused "
                "norm + quantize kernel in Transformer Engine; take the path from "
                "norm_quantization"
            )
        transpose = 2 * (copies - 1) if recipe == "delayed" else copies - 1
        return max(0, 1 + transpose - elem)
    if norm == "fused_amax" and recipe != "tensorwise":
        raise SpecError(
            f"fp8_cast_bytes_per_element: the norm's amax output (fused_amax) is current "
            f"scaling's path, got recipe {recipe!r}; take the path from norm_quantization"
        )
    return elem + copies


def nvfp4_gather_fixup_time_s(profile: HardwareProfile, elements: float) -> float:
    """Seconds of the pass that puts a gathered NVFP4 column-wise copy of ``elements``
    elements (the full [T, h] tensor) back in order after a sequence-parallel all-gather.

    Each rank's column-wise copy is transposed, [h, T/tp], so gathering along the first
    dimension interleaves the ranks' pieces; ``_post_process_nvfp4_gather`` (TE
    `pytorch/distributed.py`, at the Megatron-Bridge pins 5671fd36, 71bbefbf, 4220403e)
    rewrites the data and its scales with ``tex.swap_first_dims`` (a new tensor each: read
    and write `costmodel.compute.NVFP4_BYTES` per element, two kernels). It runs on the
    compute stream after the backward gathers of an nvfp4 job: the norm output the
    column-parallel wgrad reads and the row-parallel output gradient."""
    return memory_bound_time_s(profile, 2 * NVFP4_BYTES * elements, num_ops=2)


def gathered_bytes_per_element(recipe: QuantRecipe) -> float:
    """Bytes per element of one quantized copy that Transformer Engine all-gathers along
    the sequence (`pytorch/distributed.py`, ``gather_along_first_dim``, TE v2.5 to the
    2026-08 HEAD; the same dispatch at the Megatron-Bridge pins 5671fd36, 71bbefbf,
    4220403e):

    - ``delayed`` and ``tensorwise`` (``Float8Quantizer``, ``Float8CurrentScalingQuantizer``):
      ``_all_gather_fp8`` gathers the row-wise FP8 data, 1 byte, and reuses the local
      ``_scale_inv`` (the scale is the same on every rank: delayed scaling's amax history,
      current scaling's amax all-reduced over the TP group first);
    - ``mxfp8``: ``_all_gather_mxfp8`` gathers the FP8 data and its E8M0 scales in one
      coalesced pair, 1 + 1/32 bytes per copy (`MXFP8_BLOCK_ELEMENTS`);
    - ``nvfp4``: ``_all_gather_nvfp4``, `costmodel.compute.NVFP4_BYTES` per copy.

    TE 1.x gathered FP8 the same way (``gather_along_first_dim`` of the uint8 norm output
    and of the ``cast_to_fp8`` output gradient; ``module/layernorm_linear.py``,
    ``module/base.py`` ``grad_output_preprocess``, v1.4 to v1.13)."""
    _require_recipe(recipe)
    if recipe == "nvfp4":
        return NVFP4_BYTES
    if recipe == "mxfp8":
        return 1 + 1 / MXFP8_BLOCK_ELEMENTS
    return 1.0


def fp8_gather_transpose_time_s(profile: HardwareProfile, elements: float) -> float:
    """Seconds of the transpose that makes the column-wise copy of a gathered per-tensor
    FP8 tensor (``delayed``, ``tensorwise``) of ``elements`` elements (the full [T, h]
    tensor) on a device whose FP8 GEMMs take only the TN layout (Hopper;
    `costmodel.execution.ExecutionOptions.fp8_tn_gemm_only`).

    ``_all_gather_fp8`` (TE `pytorch/distributed.py`, v2.5 to HEAD) gathers the row-wise
    data alone, the quantizer set to ``columnwise=False`` for the local cast ("We cannot
    directly all-gather the transposed FP8 tensor"); the wgrad GEMM's column-wise copy is
    then ``_create_transpose`` of the gathered data (the output gradient,
    ``needs_transpose`` when ``not is_non_tn_fp8_gemm_supported()``) or
    ``update_usage(columnwise_usage=True)`` on the re-gathered norm output
    (``_LayerNormLinear.backward``), one ``fp8_transpose`` each: read and write 1 byte per
    element. TE 1.x ran ``tex.fp8_transpose`` after both gathers the same way. On
    Blackwell the GEMM reads the row-wise data in the NT layout and no pass runs."""
    return memory_bound_time_s(profile, 2 * elements)


def fp8_amax_time_s(
    profile: HardwareProfile,
    elements: float,
    elem: int,
    *,
    recipe: QuantRecipe,
    norm: NormQuantization | None = None,
) -> float:
    """Seconds of the amax and scale kernels that per-tensor current scaling
    (``tensorwise``) and NVFP4 (``nvfp4``, for its per-tensor fp32 scale) run before the
    cast of an operand of ``elements`` elements; 0 for the other recipes (delayed and MXFP8
    scales come with the cast: `fp8_quantize_time_s`). NVFP4 is priced as current scaling's
    ``separate`` path: one read of the bf16 operand (the post-Hadamard amax of the
    column-wise copy comes from the same kernel) and two single-element kernels.

    ``Float8CurrentScalingQuantizer::quantize`` (TE `pytorch/csrc/quantizer.cpp`) launches
    ``nvte_compute_amax`` (TE `common/recipe/current_scaling.cu`: ``zero_amax_kernel``, then
    ``amax_kernel`` reading the bf16 tensor, e per element), then
    ``nvte_compute_scale_from_amax`` (one single-thread kernel), then the cast: three
    kernels and e bytes per element before the cast. A norm output on the ``fused_amax``
    path (`norm_quantization`) gets its amax from the norm kernel: the zero-filled amax
    buffer (``create_unquantized_tensor_with_amax``) and the scale kernel remain, no read;
    on the ``separate`` path (cuDNN norm) the full pass runs. The single-element kernels
    move no bytes that count; each costs the profile's launch overhead (0 on GPU profiles).
    """
    if recipe not in ("tensorwise", "nvfp4"):
        return 0.0
    bookkeeping = memory_bound_time_s(profile, 0.0, num_ops=2)
    if norm == "fused_amax":
        return bookkeeping
    return memory_bound_time_s(profile, elem * elements) + bookkeeping
