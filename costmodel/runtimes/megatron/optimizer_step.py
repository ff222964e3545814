"""The optimizer step of one rank of a pipeline stage in the ``megatron`` runtime (step 4 of
`costmodel.runtimes.megatron.pricing`): Adam over the rank's shard of the stage's
parameters, the host's share under optimizer CPU offload, Muon's step in place of Adam's,
and the data-parallel wrapper's passes over the gradient buffer. Seconds.
"""

from __future__ import annotations

from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage, optimizer_precision
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.model_state import plan_adam_state
from costmodel.optimizer_muon import is_muon
from costmodel.optimizer_offload import host_optimizer_step_s, offloaded_step_s
from costmodel.optimizer_passes import (
    grad_buffer_passes_time_s,
    optimizer_step_tensors,
    optimizer_step_time_s,
)
from costmodel.passes import ChunkCost
from costmodel.rank_params import stage_lora_adapters, stage_outside_tensors, stage_weight_layers
from costmodel.runtimes.megatron.megatron_fsdp import optimizer_sharded
from costmodel.runtimes.megatron.muon_step import muon_optimizer_step_s
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def stage_optimizer_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    placements: PlanPlacements,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> float:
    """The optimizer step of one rank of a stage
    (`costmodel.optimizer_passes.optimizer_step_time_s`) over the trained parameters of its
    chunks (`ChunkCost.dense_params`: a LoRA job's adapters) in
    `costmodel.optimizer_passes.optimizer_step_tensors` tensors of the layers whose weights
    the rank holds, its MTP layers included (`costmodel.rank_params.stage_weight_layers`),
    and of its tensors outside them (`costmodel.rank_params.stage_outside_tensors`).
    With it, the data-parallel wrapper's passes over the gradient buffer before its
    reduction (`costmodel.optimizer_passes.grad_buffer_passes_time_s`: the division by the
    data-parallel size when the group has more than one rank, the NaN check with
    `ExecutionOptions.grad_nan_check`), which occupy the same compute stream once per
    iteration. Adam's state is the options' (`costmodel.model_state.plan_adam_state`: the
    default fp32 state under CPU offload). With optimizer CPU offload
    (`ExecutionOptions.optimizer_cpu_offload_fraction`) the offloaded share of the shard
    steps on the host beside the device's passes (`costmodel.optimizer_offload`)."""
    dense = sum(c.dense_params for c in chunks)
    expert = sum(c.expert_params for c in chunks)
    if optimizer_sharded(plan):
        shard = dense / placements["dp-cp"].size + expert / placements["edp"].size
    else:
        shard = dense + expert
    layers = stage_weight_layers(model, plan, stage)
    local_experts = model.num_experts // plan.ep if model.is_moe else 0
    adapters = None if job.lora is None else stage_lora_adapters(model, plan, stage, job.lora)
    outside = stage_outside_tensors(model, plan, stage)
    tensors = optimizer_step_tensors(layers, local_experts, adapters, outside=outside)
    offloaded = options.optimizer_cpu_offload_fraction * shard
    step_s = optimizer_step_time_s(
        profile,
        shard_params=shard,
        local_params=dense + expert,
        mixed_precision=job.precision != "fp32",
        num_tensors=tensors,
        loss_scaling=options.loss_scaling,
        main_grad_bytes=options.main_grad_bytes,
        state=plan_adam_state(job, plan, optimizer_precision(options), fp8_weight_storage(options)),
        offloaded_params=offloaded,
    )
    if offloaded > 0:
        host_s = host_optimizer_step_s(
            profile, offloaded, overlap=options.overlap_cpu_optimizer_d2h_h2d
        )
        step_s = offloaded_step_s(step_s, host_s)
    if is_muon(job):  # Muon on the 2-D weights, Adam on the rest (costmodel.optimizer_muon)
        grads = options.main_grad_bytes
        step_s = muon_optimizer_step_s(
            model, job, plan, profile, stage, dense=dense, expert=expert, main_grad_bytes=grads
        )
    buffer_s = sum(
        grad_buffer_passes_time_s(
            profile,
            params,
            options.main_grad_bytes,
            scale=group.size > 1,
            nan_check=options.grad_nan_check,
        )
        for params, group in ((dense, placements["dp-cp"]), (expert, placements["edp"]))
    )
    return step_s + buffer_s
