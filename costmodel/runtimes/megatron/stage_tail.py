"""A pipeline stage's work after its last backward in the ``megatron`` runtime (steps 3 and 4
of `costmodel.runtimes.megatron.pricing`): the gradient buckets on the stage's
communication stream (`costmodel.runtimes.megatron.grad_reduction`), the finalize
all-reduces (tied embedding between the first and last stage, norm gradients over TP under
sequence parallelism), the optimizer step (`costmodel.runtimes.megatron.optimizer_step`)
and the exposed parameter all-gather (`costmodel.runtimes.megatron.param_gather`). Seconds
from the start of the iteration, bytes where a name says so.
"""

from __future__ import annotations

from costmodel.collectives import collective_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.muon_sharding import smallest_share_fractions
from costmodel.passes import ChunkCost, StageTail
from costmodel.pipeline_sim import TimedAction
from costmodel.rank_params import chunk_weight_layers, shared_word_embedding
from costmodel.runtimes.megatron.grad_reduction import grad_bucket_events
from costmodel.runtimes.megatron.megatron_fsdp import grads_reduced_every_backward
from costmodel.runtimes.megatron.optimizer_step import stage_optimizer_s
from costmodel.runtimes.megatron.param_gather import param_gather_bytes, param_gather_s
from costmodel.runtimes.megatron.zero3_schedule import backward_gather_sweeps
from costmodel.schedules import chunk_layers, plan_stage_chunks
from costmodel.topology import PlanPlacements, end_stages_pair
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan


def _stage_norm_params(model: ModelSpec, plan: ParallelPlan, stage: int) -> float:
    """Norm parameters of a stage: replicated over TP, all-reduced there under SP; with
    them the DSA indexers' (`specs.params.LayerParams.indexer`), whose gradients Megatron
    averages over tp (``average_gradients_across_tp_domain``,
    ``finalize_model_grads._allreduce_non_tensor_model_parallel_grads``) and whose tp > 1
    needs SP (rule ``dsa_tp_needs_sequence_parallel``), and MLA's down projections
    (`specs.params.LayerParams.latent_down_projections`), ``TELinear`` duplicated over tp
    and marked ``sequence_parallel``."""
    counts = count_params(model)
    total = sum(
        counts.layers[i].norms + counts.layers[i].indexer + counts.layers[i].latent_down_projections
        for chunk in range(plan.vpp)
        for i in chunk_layers(model, plan, stage, chunk)
    )
    return total + (counts.final_norm if stage == plan.pp - 1 else 0)


def _backward_sweeps(model: ModelSpec, plan: ParallelPlan, options: ExecutionOptions) -> float:
    """Gathers of a chunk per backward pass under sharded weights: 1 for Megatron-FSDP,
    `costmodel.runtimes.megatron.zero3_schedule.backward_gather_sweeps` for DeepSpeed's
    stage-3 engine (`ExecutionOptions.param_gather_engine`)."""
    zero3 = plan.use_megatron_fsdp and options.param_gather_engine == "deepspeed_zero3"
    return backward_gather_sweeps(model, plan) if zero3 else 1.0


def stage_tail(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    placements: PlanPlacements,
    stage: int,
    chunks: tuple[ChunkCost, ...],
    row: tuple[TimedAction, ...],
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> StageTail:
    """Gradient buckets on the stage's communication stream, then the finalize all-reduces
    (embedding, SP norms), the optimizer step and the parameter all-gather."""
    pipeline_end = row[-1].end_s
    grad_bytes = options.main_grad_bytes
    layers_per_chunk = tuple(
        chunk_weight_layers(model, at) for at in plan_stage_chunks(model, plan, stage)
    )
    clock, dp_events = 0.0, []
    events = grad_bucket_events(
        profile, plan, stage, chunks, row, placements, grad_bytes, layers_per_chunk
    )
    for ready, name, duration, size in events:
        start = max(clock, ready)
        clock = start + duration
        dp_events.append((name, start, duration, size))
    done = max(pipeline_end, clock)
    # a LoRA job's frozen embedding and norms have no gradient: Megatron-core's
    # finalize_model_grads skips parameters without one (`_allreduce_embedding_grad`:
    # "When the embedding is frozen, the grad is None"; `_allreduce_non_tensor_model_
    # parallel_grads` reads `requires_grad` parameters only)
    trained_base = job.lora is None
    shared = shared_word_embedding(model) and plan.pp > 1
    if trained_base and shared and stage in (0, plan.pp - 1):
        size = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
        pair = end_stages_pair(placements["pp"])
        duration = collective_time_s(profile, "all_reduce", size * grad_bytes, pair)
        dp_events.append(("embedding all_reduce", done, duration, size * grad_bytes))
        done += duration
    norm_s = 0.0
    if trained_base and plan.sequence_parallel and plan.tp > 1:
        size = _stage_norm_params(model, plan, stage) * grad_bytes
        norm_s = collective_time_s(profile, "all_reduce", size, placements["tp"])
        done += norm_s
    return StageTail(
        pipeline_end_s=pipeline_end,
        grads_done_s=done,
        norm_allreduce_s=norm_s,
        optimizer_s=stage_optimizer_s(
            model, job, plan, profile, stage, chunks, placements, options
        ),
        param_gather_s=param_gather_s(
            job,
            plan,
            profile,
            stage,
            chunks,
            placements,
            row,
            layers_per_chunk=layers_per_chunk,
            gather_bytes=param_gather_bytes(model, job, plan, stage, options),
            reduce_s=sum(e[2] for e in events) if grads_reduced_every_backward(plan) else 0.0,
            smallest_shares=smallest_share_fractions(model, job, plan, stage),
            backward_sweeps=_backward_sweeps(model, plan, options),
        ),
        dp_events=tuple(dp_events),
    )
