"""Memory per rank for every pipeline stage.

`memory_per_stage` gives one `StageMemory` per pipeline stage (all ranks of a stage hold the
same amount): weights, gradients and optimizer state of the layers the stage holds
(`costmodel.rank_params` places and counts them), activations of its in-flight microbatches
(`costmodel.activations`), communication buffers and a framework allowance
(`costmodel.memory_allowances`, with the FP8 weight storage).

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
- Muon's step allocates the working tensors of one matrix at a time and, under
  ``dist_muon``, all-gather buffers after it (`costmodel.muon_sharding.step_working_bytes`):
  also a second peak of the rank, on top of its state (`step_peak_bytes`).

Where this model deliberately differs from
`costmodel.megatron_estimator.megatron_theoretical_memory` (Megatron's
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
  `costmodel.layer_activations.projection_saves_original_input`) and runs without hidden
  dropout keep no masks (`costmodel.activations`); the estimator assumes
  bf16 and dropout whatever the run;
- the main-gradient buffer takes the run's element size (``main_grad_bytes``: 2 with
  ``--grad-reduce-in-bf16``); the estimator always counts 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from costmodel.activations import FP32_BYTES, CrossEntropyFusion, stage_activations
from costmodel.layer_activations import (
    AttentionKernel,
    activation_element_bytes,
    projection_saves_original_input,
)
from costmodel.memory_allowances import (
    BF16_WEIGHTS,
    Fp8WeightStorage,
    FrameworkAllowance,
    model_weight_bytes,
)
from costmodel.muon_sharding import step_working_bytes, worst_rank_state_bytes
from costmodel.optimizer_muon import is_muon, muon_shards
from costmodel.optimizer_state import (
    DEFAULT_PRECISION,
    PRECISION_AWARE_RULE,
    AdamStateBytes,
    OptimizerPrecision,
    adam_state_bytes,
    precision_aware_unmet,
    with_offload,
)
from costmodel.rank_params import (
    StageParams,
    non_unit_params,
    optimizer_shards,
    stage_layer_indices,
    stage_params,
)
from costmodel.runtimes.megatron.megatron_fsdp import fsdp_state_bytes
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


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
    """What the optimizer step holds beyond the sum of the other parts, after the
    activations are freed, where it makes an fp32 copy of the gradients
    (`ExecutionOptions.step_gradient_copy`) or allocates Muon's working tensors
    (`costmodel.muon_sharding.step_working_bytes`; `step_peak_bytes`); 0 where the
    backward's peak is the larger or the step adds neither."""

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
    grad = 4 if job.precision == "fp32" else main_grad_bytes
    return model_weight_bytes(job), grad, adam.total_bytes


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
    *,
    gradient_copy: bool = True,
    working_bytes: Bytes | float = 0.0,
) -> Bytes | float:
    """Bytes of one rank during its optimizer step, the activations freed by then: weights,
    gradients and optimizer state (``model_state_bytes``), the allowance's fixed bytes, with
    ``gradient_copy`` (`ExecutionOptions.step_gradient_copy`) 4 bytes per parameter the rank
    steps (``stepped_params``: its optimizer shard), and ``working_bytes`` the step allocates
    at once (Muon's, `costmodel.muon_sharding.step_working_bytes`; a float, or an array in
    the closed-form screen, with the other byte counts). The copy: Megatron-LM
    2021 ``Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads``
    (``main_param.grad = model_param.main_grad.float()``), at the ``examples/sc21`` commit
    de7dc40; none when the gradients are already fp32 (``.float()`` copies nothing) or the
    run is fp32. 0 when the step adds neither a copy nor working bytes."""
    copies = gradient_copy and job.precision != "fp32" and main_grad_bytes < FP32_BYTES
    copy_bytes = FP32_BYTES * stepped_params if copies else 0.0
    if not copies and isinstance(working_bytes, float) and working_bytes == 0.0:
        return 0.0
    return model_state_bytes + copy_bytes + working_bytes + fixed_bytes  # type: ignore[operator]


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
    `step_peak_bytes`), as a Muon job's working tensors do
    (`costmodel.muon_sharding.step_working_bytes`); ``optimizer``: the dtypes of Adam's state
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
    if is_muon(job):
        dense_shards, expert_shards = muon_shards(job, plan)
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
        if is_muon(job):
            optimizer = worst_rank_state_bytes(model, job, plan, rank, adam_bytes=state)
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
        working = 0.0
        if is_muon(job) and not plan.use_megatron_fsdp:
            working = step_working_bytes(model, job, plan, rank, weight_bytes=weight)
        step = 0.0
        if step_gradient_copy or working:
            stepped = params.dense / dense_shards + params.expert / expert_shards
            step_state = state_bytes - (held_copies - step_copies) * grad * params.total
            peak = step_peak_bytes(
                job,
                step_state,
                stepped,
                main_grad_bytes,
                frame.fixed_bytes,
                gradient_copy=step_gradient_copy,
                working_bytes=working,
            )
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
