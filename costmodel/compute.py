"""Operator times on one device, from a `HardwareProfile`.

Three families, each a pure function of shapes and the profile:

- GEMMs: ``2·m·n·k`` FLOP at the dtype's peak times the profile's shape-dependent
  efficiency (`profiles.lookup.gemm_efficiency`); a batched GEMM is looked up by its total
  work, since one batched kernel fills the device like one large GEMM.
- Attention core: ``flash`` (fused, FlashAttention/cuDNN, Megatron's default through
  Transformer Engine) divides the causal-counted FLOPs by the profile's measured
  attention throughput; ``materialized`` (Megatron's pre-2022 path: QKᵀ GEMM, fused
  scale-mask-softmax, dropout, attention x V GEMM) runs both batched GEMMs over the full
  s x s square (the causal mask is applied after the GEMM, so no work is saved) and moves
  the score matrix through memory for softmax and dropout.
- Memory-bound operators (norms, RoPE, activation functions, residual/dropout adds,
  softmax, cross entropy, embedding lookups, the optimizer step): bytes moved divided by
  the achievable bandwidth (`profiles.lookup.memory_bandwidth_Bps`), the roofline model
  (Williams et al. 2009) that Calculon and vTrain also use for vector ops.

Every operator adds `ComputeProfile.op_overhead_s`, the host time of one launch (0 on GPU
profiles, where launches run ahead of the device; large on CPU profiles).

Byte counts per operator are stated in each docstring: ``e`` is the element size of
activations (2 for bf16/fp8 runs, 4 for fp32), a forward reads its inputs once and writes
its outputs once, and a backward reads the saved inputs and the output gradient and writes
the input gradient.
"""

from __future__ import annotations

from typing import Literal

from costmodel.memory_allowances import FP8_RECIPES, Fp8Recipe
from costmodel.optimizer_state import AdamStateBytes, adam_step_state_bytes
from profiles.lookup import (
    attention_tflops,
    gemm_depth_factor,
    gemm_efficiency,
    memory_bandwidth_Bps,
    peak_flops,
)
from profiles.schema import HardwareProfile
from specs.errors import SpecError

AttentionKernelName = Literal["flash", "materialized"]
Direction = Literal["forward", "backward"]

ATTENTION_BACKWARD_FLOPS_RATIO = 2.5
"""Fused attention backward FLOPs over forward FLOPs: dQ, dK, dV plus the recomputed
scores (FlashAttention-2 paper, arXiv 2307.08691, benchmark convention)."""
FP32_BYTES = 4
"""Bytes of one fp32 element: the one definition for the cost model."""
MASK_BYTES = 1
"""Bytes of one boolean mask element (torch.bool)."""


def _require_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise SpecError(f"{name} must be > 0, got {value!r}; pass a positive size")


def gemm_dtype(precision: str) -> str:
    """The GEMM dtype of a job precision: bf16, fp8 or fp32 (fp8 runs keep bf16 elsewhere)."""
    if precision not in ("bf16", "fp8", "fp32", "fp16"):
        raise SpecError(f"unknown precision {precision!r}; valid: bf16, fp8, fp32")
    return precision


def activation_dtype(precision: str) -> str:
    """Dtype of activations and attention: fp32 for fp32 runs, else bf16 (Megatron-LM keeps
    attention and element-wise ops in bf16 under fp8 GEMMs)."""
    return "fp32" if precision == "fp32" else "bf16"


def element_bytes(precision: str) -> int:
    """Bytes per activation element: 4 for fp32 runs, else 2."""
    return 4 if precision == "fp32" else 2


def op_overhead_s(profile: HardwareProfile) -> float:
    """Host time of one operator launch (`ComputeProfile.op_overhead_s`)."""
    return profile.compute.op_overhead_s


# ---- GEMMs ----------------------------------------------------------------------------


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": FP32_BYTES}
"""Bytes per element of GEMM inputs; outputs are written in bf16 (fp32 for fp32 GEMMs)."""


def gemm_time_s(profile: HardwareProfile, m: int, n: int, k: int, dtype: str) -> float:
    """Seconds of an (m x k) @ (k x n) GEMM (`batched_gemm_time_s` with one matrix)."""
    return batched_gemm_time_s(profile, 1, m, n, k, dtype)


def batched_gemm_time_s(
    profile: HardwareProfile, batch: int, m: int, n: int, k: int, dtype: str
) -> float:
    """Seconds of ``batch`` independent (m x k) @ (k x n) GEMMs run as one kernel.

    Roofline of two limits, plus one op overhead:
    - compute: batch·2·m·n·k FLOP at peak x the profile's efficiency, looked up for the
      total work with the per-matrix alignment (one batched kernel tiles all matrices at
      once; `gemm_efficiency`), times the depth factor of k (`gemm_depth_factor`: every
      output tile pays a fixed part of its K loop, so a shallow GEMM runs below a deep one
      of the same work);
    - memory: reading both inputs and writing the output once, batch·(m·k + k·n)·in +
      batch·m·n·out bytes at the achievable bandwidth. It binds for thin GEMMs such as
      attention's QKᵀ over a head dimension of 64-128, whose arithmetic intensity (about
      the head dimension, in FLOP/byte) is below an A100's 153 FLOP/byte ridge point.
    """
    _require_positive(batch=batch)
    flops = 2.0 * batch * m * n * k
    efficiency = gemm_efficiency(profile, batch * m, n, k, dtype) * gemm_depth_factor(profile, k)
    rate = peak_flops(profile, dtype) * efficiency
    elem_in = DTYPE_BYTES.get(dtype, 2)
    elem_out = 4 if dtype == "fp32" else 2
    moved = batch * ((m * k + k * n) * elem_in + m * n * elem_out)
    return max(flops / rate, moved / memory_bandwidth_Bps(profile, moved)) + op_overhead_s(profile)


# ---- memory-bound operators ------------------------------------------------------------


def memory_bound_time_s(profile: HardwareProfile, bytes_moved: float, num_ops: int = 1) -> float:
    """Seconds to move ``bytes_moved`` through device memory in ``num_ops`` kernels.

    Roofline: bytes / (peak bandwidth · efficiency) plus one op overhead per kernel; the
    efficiency of a profile's size curve is read at one kernel's share of the bytes
    (`profiles.lookup.memory_bandwidth_Bps`).
    """
    if bytes_moved < 0 or num_ops < 0:
        raise SpecError(
            f"memory_bound_time_s: bytes_moved ({bytes_moved}) and num_ops ({num_ops}) must be >= 0"
        )
    per_kernel = bytes_moved / max(num_ops, 1)
    bandwidth = memory_bandwidth_Bps(profile, per_kernel) if bytes_moved > 0 else 1.0
    return bytes_moved / bandwidth + num_ops * op_overhead_s(profile)


def norm_time_s(
    profile: HardwareProfile,
    tokens: float,
    width: int,
    elem: int,
    direction: Direction,
    *,
    two_pass_backward: bool = False,
) -> float:
    """LayerNorm/RMSNorm over ``tokens`` rows of ``width``.

    Forward reads x and writes y: 2·e per element. Backward reads x and dy and writes dx:
    3·e per element (the weight gradient is a reduction over the same reads, one fused
    kernel as in Transformer Engine). ``two_pass_backward``: apex `FusedLayerNorm`
    (Megatron-LM 2021) reads x and dy once for the weight-gradient partial sums and again
    for the input gradient, 5·e per element in two kernels.
    """
    if direction == "forward":
        return memory_bound_time_s(profile, 2 * elem * tokens * width)
    if two_pass_backward:
        return memory_bound_time_s(profile, 5 * elem * tokens * width, num_ops=2)
    return memory_bound_time_s(profile, 3 * elem * tokens * width)


def rope_time_s(
    profile: HardwareProfile, tokens: float, qk_width: int, elem: int, direction: Direction
) -> float:
    """Rotary embedding applied to the query and key rows (``qk_width`` = q + kv per rank):
    read and write each element once, in both passes."""
    return memory_bound_time_s(profile, 2 * elem * tokens * qk_width)


def activation_time_s(
    profile: HardwareProfile,
    tokens: float,
    ffn_width: float,
    elem: int,
    *,
    gated: bool,
    direction: Direction,
) -> float:
    """MLP activation over ``tokens`` rows of ``ffn_width`` (per rank).

    GELU: forward reads x, writes y (2·e); backward reads x and dy, writes dx (3·e).
    SwiGLU: forward reads gate and up, writes y (3·e); backward reads gate, up and dy,
    writes dgate and dup (5·e).
    """
    forward = direction == "forward"
    passes = (3 if forward else 5) if gated else (2 if forward else 3)
    return memory_bound_time_s(profile, passes * elem * tokens * ffn_width)


def residual_time_s(
    profile: HardwareProfile,
    tokens: float,
    width: int,
    elem: int,
    direction: Direction = "forward",
    *,
    dropout: bool = False,
) -> float:
    """Residual add with (bias-)dropout, Megatron's fused bias-dropout-add.

    Forward reads the branch and the residual and writes the sum (3·e per element), plus a
    1-byte dropout mask with ``dropout``. Backward: autograd sums the two gradients that
    reach the residual stream (read 2·e, write e); with ``dropout`` the branch gradient
    first goes through the mask (read the gradient and the mask, write the gradient:
    2·e + 1), a second kernel.
    """
    if direction == "forward":
        per_element = 3 * elem + (MASK_BYTES if dropout else 0)
        return memory_bound_time_s(profile, per_element * tokens * width)
    if dropout:
        per_element = 5 * elem + MASK_BYTES
        return memory_bound_time_s(profile, per_element * tokens * width, num_ops=2)
    return memory_bound_time_s(profile, 3 * elem * tokens * width)


def softmax_dropout_time_s(
    profile: HardwareProfile, scores: float, elem: int, direction: Direction
) -> float:
    """Materialized attention scores (``scores`` elements): fused scale-mask-softmax, then
    dropout with a 1-byte mask (Megatron `FusedScaleMaskSoftmax` and attention dropout).

    Forward: softmax reads and writes the scores (2·e), dropout reads them and writes the
    output and the mask (2·e + 1). Backward: dropout reads the gradient and the mask, writes
    the gradient (2·e + 1); softmax reads probabilities and gradient, writes the score
    gradient (3·e).
    """
    per_element = 4 * elem + MASK_BYTES if direction == "forward" else 5 * elem + MASK_BYTES
    return memory_bound_time_s(profile, per_element * scores, num_ops=2)


def cross_entropy_time_s(
    profile: HardwareProfile, tokens: float, vocab_per_rank: float, elem: int, direction: Direction
) -> float:
    """Vocab-parallel cross entropy over ``tokens`` rows of the rank's vocabulary slice.

    Megatron-LM `_VocabParallelCrossEntropy` (mpu/cross_entropy.py in 2021, core
    tensor_parallel/cross_entropy.py today) works in fp32 on a cast of the logits, with one
    kernel per step. Forward: cast (read e, write 4), max (read 4), subtract the max in place
    (8), exp in place (8), sum (4), divide in place (8) to keep the softmax for backward:
    e + 36 bytes per logit in six kernels. Backward: scale the saved softmax by the loss
    gradient in place (8), then cast back to the logits dtype (read 4, write e): e + 12 in
    two kernels. A fused cross entropy (`--cross-entropy-loss-fusion`) would move less.
    """
    if direction == "forward":
        return memory_bound_time_s(profile, (elem + 36) * tokens * vocab_per_rank, num_ops=6)
    return memory_bound_time_s(profile, (elem + 12) * tokens * vocab_per_rank, num_ops=2)


def embedding_time_s(
    profile: HardwareProfile, tokens: float, width: int, elem: int, direction: Direction
) -> float:
    """Word-embedding lookup of ``tokens`` rows of ``width``.

    Forward gathers rows and writes them (2·e). Backward sums the output gradient of the
    tokens into their rows of the weight's dense gradient (``F.embedding`` backward,
    PyTorch ``aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu``: ``compute_grad_weight``
    reads dy and writes fp32 partial sums per sorted segment, ``sum_and_scatter`` reads them
    and writes the rows: 2·e + 8); the dense gradient's allocation and its accumulation into
    the main gradient are `embedding_weight_grad_time_s`.
    """
    per_element = 2 * elem if direction == "forward" else 2 * elem + 2 * FP32_BYTES
    return memory_bound_time_s(profile, per_element * tokens * width)


def embedding_weight_grad_time_s(
    profile: HardwareProfile,
    rows: float,
    width: int,
    elem: int,
    main_grad_bytes: int = FP32_BYTES,
) -> float:
    """Per backward pass, the passes over a ``rows`` x ``width`` embedding slice that its
    dense gradient costs beyond the token rows (`embedding_time_s`).

    Megatron's `VocabParallelEmbedding` looks rows up with ``F.embedding`` (non-sparse), whose
    backward returns a dense gradient of the whole vocabulary slice: zero-filled first
    (write e per element), then the data-parallel wrapper's gradient hook adds it into the
    main gradient (``param.main_grad.add_(param.grad.data)``: read e, read and write
    ``main_grad_bytes``), since the embedding has no fused weight-gradient accumulation.
    Sources: NVIDIA/Megatron-LM ``megatron/core/tensor_parallel/layers.py``
    (``VocabParallelEmbedding.forward``) and
    ``megatron/core/distributed/distributed_data_parallel.py`` (``_make_param_hook``),
    core_r0.8.0; the 2021 ``megatron/model/distributed.py`` hook is the same add.
    """
    if rows < 0 or width < 0:
        raise SpecError(
            f"embedding_weight_grad_time_s: rows ({rows}) and width ({width}) must be >= 0"
        )
    per_element = 2 * elem + 2 * main_grad_bytes
    return memory_bound_time_s(profile, per_element * rows * width, num_ops=2)


def grad_accumulation_time_s(
    profile: HardwareProfile, params: float, grad_bytes: int, main_grad_bytes: int = FP32_BYTES
) -> float:
    """Unfused weight-gradient accumulation over ``params`` parameters for one microbatch:
    read the fresh gradient (``grad_bytes`` each) and read-modify-write the main gradient
    (``main_grad_bytes`` each way), as Megatron-LM's DDP hook ``main_grad.add_(grad)`` does
    without `--gradient-accumulation-fusion` (and plain PyTorch autograd does into
    ``.grad``). The main gradient is fp32 (4) by default, fp16 (2) in fp16 runs without
    `--accumulate-allreduce-grads-in-fp32`."""
    if params < 0:
        raise SpecError(f"grad_accumulation_time_s: params must be >= 0, got {params}")
    return memory_bound_time_s(profile, params * (grad_bytes + 2 * main_grad_bytes))


def bias_time_s(
    profile: HardwareProfile, tokens: float, width: float, elem: int, direction: Direction
) -> float:
    """A linear bias handled outside its GEMM, over ``tokens`` rows of ``width`` outputs.

    Forward: the in-place add after the matmul reads and writes the GEMM output (2·e per
    element; PyTorch <= 1.10 `F.linear` on 3-D inputs). Backward: autograd reduces the
    output gradient over the tokens for the bias gradient, one read (e per element).
    """
    per_element = 2 * elem if direction == "forward" else elem
    return memory_bound_time_s(profile, per_element * tokens * width)


def fp8_quantize_time_s(
    profile: HardwareProfile,
    elements: float,
    elem: int,
    *,
    recipe: Fp8Recipe,
    norm: NormQuantization | None = None,
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

    ``norm``: the operand is the output of the norm of a ``LayerNormLinear`` (TE
    `module/layernorm_linear.py`, ``with_quantized_norm``), quantized along the path
    `norm_quantization` names, priced beyond the bf16 norm; None: a plain operand.
    """
    if elements < 0:
        raise SpecError(f"fp8_quantize_time_s: elements must be >= 0, got {elements}")
    per_element = fp8_cast_bytes_per_element(elem, recipe=recipe, norm=norm)
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
    recipe: Fp8Recipe, *, cudnn_norm: bool, rows: float, hidden: int
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
    """
    if recipe == "delayed":
        return "fused"
    if recipe == "mxfp8":
        tiles = all(float(n) % CUDNN_NORM_TILE == 0 for n in (rows, hidden))
        return "fused" if cudnn_norm and tiles else "separate"
    if recipe == "tensorwise":
        return "separate" if cudnn_norm else "fused_amax"
    raise SpecError(
        f"fp8 recipe must be one of {', '.join(FP8_RECIPES)}, got {recipe!r}; "
        "delayed is Megatron-core's default"
    )


def fp8_cast_bytes_per_element(
    elem: int, *, recipe: Fp8Recipe, norm: NormQuantization | None = None
) -> int:
    """Bytes per element the FP8 cast of one GEMM operand moves, beyond what the bf16 run
    moves (``elem`` = e, the activation element size).

    Plain operand (``norm`` None), every recipe: read e, write the two FP8 copies, e + 2.

    Norm output (``norm``, `norm_quantization`):

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
    if recipe not in FP8_RECIPES:
        raise SpecError(
            f"fp8 recipe must be one of {', '.join(FP8_RECIPES)}, got {recipe!r}; "
            "delayed is Megatron-core's default"
        )
    if norm == "fused":
        if recipe == "tensorwise":
            raise SpecError(
                "fp8_cast_bytes_per_element: current scaling (tensorwise) has no fused "
                "norm + quantize kernel in Transformer Engine; take the path from "
                "norm_quantization"
            )
        return max(0, (3 if recipe == "delayed" else 2) - elem)
    if norm == "fused_amax" and recipe != "tensorwise":
        raise SpecError(
            f"fp8_cast_bytes_per_element: the norm's amax output (fused_amax) is current "
            f"scaling's path, got recipe {recipe!r}; take the path from norm_quantization"
        )
    return elem + 2


def fp8_amax_time_s(
    profile: HardwareProfile,
    elements: float,
    elem: int,
    *,
    recipe: Fp8Recipe,
    norm: NormQuantization | None = None,
) -> float:
    """Seconds of the amax and scale kernels that per-tensor current scaling
    (``tensorwise``) runs before the cast of an operand of ``elements`` elements; 0 for the
    other recipes (delayed and MXFP8 scales come with the cast: `fp8_quantize_time_s`).

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
    if recipe != "tensorwise":
        return 0.0
    bookkeeping = memory_bound_time_s(profile, 0.0, num_ops=2)
    if norm == "fused_amax":
        return bookkeeping
    return memory_bound_time_s(profile, elem * elements) + bookkeeping


def grad_buffer_passes_time_s(
    profile: HardwareProfile,
    params: float,
    main_grad_bytes: int = FP32_BYTES,
    *,
    scale: bool,
    nan_check: bool,
) -> float:
    """Per-iteration passes of Megatron's data-parallel wrapper over a rank's gradient
    buffer (``params`` elements of ``main_grad_bytes``) before the reduction, on the compute
    stream.

    ``scale``: the gradients are divided by the data-parallel size in place, a read and a
    write (Megatron-LM 2021-2023 `DistributedDataParallel.allreduce_gradients`,
    ``buffer_.data /= get_data_parallel_world_size()``; Megatron-core
    `_ParamAndGradBucketGroup.start_grad_sync`, ``grad_data *= gradient_scaling_factor``).
    ``nan_check``: Megatron-core's ``check_for_nan_in_grad`` takes the norm of every bucket
    first (`check_grads`, on by default: ``--check-for-nan-in-loss-and-grad``), one read.
    """
    if params < 0:
        raise SpecError(f"grad_buffer_passes_time_s: params must be >= 0, got {params}")
    passes = (2 if scale else 0) + (1 if nan_check else 0)
    return memory_bound_time_s(profile, passes * main_grad_bytes * params) if passes else 0.0


def optimizer_step_time_s(
    profile: HardwareProfile,
    *,
    shard_params: float,
    local_params: float,
    mixed_precision: bool,
    num_tensors: int,
    loss_scaling: bool = False,
    main_grad_bytes: int = FP32_BYTES,
    state: AdamStateBytes | None = None,
    offloaded_params: float = 0.0,
) -> float:
    """One Adam step on one rank, memory-bound (fused multi-tensor kernels).

    Per parameter of the rank's optimizer shard: read the fp32 gradient (4), read and write
    Adam m and v (16), read and write the fp32 master weight (8) and, under mixed precision,
    write the bf16 copy (2); an fp32 run updates the weight in place (8, no copy); the
    gradient-norm pass for clipping reads the shard's main gradients (4 once they are fp32
    copies, else ``main_grad_bytes``): Megatron-core's ``get_main_grads_for_grad_norm``
    takes the gradients of the optimizer's own parameters, which the distributed optimizer
    limits to its shard (``shard_main_param.grad``). Per local parameter (the full gradient
    buffer): zeroing it for the next iteration writes it (``main_grad_bytes``). Source:
    Megatron-LM `DistributedOptimizer.step` (copy-to-main-grad, clip, inner step,
    copy-main-to-model; megatron/core/optimizer/optimizer.py and distrib_optimizer.py,
    core_r0.8.0). Each of the four passes launches about one kernel per parameter tensor.

    A 16-bit gradient buffer (``main_grad_bytes`` 2) under mixed precision is copied into
    fp32 main gradients first (``shard_main_param.grad = shard_model_grad.float()``: read 2,
    write 4 per shard parameter, one more pass). ``loss_scaling`` (fp16, Megatron
    `FP16OptimizerWithFP16Params`): the same copy plus the unscale with an inf/NaN check
    (read and write 4), two more passes.

    ``state``: Adam's state under Megatron-LM's precision-aware optimizer
    (`costmodel.optimizer_state.adam_state_bytes`; None: the default fp32 state). Its
    weight and moment traffic is `costmodel.optimizer_state.adam_step_state_bytes`; where
    Transformer Engine holds the master weights (``te_master``) the kernel reads the
    gradient buffer's shard at ``main_grad_bytes`` with no fp32 copy
    (``shard_main_param.decoupled_grad = shard_model_grad``, Megatron-core
    ``distrib_optimizer.py`` ``_copy_model_grads_to_main_grads``, snapshot d98e8a64).

    ``offloaded_params`` of the shard take their Adam step on the host (optimizer CPU
    offload, `costmodel.optimizer_offload`): the device no longer reads their gradient nor
    moves their ``state``'s weight and moment bytes (28, or 30 with the 16-bit copy, fewer
    per parameter with the default state, which is the state under offload:
    `costmodel.optimizer_state.adam_state_bytes`); the norm, the zeroing and the gradient
    copy still cover the whole shard.
    """
    if shard_params < 0 or local_params < 0 or not 0 <= offloaded_params <= shard_params:
        raise SpecError(
            f"optimizer_step_time_s: shard_params ({shard_params}) and local_params "
            f"({local_params}) must be >= 0 and offloaded_params ({offloaded_params}) in "
            "[0, shard_params]"
        )
    te_master = state is not None and state.te_master
    if state is None:
        weights_and_moments, state_passes = 16 + 8 + (2 if mixed_precision else 0), 0
    else:
        weights_and_moments, state_passes = adam_step_state_bytes(
            state, mixed_precision=mixed_precision
        )
    copied = loss_scaling or (mixed_precision and main_grad_bytes != FP32_BYTES and not te_master)
    adam = (main_grad_bytes if te_master else FP32_BYTES) + weights_and_moments
    per_shard = adam
    passes = 4 + state_passes
    if copied:
        per_shard += main_grad_bytes + FP32_BYTES
        passes += 1
    if loss_scaling:
        per_shard += 8
        passes += 1
    per_shard += FP32_BYTES if copied else main_grad_bytes  # the norm of the main gradients
    bytes_moved = per_shard * shard_params + main_grad_bytes * local_params
    bytes_moved -= adam * offloaded_params
    return memory_bound_time_s(profile, bytes_moved, num_ops=passes * max(num_tensors, 1))


# ---- attention core --------------------------------------------------------------------


def attention_core_time_s(
    profile: HardwareProfile,
    *,
    causal_forward_flops: float,
    batch_heads: float,
    seq_q: float,
    seq_kv: int,
    head_dim: int,
    precision: str,
    kernel: AttentionKernelName,
    direction: Direction,
) -> float:
    """One pass of the attention core on one rank.

    ``causal_forward_flops`` are the forward FLOPs with the causal mask counted as half
    (`costmodel.flops.core_attention_forward_flops_per_token` x tokens on the rank).

    flash: time = FLOPs of the pass (backward 2.5 x forward) / the profile's throughput at
    ``seq_kv`` (per-chunk length under context parallelism) and ``head_dim``. When the
    profile has no attention curve for the dtype (a CPU profile, say), the causal FLOPs run
    at the GEMM efficiency of the QKᵀ shape instead. The pass takes at least the
    exponential time of `flash_exp_time_s` on profiles with an SFU rate.

    materialized: forward runs two batched GEMMs over the full ``seq_q x seq_kv`` square
    (the causal mask is applied to the scores, so no work is saved) and the
    softmax/dropout over ``batch_heads·seq_q·seq_kv`` scores; backward runs four batched
    GEMMs (dP, dV, dQ, dK) and the backward softmax/dropout.
    """
    if kernel not in ("flash", "materialized"):
        raise SpecError(f"attention kernel must be 'flash' or 'materialized', got {kernel!r}")
    if causal_forward_flops <= 0:
        return 0.0
    att_dtype = activation_dtype(precision)
    ratio = 1.0 if direction == "forward" else ATTENTION_BACKWARD_FLOPS_RATIO
    if kernel == "flash":
        tensor_s = _flash_time_s(
            profile, causal_forward_flops * ratio, seq_kv, head_dim, att_dtype, direction
        )
        return max(tensor_s, flash_exp_time_s(profile, causal_forward_flops, head_dim))
    dtype = gemm_dtype(att_dtype)
    batch = max(round(batch_heads), 1)
    q, kv, d = max(round(seq_q), 1), max(int(seq_kv), 1), head_dim
    if direction == "forward":  # QKᵀ, then probabilities x V
        shapes = ((q, kv, d), (q, d, kv))
    else:  # dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q
        shapes = ((q, kv, d), (kv, d, q), (q, d, kv), (kv, d, q))
    gemm_s = sum(batched_gemm_time_s(profile, batch, *shape, dtype) for shape in shapes)
    scores = batch_heads * seq_q * seq_kv
    return gemm_s + softmax_dropout_time_s(profile, scores, element_bytes(precision), direction)


FLASH_FORWARD_FLOPS_PER_SCORE_HEAD_DIM = 4.0
"""Forward tensor FLOPs of a fused-attention kernel per score element and per unit of head
dimension: QKᵀ and P·V, 2·d each (the FlashAttention FLOP convention,
`profiles.lookup.attention_tflops`)."""


def flash_exp_time_s(profile: HardwareProfile, causal_forward_flops: float, head_dim: int) -> float:
    """Seconds the special function units need for one pass of a fused-attention kernel:
    one exponential per (causally counted) score element, forward P = exp(S - m) and
    backward the recomputed P = exp(S - lse), at `ComputeProfile.exp_per_s`; 0 without
    that figure.

    Score elements = ``causal_forward_flops`` / (4·d). FlashAttention-4 (together.ai/blog/
    flashattention-4) overlaps the exponentials with the MMAs in a ping-pong pipeline, so
    `attention_core_time_s` takes the larger of this and the tensor time, not their sum;
    the MUFU unit does 16 exponentials per clock per SM on Hopper and Blackwell alike
    (same source), which caps a d = 64 forward on B200 near 5e12·256 = 1.28 PFLOP/s.
    """
    if profile.compute.exp_per_s <= 0.0 or head_dim < 1:
        return 0.0
    scores = causal_forward_flops / (FLASH_FORWARD_FLOPS_PER_SCORE_HEAD_DIM * head_dim)
    return scores / profile.compute.exp_per_s


def _flash_time_s(
    profile: HardwareProfile,
    flops: float,
    seq_kv: int,
    head_dim: int,
    dtype: str,
    direction: Direction,
) -> float:
    has_curve = any(
        c.direction == direction and c.dtype == dtype for c in profile.compute.attention
    )
    if has_curve:
        tflops = attention_tflops(profile, direction, max(int(seq_kv), 1), head_dim, dtype)
        return flops / (tflops * 1e12) + op_overhead_s(profile)
    m = max(int(seq_kv), 1)
    rate = peak_flops(profile, dtype) * gemm_efficiency(profile, m, m, head_dim, dtype)
    return flops / rate + op_overhead_s(profile)
