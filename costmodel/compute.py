"""Operator times on one device, from a `HardwareProfile`: GEMMs and the memory-bound
operators of a transformer layer, each a pure function of shapes and the profile.

- GEMMs: ``2·m·n·k`` FLOP at the dtype's peak times the profile's shape-dependent
  efficiency (`profiles.lookup.gemm_efficiency`); a batched GEMM is looked up by its total
  work, since one batched kernel fills the device like one large GEMM.
- Memory-bound operators (norms, RoPE, activation functions, residual/dropout adds,
  cross entropy, embedding lookups, bias adds and reductions): bytes moved divided by
  the achievable bandwidth (`profiles.lookup.memory_bandwidth_Bps`), the roofline model
  (Williams et al. 2009) that Calculon and vTrain also use for vector ops.

The other operator families build on these: the attention core in
`costmodel.attention_core`, FP8 quantization in `costmodel.fp8_quantization`, gradient
accumulation, gradient-buffer passes and the optimizer step in `costmodel.optimizer_passes`.

Every operator adds `ComputeProfile.op_overhead_s`, the host time of one launch (0 on GPU
profiles, where launches run ahead of the device; large on CPU profiles).

Byte counts per operator are stated in each docstring: ``e`` is the element size of
activations (2 for bf16, fp8 and nvfp4 runs, 4 for fp32), a forward reads its inputs once and writes
its outputs once, and a backward reads the saved inputs and the output gradient and writes
the input gradient.
"""

from __future__ import annotations

from typing import Literal

from profiles.lookup import (
    gemm_depth_factor,
    gemm_efficiency,
    memory_bandwidth_Bps,
    peak_flops,
)
from profiles.schema import HardwareProfile
from specs.errors import SpecError

AttentionKernelName = Literal["flash", "materialized"]
Direction = Literal["forward", "backward"]

FP32_BYTES = 4
"""Bytes of one fp32 element: the one definition for the cost model."""
MASK_BYTES = 1
"""Bytes of one boolean mask element (torch.bool)."""


def _require_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise SpecError(f"{name} must be > 0, got {value!r}; pass a positive size")


LOW_PRECISION_GEMM_DTYPES: tuple[str, ...] = ("fp8", "fp4")
"""GEMM dtypes whose operands Transformer Engine quantizes from bf16 (`gemm_dtype` of
``fp8`` and ``nvfp4`` jobs): the quantization passes, the saved quantized GEMM inputs and
the recipe's weight storage apply to them, attention and element-wise ops stay bf16."""


def gemm_dtype(precision: str) -> str:
    """The GEMM dtype of a job precision: bf16, fp8, fp4 (an ``nvfp4`` job) or fp32; fp8
    and nvfp4 runs keep bf16 elsewhere."""
    if precision not in ("bf16", "fp8", "nvfp4", "fp32", "fp16"):
        raise SpecError(f"unknown precision {precision!r}; valid: bf16, fp8, nvfp4, fp32")
    return "fp4" if precision == "nvfp4" else precision


NVFP4_DEVICE_RULE = "nvfp4_needs_fp4_tensor_cores"
"""Rule id of `check_precision_device`."""


def check_precision_device(precision: str, profile: HardwareProfile) -> None:
    """`SpecError` [`NVFP4_DEVICE_RULE`] for an ``nvfp4`` job on a profile whose
    ``peak_tflops`` has no ``fp4`` entry: NVFP4 GEMMs need the FP4 tensor cores of
    Blackwell-class GPUs (Transformer Engine's NVFP4 recipe needs compute capability 10.0 or
    later); Hopper, Ampere and CDNA 3 have none."""
    peaks = profile.device.peak_tflops
    if precision == "nvfp4" and "fp4" not in peaks:
        other = "fp8" if "fp8" in peaks else "bf16"  # a device without FP8 (A100) too
        raise SpecError(
            f"[{NVFP4_DEVICE_RULE}] precision nvfp4 needs FP4 tensor cores; profile "
            f"{profile.name} lists peaks for {', '.join(sorted(peaks))}: use --precision "
            f"{other} or a Blackwell profile (b200, gb200-nvl72, b300, gb300-nvl72)"
        )


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


NVFP4_BYTES = 0.5 + 1 / 16
"""Bytes per element of one NVFP4 copy of a tensor: a 4-bit E2M1 value (0.5 byte) and one
FP8 E4M3 scale byte per 16 elements (1D blocks along a row, or one per 16 x 16 block for
weights, stored per 16 elements); the per-tensor fp32 scale is negligible (Transformer
Engine ``docs/features/low_precision_training/nvfp4/nvfp4.rst``; NVIDIA, arXiv 2509.25149)."""

DTYPE_BYTES: dict[str, float] = {
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp4": NVFP4_BYTES,
    "fp32": FP32_BYTES,
}
"""Bytes per element of GEMM inputs (fp4: `NVFP4_BYTES`, scales included); outputs are
written in bf16 (fp32 for fp32 GEMMs)."""


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
