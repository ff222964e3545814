"""Memory per rank for every pipeline stage, and Megatron-LM's own estimator for comparison.

`memory_per_stage` gives one `StageMemory` per pipeline stage (all ranks of a stage hold the
same amount): weights, gradients and optimizer state of the layers the stage holds,
activations of its in-flight microbatches (`costmodel.activations`), communication buffers
and a framework allowance.

Byte counts per parameter (megatron-facts.md §2.1, §5.4; Megatron's distributed-optimizer
docs):
- bf16/fp8 mixed precision: 2 (bf16 weight) + 4 (fp32 main gradient) + 12 (fp32 master
  copy, Adam m and v) = 18; the distributed optimizer shards the 12 over d ranks:
  6 + 12/d. Megatron-LM's precision-aware optimizer stores the 12 in fewer bytes (6 with
  bf16 moments and bf16 weights; `costmodel.optimizer_state.adam_state_bytes`, the one
  count of Adam's state). In fp8 runs the weights of Transformer Engine's linear layers take what
  `Fp8WeightStorage` counts instead of 2: a bf16 weight plus TE's cached FP8 copy, or,
  with FP8 parameters (``--fp8-param-gather``), the FP8 storage alone.
- fp32: 4 + 4 + 8 (Adam m, v; no master copy) = 16, or 8 + 8/d.
- d = dp·cp for dense parameters (Megatron reduces and shards them over the DP x CP group)
  and expert_dp for routed experts.
- Megatron-LM 2021's optimizer step adds an fp32 copy of its fp16 gradients, 4 per stepped
  parameter, after the backward has freed the activations: a second peak of the rank
  (`step_peak_bytes`, `ExecutionOptions.step_gradient_copy`). Its local DDP keeps the
  previous iteration's fp16 gradients through the forward and backward, 2 more per
  parameter there but not at the step (`ExecutionOptions.stale_main_grad`).

Layer placement: chunk j of PP rank r holds layers [(j·p + r)·Lc, (j·p + r + 1)·Lc),
Lc = L/(p·v) (`costmodel.schedules.layer_range`). The first stage also holds the word
embedding (and the learned position table), the last stage the final norm and the output
layer; with tied embeddings and pp > 1 the last stage holds its own copy of the embedding
matrix (Megatron keeps both in sync by an all-reduce). Both use the vocabulary padded to a
multiple of 128·tp.

Where this model deliberately differs from `megatron_theoretical_memory` (Megatron's
`theoretical_memory_usage.py`, which models stage 0 only):
- every stage is modelled, with its own in-flight microbatches, embedding or output layer;
- the distributed optimizer shards over dp·cp (Megatron's estimator uses dp only);
- CP divides the sequence of the activations; MoE layers keep router, expert and dispatch
  activations; GQA and MLA keep their real K/V and latent sizes; SwiGLU keeps both
  first-GEMM outputs (the estimator uses 4·F/h for every MLP);
- no-recompute uses fused (flash) attention and full recompute keeps layer inputs, each
  with the backward's working set; the estimator has one formula for all recompute modes;
- biases and the learned position table are counted; the loss keeps what its
  cross-entropy implementation saves (`costmodel.activations.logits_element_bytes`: an
  fp32 softmax, or the bf16 logits under Transformer Engine's fused loss); communication
  buffers and a framework allowance are added;
- FP8 runs keep the linear layers' FP8-cast inputs (1 byte, Transformer Engine; the
  attention output projection keeps none under current scaling and MXFP8,
  `costmodel.activations.projection_saves_original_input`) and runs without hidden
  dropout keep no masks (`costmodel.activations`); the estimator assumes
  bf16 and dropout whatever the run;
- the main-gradient buffer takes the run's element size (``main_grad_bytes``: 2 with
  ``--grad-reduce-in-bf16``); the estimator always counts 4.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

from costmodel.activations import (
    FP32_BYTES,
    AttentionKernel,
    CrossEntropyFusion,
    activation_element_bytes,
    projection_saves_original_input,
    stage_activations,
)
from costmodel.optimizer_state import (
    DEFAULT_PRECISION,
    PRECISION_AWARE_RULE,
    AdamStateBytes,
    OptimizerPrecision,
    adam_state_bytes,
    precision_aware_unmet,
    with_offload,
)
from costmodel.runtimes.megatron.megatron_fsdp import fsdp_state_bytes
from costmodel.schedules import plan_split
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import (
    LayerParams,
    ParamCounts,
    attention_params,
    count_params,
    norm_params,
    padded_vocab_size,
)
from specs.plan import ParallelPlan

GiB = 1024**3


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
                f"fixed_bytes={self.fixed_bytes}, fraction={self.fraction}, "
                f"expandable_fraction={self.expandable_fraction}; use e.g. "
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

    Counted per linear-layer parameter (`StageParams.linear`), biases included (TE keeps
    them in bf16; at most one row of each matrix).
    """

    recipe: Fp8Recipe = "delayed"
    """Megatron-core ``--fp8-recipe`` (`FP8_RECIPES`)."""
    fp8_param: bool = False
    """Megatron-core ``--fp8-param-gather``: the linear weights are FP8 parameters."""
    tn_gemm_only: bool = True
    """The device's FP8 GEMMs take only the TN layout (Hopper; False on Blackwell)."""

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

    def param_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of a linear-layer parameter: the FP8 storage with FP8
        parameters in an fp8 run, else the job's weight size."""
        if job.precision == "fp8" and self.fp8_param:
            return self.quantized_bytes()
        return float(bytes_per_param(job)[0])

    def shard_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of a Megatron-FSDP shard of a linear-layer parameter: the
        row-wise data alone for per-tensor FP8 parameters (the transpose is made after
        the gather; a transposed buffer exists only for MXFP8, ``fp8_need_transpose_data``
        in ``megatron_fsdp/mixed_precision.py``), else `param_bytes`."""
        if job.precision == "fp8" and self.fp8_param and self.recipe != "mxfp8":
            return 1.0
        return self.param_bytes(job)

    def cache_bytes(self, job: TrainingJob) -> float:
        """Bytes per element of TE's cached FP8 copy of a bf16 linear-layer parameter, held
        for the whole (gathered) weight: zero outside fp8 runs and with FP8 parameters."""
        if job.precision != "fp8" or self.fp8_param:
            return 0.0
        return self.quantized_bytes()

    def linear_bytes(self, job: TrainingJob) -> float:
        """Bytes per element a rank keeps of a linear-layer weight it holds whole."""
        return self.param_bytes(job) + self.cache_bytes(job)

    def gather_bytes(self, job: TrainingJob) -> float:
        """Bytes per linear-layer element of the data-parallel parameter all-gather."""
        weight = bytes_per_param(job)[0]
        if job.precision == "fp8" and self.fp8_param and self.recipe != "mxfp8":
            return 1.0
        return float(weight)


BF16_WEIGHTS = Fp8WeightStorage()
"""Megatron-core's defaults: delayed scaling, bf16 parameters, a Hopper-class device."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StageMemory:
    """Peak memory of one rank of one pipeline stage, by part (bytes)."""

    pp_rank: int
    """Pipeline stage, 0-based."""
    num_layers: int
    """Transformer layers the stage holds (all its chunks)."""
    in_flight_microbatches: int
    """Microbatch-chunks whose activations the stage holds at its peak."""
    weights_bytes: float
    """Model weights (bf16, or fp32 for fp32 runs); in fp8 runs the linear layers' weights
    as `Fp8WeightStorage` keeps them (with TE's cached FP8 copy, or as FP8 parameters)."""
    gradients_bytes: float
    """Main gradients (fp32), full size on every rank; twice that under PyTorch DDP's
    bucket copy (`ExecutionOptions.ddp_gradient_copy`) or with the previous iteration's
    gradients still held (`ExecutionOptions.stale_main_grad`)."""
    optimizer_bytes: float
    """fp32 master weights (mixed precision only) and Adam m, v; sharded by the
    distributed optimizer."""
    activations_bytes: float
    """Stored layer activations of the in-flight microbatches."""
    recompute_working_bytes: float
    """Activations the backward rebuilds at once under recompute."""
    embedding_activations_bytes: float
    """First stage: embedding input and dropout mask of the in-flight microbatches."""
    output_activations_bytes: float
    """Last stage: output-layer input, logits and the cross-entropy softmax."""
    comm_buffers_bytes: float
    """Pipeline send/receive tensors, the sequence-parallel all-gather (or TP-overlap
    userbuffers), the MoE all-to-all staging buffer and distributed-optimizer bucket padding."""
    framework_bytes: float
    """`FrameworkAllowance`: CUDA context, NCCL buffers, allocator fragmentation."""
    optimizer_step_bytes: float = 0.0
    """What the optimizer step holds beyond the sum of the other parts, where it makes an
    fp32 copy of the gradients after the activations are freed
    (`ExecutionOptions.step_gradient_copy`, `step_peak_bytes`); 0 where the backward's
    peak is the larger or no copy is made."""

    @property
    def model_state_bytes(self) -> float:
        """Weights + gradients + optimizer state."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def activation_total_bytes(self) -> float:
        """Every activation part: layers, recompute working set, embedding, output."""
        return (
            self.activations_bytes
            + self.recompute_working_bytes
            + self.embedding_activations_bytes
            + self.output_activations_bytes
        )

    @property
    def total_bytes(self) -> float:
        """Everything on the rank at its peak."""
        return (
            self.model_state_bytes
            + self.activation_total_bytes
            + self.comm_buffers_bytes
            + self.framework_bytes
            + self.optimizer_step_bytes
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds, by how the optimizer shards them."""

    dense: float
    """TP-sharded and replicated parameters (sharded over dp·cp by the distributed optimizer)."""
    expert: float
    """Routed-expert parameters (sharded over expert_dp by the distributed optimizer)."""
    linear: float = 0.0
    """Of ``dense + expert``, the weights (and biases) of the transformer layers' linear
    layers, which Transformer Engine runs: attention projections, MLP or shared experts,
    routed experts (`Fp8WeightStorage`); not norms, router, embedding or output layer."""

    @property
    def total(self) -> float:
        """All parameters on the rank."""
        return self.dense + self.expert


def stage_params(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> StageParams:
    """Parameters one rank of stage ``pp_rank`` holds (biases split with their matrix)."""
    split = plan_split(model, plan)
    return chunk_params(
        model,
        plan,
        split.rank_layers(pp_rank),
        first=pp_rank == 0,
        last=pp_rank == plan.pp - 1,
        mtp_layers=split.rank_mtp_layers(pp_rank),
    )


def non_unit_params(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> float:
    """Parameters one rank of stage ``pp_rank`` holds outside its transformer layers (and
    the transformer layers of its MTP depths): the word embedding and learned positions on
    the first stage, the final norm and the output layer on the last, each MTP depth's
    projection and norms. Megatron-FSDP's unit modules are the transformer layers
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`); these are the rest."""
    mtp = plan_split(model, plan).rank_mtp_layers(pp_rank)
    outside = chunk_params(
        model, plan, (), first=pp_rank == 0, last=pp_rank == plan.pp - 1, mtp_layers=mtp
    )
    depths = count_params(model).mtp_layers[:mtp]
    return outside.dense - sum(_layer_per_rank(model, plan, d.layer).dense for d in depths)


def layer_params_per_rank(model: ModelSpec, plan: ParallelPlan, index: int) -> StageParams:
    """Parameters one rank holds of layer ``index``: attention and MLP split over tp (K/V
    replicas kept, `_attention_per_rank`), norms and router replicated, routed experts
    split over ep·etp. The one per-rank parameter count of the cost model."""
    return _layer_per_rank(model, plan, count_params(model).layers[index])


def _layer_per_rank(model: ModelSpec, plan: ParallelPlan, layer: LayerParams) -> StageParams:
    """`layer_params_per_rank` of one layer's counts."""
    linear = _attention_per_rank(model, layer.attention, plan.tp) + layer.mlp / plan.tp
    expert = layer.routed_experts / (plan.ep * plan.expert_tp)
    return StageParams(
        dense=linear + layer.norms + layer.router, expert=expert, linear=linear + expert
    )


def chunk_params(
    model: ModelSpec,
    plan: ParallelPlan,
    layers: Iterable[int],
    *,
    first: bool,
    last: bool,
    mtp_layers: int = 0,
) -> StageParams:
    """Parameters one rank holds of ``layers``, plus the word embedding (and learned
    positions) when ``first`` (virtual stage 0) and the final norm and the output layer when
    ``last`` (the last virtual stage; the output layer is the embedding itself when it is
    tied and one stage holds both), plus ``mtp_layers`` multi-token-prediction depths
    (`specs.params.MtpParams`: the layer split like the others, the projection over tp,
    the norms replicated)."""
    counts = count_params(model)
    dense = expert = linear = 0.0
    held = [counts.layers[index] for index in layers]
    held += [depth.layer for depth in counts.mtp_layers[:mtp_layers]]
    for layer_counts in held:
        layer = _layer_per_rank(model, plan, layer_counts)
        dense += layer.dense
        expert += layer.expert
        linear += layer.linear
    for depth in counts.mtp_layers[:mtp_layers]:
        dense += depth.projection / plan.tp + depth.norms
    matrix = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
    if first:
        dense += matrix + (counts.embedding - model.vocab_size * model.hidden_size)
    if last:
        dense += counts.final_norm
        if not model.tied_embeddings or plan.pp > 1:
            dense += matrix
    return StageParams(dense=dense, expert=expert, linear=linear)


def _attention_per_rank(model: ModelSpec, attention: int, tp: int) -> float:
    """Attention parameters on one TP rank. K/V projections split over min(tp, g) ranks:
    with tp > g (Megatron allows tp % g == 0) each rank holds a replica of one K/V head."""
    if model.uses_mla:
        return attention / tp
    g = model.query_groups
    bias = model.add_bias_linear or model.add_qkv_bias
    key_value = 2 * g * model.head_dim * (model.hidden_size + (1 if bias else 0))
    return (attention - key_value) / tp + key_value / min(tp, g)


def stage_layer_indices(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> tuple[int, ...]:
    """Layers of every chunk of stage ``pp_rank``, in chunk order."""
    return plan_split(model, plan).rank_layers(pp_rank)


def bytes_per_param(
    job: TrainingJob, main_grad_bytes: int = 4, state: AdamStateBytes | None = None
) -> tuple[int, int, int]:
    """(weight, gradient, optimizer-state) bytes per parameter for the job's precision;
    ``main_grad_bytes``: the main-gradient buffer's element size under mixed precision
    (`ExecutionOptions.main_grad_bytes`: 4 with Megatron's fp32 gradient reduction, 2 with
    ``--grad-reduce-in-bf16`` or ``--main-grads-dtype bf16``; megatron-facts.md §5.2);
    ``state``: Adam's state (`costmodel.optimizer_state.adam_state_bytes`; None: the
    default fp32 state of the job's precision, 12 or 8)."""
    adam = adam_state_bytes(job.precision) if state is None else state
    if job.precision == "fp32":
        return 4, 4, adam.total_bytes
    return 2, main_grad_bytes, adam.total_bytes


def plan_adam_state(
    job: TrainingJob,
    plan: ParallelPlan,
    optimizer: OptimizerPrecision = DEFAULT_PRECISION,
    fp8_weights: Fp8WeightStorage | None = None,
) -> AdamStateBytes:
    """Adam's state per parameter of ``plan`` (`costmodel.optimizer_state.adam_state_bytes`
    with the FP8 weight fields and the plan's Megatron-FSDP). Raises `SpecError` where
    Megatron-core refuses the precision-aware optimizer for the plan
    (`costmodel.optimizer_state.precision_aware_unmet`)."""
    unmet = precision_aware_unmet(
        optimizer,
        distributed_optimizer=plan.distributed_optimizer,
        megatron_fsdp=plan.use_megatron_fsdp,
    )
    if unmet is not None:
        raise SpecError(f"[{PRECISION_AWARE_RULE}] {unmet}")
    weights = BF16_WEIGHTS if fp8_weights is None else fp8_weights
    return adam_state_bytes(
        job.precision,
        optimizer,
        fp8_recipe=weights.recipe,
        fp8_param=weights.fp8_param,
        megatron_fsdp=plan.use_megatron_fsdp,
    )


Bytes = TypeVar("Bytes")
"""A byte count: a float, or a numpy array of them in the closed-form screen."""


def device_optimizer_bytes(optimizer_bytes: Bytes, offload_fraction: float) -> Bytes:
    """The optimizer-state bytes (a float or an array) that stay on the device when
    ``offload_fraction`` of the rank's shard is offloaded to the host
    (`ExecutionOptions.optimizer_cpu_offload_fraction`): ``optimizer_bytes · (1 - f)``.
    Megatron-core moves whole parameters until their elements reach ``f`` of the shard's
    (``HybridDeviceOptimizer._get_sub_optimizer_param_groups``), which this takes as
    exactly ``f``; the memory model and the screen both count through here."""
    return optimizer_bytes * (1.0 - offload_fraction)  # type: ignore[operator]


def held_gradient_copies(
    plan: ParallelPlan, *, ddp_gradient_copy: bool, stale_main_grad: bool
) -> tuple[int, int]:
    """(at the optimizer step, during the forward and backward) gradient buffers per
    parameter of a rank: 2 under PyTorch DDP's bucket copy with overlapped reduction
    (`ExecutionOptions.ddp_gradient_copy`); without overlapped reduction, 1 at the step and
    2 during the forward and backward when the previous iteration's gradients are still
    referenced (`ExecutionOptions.stale_main_grad`: Megatron-LM 2021's local DDP keeps
    them in ``param.main_grad`` until ``allreduce_gradients`` after the pipeline flush);
    else 1 and 1. Megatron-FSDP plans keep their own gradient buffers
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`). Plans with sharded
    optimizer state hold no old gradients: that local DDP had no distributed optimizer, and
    where a row of that era shards it, DeepSpeed's ZeRO engine owns the gradients and the
    model is never wrapped in local DDP (Megatron-DeepSpeed ``get_model`` returns before
    the wrapping under ``--deepspeed``, ``megatron/training.py``,
    bigscience-workshop/Megatron-DeepSpeed at 0035f06a)."""
    if plan.use_megatron_fsdp:
        return 1, 1
    if plan.overlap_grad_reduce:
        copies = 2 if ddp_gradient_copy else 1
        return copies, copies
    return 1, 2 if stale_main_grad and not plan.distributed_optimizer else 1


def step_peak_bytes(
    job: TrainingJob,
    model_state_bytes: float,
    stepped_params: float,
    main_grad_bytes: int,
    fixed_bytes: float,
) -> float:
    """Bytes of one rank during an optimizer step that first copies its 16-bit main
    gradients to fp32 (`ExecutionOptions.step_gradient_copy`): weights, gradients and
    optimizer state (``model_state_bytes``), 4 bytes per parameter the rank steps
    (``stepped_params``: its optimizer shard) and the allowance's fixed bytes; the
    activations are freed by then. Source: Megatron-LM 2021
    ``Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads``
    (``main_param.grad = model_param.main_grad.float()``), at the ``examples/sc21`` commit
    de7dc40. 0 when the gradients are already fp32 (``.float()`` copies nothing) or the
    run is fp32."""
    if job.precision == "fp32" or main_grad_bytes >= FP32_BYTES:
        return 0.0
    return model_state_bytes + FP32_BYTES * stepped_params + fixed_bytes


def optimizer_shards(model: ModelSpec, plan: ParallelPlan) -> tuple[int, int]:
    """(dense, expert) ranks the optimizer state is sharded over: (dp·cp, expert_dp) with
    the distributed optimizer, (1, 1) without."""
    if not plan.distributed_optimizer:
        return 1, 1
    expert = plan.expert_dp
    if model.is_moe and expert < 1:
        raise SpecError(
            f"expert_dp is not whole: world ({plan.world_size}) must be divisible by "
            f"etp ({plan.expert_tp}) * ep ({plan.ep}) * pp ({plan.pp}); change ep or etp"
        )
    return plan.dp * plan.cp, max(expert, 1)


def _comm_buffers_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    params: StageParams,
    main_grad_bytes: int = 4,
) -> float:
    """Communication buffers of one rank (see `StageMemory.comm_buffers_bytes`)."""
    e = activation_element_bytes(job)
    tokens = plan.micro_batch_size * job.seq_length / plan.cp
    sp = plan.tp if plan.sequence_parallel else 1
    boundary = e * tokens * model.hidden_size / sp
    if plan.pp == 1:
        directions = 0
    elif plan.vpp > 1:
        directions = 2
    else:
        directions = int(pp_rank > 0) + int(pp_rank < plan.pp - 1)
    total = directions * boundary
    if plan.tp_comm_overlap:
        total += 4 * e * tokens * model.hidden_size  # userbuffers for qkv, proj, fc1, fc2
    elif plan.sequence_parallel and plan.tp > 1:
        total += e * tokens * model.hidden_size  # one gathered GEMM input at a time
    mask = model.moe_layer_mask()
    if any(mask[i] for i in stage_layer_indices(model, plan, pp_rank)):
        rows = model.moe_top_k * tokens / sp * (model.moe_capacity_factor or 1.0)
        total += e * rows * model.hidden_size  # permuted tokens before the all-to-all
    return total + _bucket_padding_bytes(job, plan, params, main_grad_bytes)


def _bucket_padding_bytes(
    job: TrainingJob, plan: ParallelPlan, params: StageParams, main_grad_bytes: int = 4
) -> float:
    """Distributed-optimizer padding: each bucket of the weight and gradient buffers ends on
    a multiple of lcm(dp·cp, 128) elements (megatron-facts.md §5.1)."""
    if not plan.distributed_optimizer:
        return 0.0
    weight, grad, _ = bytes_per_param(job, main_grad_bytes)
    bucket = plan.bucket_size_params() if plan.overlap_grad_reduce else params.total
    buckets = math.ceil(params.total / bucket) if params.total else 0
    return buckets * math.lcm(plan.dp * plan.cp, 128) * (weight + grad)


def memory_per_stage(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    *,
    allowance: FrameworkAllowance | None = None,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    main_grad_bytes: int = 4,
    keep_outputs: bool = False,
    ddp_gradient_copy: bool = False,
    cross_entropy: CrossEntropyFusion = "unfused",
    expandable_segments: bool = False,
    fp8_weights: Fp8WeightStorage = BF16_WEIGHTS,
    fragmentation: float | None = None,
    step_gradient_copy: bool = False,
    optimizer: OptimizerPrecision = DEFAULT_PRECISION,
    optimizer_offload_fraction: float = 0.0,
    stale_main_grad: bool = False,
) -> tuple[StageMemory, ...]:
    """Peak bytes per rank of every pipeline stage, stage 0 first; ``dropout``,
    ``main_grad_bytes``, ``keep_outputs``, ``ddp_gradient_copy``, ``cross_entropy``,
    ``expandable_segments`` and ``fp8_weights`` as `ExecutionOptions.hidden_dropout`,
    ``main_grad_bytes``, not ``deallocate_pipeline_outputs``, ``ddp_gradient_copy`` (with
    overlapped gradient reduction, twice the gradient bytes), ``cross_entropy_fusion``,
    ``expandable_segments`` (`FrameworkAllowance.fragmentation`) and the FP8 weight fields
    (`ExecutionOptions.fp8_weight_storage`; its recipe also sets whether the attention output
    projection keeps an FP8 copy of its input, `projection_saves_original_input`);
    ``fragmentation``, when given, replaces the allowance's share for the allocator mode
    (`ExecutionOptions.allocator_fragmentation`); ``step_gradient_copy`` adds the optimizer
    step's peak where it is the larger (`ExecutionOptions.step_gradient_copy`,
    `step_peak_bytes`); ``optimizer``: the dtypes of Adam's state
    (`ExecutionOptions.optimizer_precision`, `plan_adam_state`; the default fp32 state under
    CPU offload); ``optimizer_offload_fraction`` of that state lives in host memory
    (`device_optimizer_bytes`); ``stale_main_grad`` adds, without overlapped gradient
    reduction, one more gradient buffer to the forward and backward but not to the step
    (`ExecutionOptions.stale_main_grad`, `held_gradient_copies`).

    Raises `SpecError` when the layers do not split over pp·vpp, the global batch gives
    no microbatch, or the plan cannot run the precision-aware optimizer.
    """
    frame = FrameworkAllowance() if allowance is None else allowance
    if fragmentation is None:
        fragmentation = frame.fragmentation(expandable_segments)
    optimizer = with_offload(optimizer, optimizer_offload_fraction)
    adam = plan_adam_state(job, plan, optimizer, fp8_weights)
    weight, grad, state = bytes_per_param(job, main_grad_bytes, adam)
    dense_shards, expert_shards = optimizer_shards(model, plan)
    stages = []
    for rank in range(plan.pp):
        params = stage_params(model, plan, rank)
        acts = stage_activations(
            model,
            job,
            plan,
            rank,
            attention=attention,
            dropout=dropout,
            keep_outputs=keep_outputs,
            cross_entropy=cross_entropy,
            proj_saves_input=projection_saves_original_input(fp8_weights.recipe),
        )
        comm = _comm_buffers_bytes(model, job, plan, rank, params, main_grad_bytes)
        optimizer = state * (params.dense / dense_shards + params.expert / expert_shards)
        linear_bytes = fp8_weights.linear_bytes(job) * params.linear
        weights_bytes = weight * (params.total - params.linear) + linear_bytes
        step_copies, held_copies = held_gradient_copies(
            plan, ddp_gradient_copy=ddp_gradient_copy, stale_main_grad=stale_main_grad
        )
        gradients_bytes = held_copies * grad * params.total
        if plan.use_megatron_fsdp:
            fsdp = fsdp_state_bytes(
                model,
                plan,
                dense_params=params.dense,
                expert_params=params.expert,
                bytes_per_param=(weight, grad, state),
                linear_params=params.linear,
                linear_param_bytes=fp8_weights.param_bytes(job),
                linear_shard_bytes=fp8_weights.shard_bytes(job),
                non_unit_params=non_unit_params(model, plan, rank),
            )
            fsdp_cache = fp8_weights.cache_bytes(job) * params.linear
            weights_bytes = fsdp.weights_bytes + fsdp_cache
            gradients_bytes = fsdp.gradients_bytes
            optimizer = fsdp.optimizer_bytes
        optimizer = device_optimizer_bytes(optimizer, optimizer_offload_fraction)
        dynamic = (
            acts.layers_bytes
            + acts.recompute_working_bytes
            + acts.embedding_bytes
            + acts.output_bytes
            + comm
        )
        state_bytes = weights_bytes + gradients_bytes + optimizer
        framework = frame.fixed_bytes + fragmentation * dynamic
        step = 0.0
        if step_gradient_copy:
            stepped = params.dense / dense_shards + params.expert / expert_shards
            step_state = state_bytes - (held_copies - step_copies) * grad * params.total
            peak = step_peak_bytes(job, step_state, stepped, main_grad_bytes, frame.fixed_bytes)
            step = max(0.0, peak - (state_bytes + dynamic + framework))
        stages.append(
            StageMemory(
                pp_rank=rank,
                num_layers=len(stage_layer_indices(model, plan, rank)),
                in_flight_microbatches=acts.in_flight_microbatches,
                weights_bytes=weights_bytes,
                gradients_bytes=gradients_bytes,
                optimizer_bytes=optimizer,
                activations_bytes=acts.layers_bytes,
                recompute_working_bytes=acts.recompute_working_bytes,
                embedding_activations_bytes=acts.embedding_bytes,
                output_activations_bytes=acts.output_bytes,
                comm_buffers_bytes=comm,
                framework_bytes=framework,
                optimizer_step_bytes=step,
            )
        )
    return tuple(stages)


def peak_memory_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    *,
    allowance: FrameworkAllowance | None = None,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    main_grad_bytes: int = 4,
) -> float:
    """The largest per-rank total over all pipeline stages (arguments as `memory_per_stage`)."""
    stages = memory_per_stage(
        model,
        job,
        plan,
        allowance=allowance,
        attention=attention,
        dropout=dropout,
        main_grad_bytes=main_grad_bytes,
    )
    return max(stage.total_bytes for stage in stages)


# ---- Megatron-LM's estimator (stage 0 only) --------------------------------------------------


def megatron_theoretical_memory(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan
) -> tuple[float, float]:
    """(weight_and_optimizer_bytes, activation_bytes) of pipeline stage 0 as Megatron-LM's
    `report_theoretical_memory` computes them (megatron-facts.md §2).

    Parameters ignore biases; bf16 mixed precision is assumed whatever the job's precision
    (18 or 6 + 12/d bytes per parameter, d = dp for dense and expert_dp for expert
    parameters). Activations use the SP + selective formula when both are on, else the
    formula without SP. MLA attention uses `specs.params` counts without biases.
    """
    weights_and_optimizer = _megatron_weight_and_optimizer_bytes(model, plan)
    return weights_and_optimizer, _megatron_activation_bytes(model, job, plan)


def _megatron_param_totals(model: ModelSpec, counts: ParamCounts) -> tuple[float, float, float]:
    """(TP-sharded, replicated, expert) parameters of all layers, biases ignored."""
    h = model.hidden_size
    gated = 1.5 if model.activation == "swiglu" else 1.0
    if model.uses_mla:
        attention = float(
            attention_params(model.replace(add_bias_linear=False, add_qkv_bias=False))
        )
    else:
        q = model.head_dim * model.num_attention_heads
        attention = 2 * h * q * (1 + model.query_groups / model.num_attention_heads)
    sharded = replicated = expert = 0.0
    for layer in counts.layers:
        sharded += attention
        replicated += layer.norms
        if layer.is_moe:
            sharded += 2 * h * model.moe_shared_expert_size * gated
            expert += 2 * h * model.expert_ffn_hidden_size * model.num_experts * gated
            replicated += h * model.num_experts
        else:
            sharded += 2 * h * model.ffn_hidden_size * gated
    return sharded, replicated + norm_params(model, h), expert


def _megatron_weight_and_optimizer_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """Megatron's `compute_weight_and_optimizer_memory` for the most loaded shard (stage 0)."""
    sharded, replicated, expert = _megatron_param_totals(model, count_params(model))
    p, t = plan.pp, plan.tp
    embedding = model.hidden_size * padded_vocab_size(model.vocab_size, t)
    dense = (sharded / p + embedding) / t + replicated / p
    if not model.tied_embeddings and p == 1:
        dense += embedding / t
    expert_shard = expert / p / (plan.expert_tp * plan.ep)
    if not plan.distributed_optimizer:
        return 18 * (dense + expert_shard)
    expert_dp = max(plan.expert_dp, 1)
    return (6 + 12 / plan.dp) * dense + (6 + 12 / expert_dp) * expert_shard


def _megatron_activation_bytes(model: ModelSpec, job: TrainingJob, plan: ParallelPlan) -> float:
    """Megatron's `compute_activation_memory` (SP + selective) or its `_without_sp` variant."""
    s, b, h = job.seq_length, plan.micro_batch_size, model.hidden_size
    p, t, v = plan.pp, plan.tp, plan.vpp
    vocab = padded_vocab_size(model.vocab_size, t)
    m = plan.num_microbatches(job.global_batch_size)
    with_sp = plan.sequence_parallel and plan.recompute == "selective"
    per_layer = s * b * h * ((18 + 4 * model.ffn_hidden_size / h) if with_sp else (10 + 24 / t))
    total = per_layer * model.num_layers + 8 * s * b * p + s * b * h * p
    if v > 1:
        total *= 1 + (p - 1) / (p * v)
    elif p > 1:
        total *= min(1.0, m / p)
    if with_sp:
        if p == 1:
            total += 4 * s * b * h * (1 + vocab / h)
        return total / t
    if p == 1:
        total += 2 * (s * b * vocab / t + s * b * h)
    return total * 1.05
