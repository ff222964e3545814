"""What a rank holds besides the model's own tensors, and how Transformer Engine keeps an fp8
or nvfp4 run's weights: the framework allowance (CUDA context, NCCL buffers, allocator
fragmentation, `FrameworkAllowance`) and the quantized weight storage of each recipe
(`Fp8WeightStorage`). Used by `costmodel.memory.memory_per_stage` and the screens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from costmodel.compute import NVFP4_BYTES
from specs.errors import SpecError
from specs.job import TrainingJob

GiB = 1024**3


def model_weight_bytes(job: TrainingJob) -> int:
    """Bytes per element of a model parameter: 4 in fp32 runs, else 2 (bf16; an fp8 or
    nvfp4 run keeps bf16 parameters unless its weight storage says otherwise,
    `Fp8WeightStorage`)."""
    return 4 if job.precision == "fp32" else 2


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkAllowance:
    """Memory outside the model's tensors: a fixed part plus the caching allocator's
    fragmentation, a fraction of the dynamic (activation and communication) bytes.

    - ``fixed_bytes`` 1.5 GiB, an estimate of two things that exist on every rank but
      whose size no source states per GPU: the CUDA context with the kernel images of
      PyTorch, cuBLAS, cuDNN and Transformer Engine and their GEMM workspaces (a guess), and
      NCCL's per-channel, per-peer buffers of the TP, DP, PP, CP and EP communicators, each
      NCCL_BUFFSIZE (default 4 MiB, NCCL documentation, "Environment Variables") for the
      Simple protocol plus the LL and LL128 buffers. NVLink SHARP buffers are not counted:
      the Megatron-Bridge performance scripts run with ``NCCL_NVLS_ENABLE=0`` "to save
      memory" (``scripts/performance/utils/executors.py``).
    - ``fraction`` 0.10 (a guess): fragmentation of PyTorch's caching allocator with its
      default ``cudaMalloc`` segments. Blocks of different segments never merge, so the free
      tails of partly used segments cannot serve a larger request, and at an out-of-memory
      retry the allocator can return only unsplit cached segments to CUDA
      (``c10/cuda/CUDACachingAllocator.cpp``, header comment and Note [Expandable Segments];
      PyTorch devlog "When does fragmentation occur in the CUDA caching allocator?").
      It comes from the many short-lived, variably sized activation blocks;
      weights, gradients and optimizer state are few large, long-lived buffers in Megatron.
    - ``expandable_fraction`` 0.05 (a guess, half of ``fraction``): the same with
      ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, where each stream's pool is one
      virtual range backed by 20 MiB physical pages, so free blocks merge across what would
      have been segment boundaries, and at an out-of-memory retry the allocator unmaps
      every physical page no live block touches (Note [Expandable Segments]). Live blocks
      still pin the splits between them (the devlog), so the remainder is not zero; no
      source measures it.
    """

    fixed_bytes: float = 1.5 * GiB
    """Per-rank bytes independent of the plan."""
    fraction: float = 0.10
    """Share of the dynamic bytes added for fragmentation with ``cudaMalloc`` segments."""
    expandable_fraction: float = 0.05
    """Share of the dynamic bytes added for fragmentation with expandable segments."""

    def __post_init__(self) -> None:
        if (
            self.fixed_bytes < 0
            or not 0 <= self.fraction < 1
            or not 0 <= self.expandable_fraction < 1
        ):
            raise SpecError(
                f"FrameworkAllowance needs fixed_bytes >= 0 and fractions in [0, 1), got "
                f"fixed_bytes ({self.fixed_bytes}), fraction ({self.fraction}), "
                f"expandable_fraction ({self.expandable_fraction}); use e.g. "
                "FrameworkAllowance(fixed_bytes=0, fraction=0, expandable_fraction=0) for "
                "no allowance"
            )

    def fragmentation(self, expandable_segments: bool) -> float:
        """The fragmentation share for the allocator mode
        (`ExecutionOptions.expandable_segments`)."""
        return self.expandable_fraction if expandable_segments else self.fraction


NO_ALLOWANCE = FrameworkAllowance(fixed_bytes=0.0, fraction=0.0, expandable_fraction=0.0)
"""For tensor-only comparisons (formulas, CPU runs)."""


Fp8Recipe = Literal["delayed", "tensorwise", "mxfp8"]
FP8_RECIPES: tuple[Fp8Recipe, ...] = ("delayed", "tensorwise", "mxfp8")
"""Megatron-core ``--fp8-recipe`` values whose weight storage `Fp8WeightStorage` counts,
Megatron's default first: per-tensor delayed and current (``tensorwise``) scaling, and
MXFP8 (one scale per 32 elements)."""

QuantRecipe = Literal["delayed", "tensorwise", "mxfp8", "nvfp4"]
"""How Transformer Engine quantizes a GEMM operand: an FP8 recipe (`FP8_RECIPES`) in fp8
runs, ``nvfp4`` (``NVFP4BlockScaling``) in nvfp4 runs. Internal to the quantization and
weight-storage functions: ``nvfp4`` is the job's precision, never an ``--fp8-recipe``
(`costmodel.fp8_quantization.operand_recipe`)."""

NVFP4_WEIGHT_BYTES = 2 * NVFP4_BYTES
"""Bytes per element of TE's NVFP4 copy of a weight (``NVFP4Tensor``): the row-wise copy
for fprop and the column-wise copy for dgrad, each 4-bit data plus one E4M3 scale per 16
elements (16 x 16 blocks for weights, stored per 16 elements), 1.125 bytes."""

NVFP4_GATHER_BYTES = 0.5
"""Bytes per element the data-parallel all-gather moves of an NVFP4 parameter: the packed
E2M1 row-wise data (Megatron-core's parameter buffer holds ``numel // 2`` bytes of each
NVFP4 parameter, ``_compute_nvfp4_packed_layout`` in
``megatron/core/distributed/param_and_grad_buffer.py``); TE's ``quantize_master_weights``
reduces the block amaxes over the data-parallel group so every rank sets the scales of the
whole weight, and ``post_all_gather_processing`` makes the column-wise copy after the
gather (``megatron/core/fp4_utils.py``, ``fp8_utils.py``)."""

MXFP8_BLOCK_ELEMENTS = 32
"""Elements per MXFP8 scale (one E8M0 byte each, along rows and along columns; TE
``MXFP8Tensor`` ``rowwise_scale_inv`` / ``columnwise_scale_inv``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fp8WeightStorage:
    """How a rank keeps the weights of Transformer Engine's linear layers in an fp8 run
    (`ExecutionOptions.fp8_recipe`, ``fp8_param``, ``fp8_tn_gemm_only``).

    TE's FP8 copy of a weight (bytes per element, `quantized_bytes`):
    - per-tensor scaling (``delayed``, ``tensorwise``; TE ``Float8Tensor``): the row-wise
      data, 1 byte, for the forward GEMM, plus its transpose, 1 byte, for the dgrad GEMM
      where FP8 GEMMs take only the TN layout (``fp8_tn_gemm_only``: TE
      ``is_non_tn_fp8_gemm_supported`` is False below compute capability 10.0, Hopper;
      ``Float8Quantizer`` in ``transformer_engine/pytorch/csrc/quantizer.cpp`` allocates
      ``_transpose`` only then); 1 or 2 bytes; scales are one fp32 per tensor.
    - ``mxfp8`` (TE ``MXFP8Tensor``): row-wise and column-wise data, 1 byte each, and one
      E8M0 scale byte per 32 elements for each, 2 + 2/32 bytes on every device.

    Without FP8 parameters (Megatron-core's default, ``fp8_param_gather = False``) the
    weight is a bf16 parameter, 2 bytes, and TE keeps its FP8 copy across microbatches and
    iterations: Megatron-core's TE wrappers pass ``is_first_microbatch`` unless
    ``disable_parameter_transpose_cache`` (default False;
    ``megatron/core/extensions/transformer_engine.py``), so TE stores the copy in the
    module's ``_fp8_workspaces`` (``quantize_weight`` with ``cache``, TE
    ``pytorch/module/base.py``, ``linear.py``, ``layernorm_linear.py``,
    ``layernorm_mlp.py``, ``grouped_linear.py``; TE 1.x: the ``weight1_fp8`` /
    ``weight1_t_fp8`` buffers of ``set_fp8_weights``). With FP8 parameters (Megatron-core
    ``--fp8-param-gather``: the model is built under TE's ``fp8_model_init``) the FP8
    storage is the parameter itself: the distributed optimizer's parameter buffer is
    ``torch.uint8`` (``group_params_for_buffers``, ``megatron/core/distributed/
    param_and_grad_buffer.py``), Megatron-FSDP's model-weight buffer too (plus a
    column-wise buffer for MXFP8, ``megatron_fsdp/param_and_grad_buffer.py``), and the
    fp32 master copy stays in the optimizer.

    The parameter all-gather (`gather_bytes`) moves 1 byte per element for per-tensor FP8
    parameters; MXFP8 parameters are gathered in bf16 through the gradient buffer under
    the distributed optimizer (``reuse_grad_buf_for_mxfp8_param_ag``: the buffer has the
    gradient dtype, then ``copy_tensors_to_quantized_params``) and as row-wise plus
    column-wise bytes under Megatron-FSDP, 2 bytes either way.

    NVFP4 runs (job precision ``nvfp4``, TE ``NVFP4BlockScaling``) keep an NVFP4 copy,
    `NVFP4_WEIGHT_BYTES`, whatever the FP8 fields say: with ``fp4_param`` (Megatron-core
    ``--fp4-param-gather``, Megatron-Bridge's ``bf16_with_nvfp4_mixed`` default) it is the
    parameter (fp32 master in the optimizer, `NVFP4_GATHER_BYTES` gathered), else a bf16
    parameter plus TE's cached NVFP4 copy, as FP8 without ``fp8_param``.

    Counted per linear-layer parameter (`StageParams.linear`), biases included (TE keeps
    them in bf16; at most one row of each matrix).
    """

    recipe: Fp8Recipe = "delayed"
    """Megatron-core ``--fp8-recipe`` (`FP8_RECIPES`)."""
    fp8_param: bool = False
    """Megatron-core ``--fp8-param-gather``: the linear weights are FP8 parameters."""
    tn_gemm_only: bool = True
    """The device's FP8 GEMMs take only the TN layout (Hopper; False on Blackwell)."""
    fp4_param: bool = True
    """Megatron-core ``--fp4-param-gather``: in nvfp4 runs the linear weights are NVFP4
    parameters (Megatron-Bridge's ``fp4_param_gather=True``)."""

    def __post_init__(self) -> None:
        if self.recipe not in FP8_RECIPES:
            raise SpecError(
                f"fp8_recipe must be one of {', '.join(FP8_RECIPES)}, got {self.recipe!r}; "
                "delayed is Megatron-core's default"
            )

    def quantized_bytes(self) -> float:
        """Bytes per element of TE's FP8 copy of a weight (class docstring)."""
        if self.recipe == "mxfp8":
            return 2.0 * (1.0 + 1.0 / MXFP8_BLOCK_ELEMENTS)
        return 2.0 if self.tn_gemm_only else 1.0

    def quantized_params(self, job: TrainingJob) -> bool:
        """The linear weights are quantized parameters: ``fp8_param`` in an fp8 run,
        ``fp4_param`` in an nvfp4 run."""
        if job.precision == "nvfp4":
            return self.fp4_param
        return job.precision == "fp8" and self.fp8_param

    def copy_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of TE's quantized copy of a weight in ``job``'s precision:
        `NVFP4_WEIGHT_BYTES` in nvfp4 runs, else `quantized_bytes`."""
        return NVFP4_WEIGHT_BYTES if job.precision == "nvfp4" else self.quantized_bytes()

    def param_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of a linear-layer parameter: the quantized storage with
        quantized parameters (`quantized_params`), else the job's weight size."""
        if self.quantized_params(job):
            return self.copy_bytes(job)
        return float(model_weight_bytes(job))

    def shard_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of a Megatron-FSDP shard of a linear-layer parameter: the
        row-wise data alone for per-tensor FP8 parameters (the transpose is made after
        the gather; a transposed buffer exists only for MXFP8, ``fp8_need_transpose_data``
        in ``megatron_fsdp/mixed_precision.py``), the packed row-wise data
        (`NVFP4_GATHER_BYTES`) for NVFP4 parameters, else `param_bytes`."""
        if job.precision == "nvfp4" and self.fp4_param:
            return NVFP4_GATHER_BYTES
        if job.precision == "fp8" and self.fp8_param and self.recipe != "mxfp8":
            return 1.0
        return self.param_bytes(job)

    def cache_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of TE's cached FP8 or NVFP4 copy of a bf16 linear-layer
        parameter, held for the whole (gathered) weight: zero outside fp8 and nvfp4 runs and
        with quantized parameters."""
        if job.precision not in ("fp8", "nvfp4") or self.quantized_params(job):
            return 0.0
        return self.copy_bytes(job)

    def linear_bytes(self, job: TrainingJob) -> float:
        """Bytes per element a rank keeps of a linear-layer weight it holds whole."""
        return self.param_bytes(job) + self.cache_bytes(job)

    def gather_bytes(self, job: TrainingJob) -> float:
        """Bytes per linear-layer element of the data-parallel parameter all-gather."""
        weight = model_weight_bytes(job)
        if job.precision == "nvfp4" and self.fp4_param:
            return NVFP4_GATHER_BYTES
        if job.precision == "fp8" and self.fp8_param and self.recipe != "mxfp8":
            return 1.0
        return float(weight)


BF16_WEIGHTS = Fp8WeightStorage()
"""Megatron-core's defaults: delayed scaling, bf16 parameters, a Hopper-class device."""
