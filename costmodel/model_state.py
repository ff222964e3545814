"""Model state of one rank: weights, main gradients and optimizer state, per parameter and per
pipeline stage, and the optimizer step's peak. `costmodel.memory.memory_per_stage` adds
them to each stage's activations, buffers and allowance.

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
- LoRA (`TrainingJob.lora`): the frozen base keeps its weights as above, but Megatron-core
  builds gradient buffers and optimizer state for parameters with ``requires_grad`` only
  (``DistributedDataParallel.__init__`` skips the others, ``get_param_groups`` in
  ``megatron/core/optimizer/__init__.py``; NVIDIA/Megatron-LM d0b3b775, the Megatron-LM of
  Megatron-Bridge v0.5.0): gradients and optimizer state count the adapters only
  (`costmodel.rank_params.StageParams.trained`), whose weights are 16-bit
  (`trained_weights`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from costmodel.compute import FP32_BYTES
from costmodel.memory_allowances import BF16_WEIGHTS, Fp8WeightStorage, model_weight_bytes
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
from costmodel.rank_params import StageParams, non_unit_params, optimizer_shards
from costmodel.runtimes.megatron.megatron_fsdp import (
    GATHERED_LAYERS,
    fsdp_state_bytes,
    optimizer_sharded,
)
from costmodel.runtimes.megatron.zero3_schedule import gathered_layers
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


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


def trained_weights(job: TrainingJob, fp8_weights: Fp8WeightStorage) -> Fp8WeightStorage:
    """The weight storage of the parameters the optimizer steps: ``fp8_weights``, or for a
    LoRA job the adapters', 16-bit parameters whatever the base's FP8 or NVFP4 parameter
    storage (Megatron-Bridge's ``ParallelLinearAdapter`` builds Megatron-core's own
    ``ColumnParallelLinear``/``RowParallelLinear`` after the model, outside Transformer
    Engine's quantized model init, and casts them to the model's dtype)."""
    if job.lora is None:
        return fp8_weights
    return replace(fp8_weights, fp8_param=False, fp4_param=False)


def plan_adam_state(
    job: TrainingJob,
    plan: ParallelPlan,
    optimizer: OptimizerPrecision = DEFAULT_PRECISION,
    fp8_weights: Fp8WeightStorage | None = None,
) -> AdamStateBytes:
    """Adam's state per parameter of ``plan`` (`costmodel.optimizer_state.adam_state_bytes`
    with the FP8 weight fields of the trained parameters, `trained_weights`, and the plan's
    Megatron-FSDP). Raises `SpecError` where Megatron-core refuses the precision-aware
    optimizer for the plan (`costmodel.optimizer_state.precision_aware_unmet`)."""
    unmet = precision_aware_unmet(
        optimizer,
        distributed_optimizer=plan.distributed_optimizer,
        megatron_fsdp=plan.use_megatron_fsdp,
    )
    if unmet is not None:
        raise SpecError(f"[{PRECISION_AWARE_RULE}] {unmet}")
    weights = trained_weights(job, BF16_WEIGHTS if fp8_weights is None else fp8_weights)
    return adam_state_bytes(
        job.precision,
        optimizer,
        fp8_recipe=weights.recipe,
        fp8_param=weights.fp8_param,
        fp4_param=weights.fp4_param,
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


@dataclass(frozen=True, kw_only=True, slots=True)
class StateLayout:
    """How a plan holds its model state and steps its optimizer, the same on every pipeline
    stage (`state_layout`)."""

    weight_bytes: int
    """Bytes per weight element (`bytes_per_param`); the linear layers' weights take
    ``fp8_weights``'s bytes instead."""
    grad_bytes: int
    """Bytes per main-gradient element (`bytes_per_param`)."""
    adam_bytes: int
    """Adam's state bytes per parameter (`plan_adam_state`)."""
    dense_shards: int
    """Ranks the dense parameters' optimizer state is sharded over
    (`costmodel.rank_params.optimizer_shards`; `costmodel.optimizer_muon.muon_shards`)."""
    expert_shards: int
    """Ranks the routed experts' optimizer state is sharded over (as ``dense_shards``)."""
    step_grad_copies: int
    """Gradient buffers per parameter at the optimizer step (`held_gradient_copies`)."""
    held_grad_copies: int
    """Gradient buffers per parameter during the forward and backward
    (`held_gradient_copies`)."""
    fp8_weights: Fp8WeightStorage
    """How the linear layers' weights are stored
    (`costmodel.execution_derived.fp8_weight_storage`)."""
    optimizer_offload_fraction: float
    """Share of the optimizer state in host memory
    (`ExecutionOptions.optimizer_cpu_offload_fraction`, `device_optimizer_bytes`)."""
    main_grad_bytes: int
    """The main-gradient buffer's element size under mixed precision
    (`ExecutionOptions.main_grad_bytes`)."""
    step_gradient_copy: bool
    """The step copies 16-bit gradients to fp32 (`ExecutionOptions.step_gradient_copy`,
    `step_peak_bytes`)."""
    zero3_engine: bool = False
    """Sharded weights run DeepSpeed's stage-3 engine (`ExecutionOptions.param_gather_engine`
    ``deepspeed_zero3``): its working set of gathered modules
    (`costmodel.runtimes.megatron.zero3_schedule.gathered_layers`) in place of two layers, and
    no module held whole outside it."""


def state_layout(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    *,
    main_grad_bytes: int,
    optimizer: OptimizerPrecision,
    optimizer_offload_fraction: float,
    fp8_weights: Fp8WeightStorage,
    ddp_gradient_copy: bool,
    stale_main_grad: bool,
    step_gradient_copy: bool,
    zero3_engine: bool = False,
) -> StateLayout:
    """The plan's `StateLayout`: bytes per parameter with Adam's state of ``optimizer``
    (`plan_adam_state`; the default fp32 state where ``optimizer_offload_fraction`` > 0,
    `costmodel.optimizer_state.with_offload`), the optimizer's shards (Muon's for a Muon
    job; dp·cp and expert-DP where Megatron-FSDP shards the optimizer state,
    `costmodel.runtimes.megatron.megatron_fsdp.optimizer_sharded`) and the gradient buffers
    held (`held_gradient_copies`); the other arguments are kept as they are. Raises
    `SpecError` as `plan_adam_state`."""
    optimizer = with_offload(optimizer, optimizer_offload_fraction)
    adam = plan_adam_state(job, plan, optimizer, fp8_weights)
    weight, grad, state = bytes_per_param(job, main_grad_bytes, adam)
    dense_shards, expert_shards = optimizer_shards(model, plan)
    if plan.use_megatron_fsdp and optimizer_sharded(plan):
        dense_shards, expert_shards = plan.dp * plan.cp, max(plan.expert_dp, 1)
    if is_muon(job):
        dense_shards, expert_shards = muon_shards(job, plan)
    step_copies, held_copies = held_gradient_copies(
        plan, ddp_gradient_copy=ddp_gradient_copy, stale_main_grad=stale_main_grad
    )
    return StateLayout(
        weight_bytes=weight,
        grad_bytes=grad,
        adam_bytes=state,
        dense_shards=dense_shards,
        expert_shards=expert_shards,
        step_grad_copies=step_copies,
        held_grad_copies=held_copies,
        fp8_weights=fp8_weights,
        optimizer_offload_fraction=optimizer_offload_fraction,
        main_grad_bytes=main_grad_bytes,
        step_gradient_copy=step_gradient_copy,
        zero3_engine=zero3_engine and plan.use_megatron_fsdp,
    )


def stage_state_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    params: StageParams,
    layout: StateLayout,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes on the device of one rank of stage
    ``pp_rank`` holding ``params``: the linear layers' weights as ``layout.fp8_weights``
    keeps them, ``layout.held_grad_copies`` gradient buffers of the trained parameters
    (`costmodel.rank_params.StageParams.trained`), their optimizer state over its shards
    (Muon's worst rank, `costmodel.muon_sharding.worst_rank_state_bytes`);
    Megatron-FSDP's own buffers instead under Megatron-FSDP
    (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`, with TE's cached FP8
    copy); less the offloaded share of the optimizer state (`device_optimizer_bytes`)."""
    weight, grad, state = layout.weight_bytes, layout.grad_bytes, layout.adam_bytes
    fp8_weights = layout.fp8_weights
    optimizer = state * (
        params.trained_dense / layout.dense_shards + params.trained_expert / layout.expert_shards
    )
    if is_muon(job):
        optimizer = worst_rank_state_bytes(model, job, plan, pp_rank, adam_bytes=state)
    linear_bytes = fp8_weights.linear_bytes(job) * params.linear
    weights_bytes = weight * (params.total - params.linear) + linear_bytes
    gradients_bytes = layout.held_grad_copies * grad * params.trained
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
            non_unit_params=0.0 if layout.zero3_engine else non_unit_params(model, plan, pp_rank),
            gathered_layers=gathered_layers(model, plan)
            if layout.zero3_engine
            else GATHERED_LAYERS,
        )
        fsdp_cache = fp8_weights.cache_bytes(job) * params.linear
        weights_bytes = fsdp.weights_bytes + fsdp_cache
        gradients_bytes = fsdp.gradients_bytes
        optimizer = fsdp.optimizer_bytes
    optimizer = device_optimizer_bytes(optimizer, layout.optimizer_offload_fraction)
    return weights_bytes, gradients_bytes, optimizer


def stage_step_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    params: StageParams,
    layout: StateLayout,
    *,
    model_state_bytes: float,
    backward_peak_bytes: float,
    fixed_bytes: float,
) -> float:
    """Bytes the optimizer step of one rank of stage ``pp_rank`` holds beyond
    ``backward_peak_bytes`` (`costmodel.memory.StageMemory.optimizer_step_bytes`):
    `step_peak_bytes` of its model state (``model_state_bytes``, less the gradient buffers
    held in the backward only), the parameters it steps, ``fixed_bytes`` of the allowance,
    the fp32 gradient copy (``layout.step_gradient_copy``) and Muon's working tensors
    (`costmodel.muon_sharding.step_working_bytes`; none under Megatron-FSDP); 0 where the
    step adds neither or the backward's peak is the larger."""
    working = 0.0
    if is_muon(job) and not plan.use_megatron_fsdp:
        working = step_working_bytes(model, job, plan, pp_rank, weight_bytes=layout.weight_bytes)
    if not (layout.step_gradient_copy or working):
        return 0.0
    stepped = params.trained_dense / layout.dense_shards + (
        params.trained_expert / layout.expert_shards
    )
    backward_only = layout.held_grad_copies - layout.step_grad_copies
    step_state = model_state_bytes - backward_only * layout.grad_bytes * params.trained
    peak = step_peak_bytes(
        job,
        step_state,
        stepped,
        layout.main_grad_bytes,
        fixed_bytes,
        gradient_copy=layout.step_gradient_copy,
        working_bytes=working,
    )
    return max(0.0, peak - backward_peak_bytes)
