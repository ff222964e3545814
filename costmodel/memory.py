"""Memory per rank for every pipeline stage.

`memory_per_stage` gives one `StageMemory` per pipeline stage (all ranks of a stage hold the
same amount): weights, gradients and optimizer state of the layers the stage holds
(`costmodel.rank_params` places and counts them), activations of its in-flight microbatches
(`costmodel.activations`), communication buffers and a framework allowance
(`costmodel.memory_allowances`, with the FP8 weight storage).

Bytes per parameter, the optimizer's shards, the gradient buffers held and the optimizer
step's second peak are counted in `costmodel.model_state`.

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
  cross-entropy implementation saves (`costmodel.vocab_activations.logits_element_bytes`: an
  fp32 softmax, or the bf16 logits under Transformer Engine's fused loss); communication
  buffers and a framework allowance are added;
- FP8 runs keep the linear layers' FP8-cast inputs (1 byte, Transformer Engine; the
  attention output projection keeps none under current scaling and MXFP8,
  `costmodel.activation_shard.projection_saves_original_input`) and runs without hidden
  dropout keep no masks (`costmodel.activations`); the estimator assumes
  bf16 and dropout whatever the run;
- the main-gradient buffer takes the run's element size (``main_grad_bytes``: 2 with
  ``--grad-reduce-in-bf16``); the estimator always counts 4;
- LoRA jobs keep gradients and optimizer state for the adapters only
  (`costmodel.model_state`) and the activations their frozen layers and adapters save
  (`costmodel.layer_activations`); the estimator has no LoRA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.activation_shard import activation_element_bytes, projection_saves_original_input
from costmodel.activations import StageActivations, stage_activations
from costmodel.bf16_layers import bf16_linear_params, without_bf16_linear
from costmodel.cuda_graph_memory import graph_input_copy_bytes
from costmodel.layer_activations import AttentionKernel
from costmodel.memory_allowances import BF16_WEIGHTS, Fp8WeightStorage, FrameworkAllowance
from costmodel.model_state import (
    StateLayout,
    bytes_per_param,
    stage_state_bytes,
    stage_step_bytes,
    state_layout,
)
from costmodel.optimizer_state import DEFAULT_PRECISION, OptimizerPrecision
from costmodel.rank_params import StageParams, stage_layer_indices, stage_params
from costmodel.saved_inputs import expert_fc1_saves_input
from costmodel.vocab_activations import CrossEntropyFusion
from specs.finetune import LoraSpec
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
    (`costmodel.muon_sharding.step_working_bytes`; `costmodel.model_state.step_peak_bytes`);
    0 where the backward's peak is the larger or the step adds neither."""
    cuda_graph_bytes: float = 0.0
    """Per-layer CUDA graphs' static input copies of the chunk inputs received from another
    stage, one per in-flight microbatch (`costmodel.cuda_graph_memory.graph_input_copy_bytes`,
    `ExecutionOptions.cuda_graph_scopes`); 0 without per-layer graphs and at pp 1."""

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
            + self.cuda_graph_bytes
        )


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
        total += e * rows * model.expert_hidden_size  # permuted tokens before the all-to-all
    return total + _bucket_padding_bytes(job, plan, params, main_grad_bytes)


def _bucket_padding_bytes(
    job: TrainingJob, plan: ParallelPlan, params: StageParams, main_grad_bytes: int = 4
) -> float:
    """Distributed-optimizer padding: each bucket of the weight and gradient buffers ends on
    a multiple of lcm(dp·cp, 128) elements (megatron-facts.md §5.1); the buffers hold the
    trained parameters (`costmodel.rank_params.StageParams.trained`: a LoRA job's
    adapters)."""
    if not plan.distributed_optimizer:
        return 0.0
    weight, grad, _ = bytes_per_param(job, main_grad_bytes)
    trained = params.trained
    bucket = plan.bucket_size_params() if plan.overlap_grad_reduce else trained
    buckets = math.ceil(trained / bucket) if trained else 0
    return buckets * math.lcm(plan.dp * plan.cp, 128) * (weight + grad)


def _stage_memory(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    params: StageParams,
    acts: StageActivations,
    layout: StateLayout,
    frame: FrameworkAllowance,
    fragmentation: float,
    graph_bytes: float = 0.0,
) -> StageMemory:
    """`StageMemory` of one rank of stage ``pp_rank`` holding ``params`` and ``acts``: its
    model state (`costmodel.model_state.stage_state_bytes`), communication buffers, the
    allowance's fixed bytes plus ``fragmentation`` of the activation and buffer bytes, and
    what the optimizer step holds beyond that peak
    (`costmodel.model_state.stage_step_bytes`), and ``graph_bytes`` of CUDA graph static
    buffers (`StageMemory.cuda_graph_bytes`), held for the graphs' lifetime: through the
    backward and the optimizer step alike."""
    comm = _comm_buffers_bytes(model, job, plan, pp_rank, params, layout.main_grad_bytes)
    weights, gradients, optimizer = stage_state_bytes(model, job, plan, pp_rank, params, layout)
    dynamic = (
        acts.layers_bytes
        + acts.recompute_working_bytes
        + acts.embedding_bytes
        + acts.output_bytes
        + comm
    )
    state_bytes = weights + gradients + optimizer
    framework = frame.fixed_bytes + fragmentation * dynamic
    step = stage_step_bytes(
        model,
        job,
        plan,
        pp_rank,
        params,
        layout,
        model_state_bytes=state_bytes,
        backward_peak_bytes=state_bytes + dynamic + framework,
        fixed_bytes=frame.fixed_bytes,
    )
    return StageMemory(
        pp_rank=pp_rank,
        num_layers=len(stage_layer_indices(model, plan, pp_rank)),
        in_flight_microbatches=acts.in_flight_microbatches,
        weights_bytes=weights,
        gradients_bytes=gradients,
        optimizer_bytes=optimizer,
        activations_bytes=acts.layers_bytes,
        recompute_working_bytes=acts.recompute_working_bytes,
        embedding_activations_bytes=acts.embedding_bytes,
        output_activations_bytes=acts.output_bytes,
        comm_buffers_bytes=comm,
        framework_bytes=framework,
        optimizer_step_bytes=step,
        cuda_graph_bytes=graph_bytes,
    )


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
    fp8_attention: bool = False,
    bf16_layers: frozenset[int] = frozenset(),
    zero3_engine: bool = False,
    cuda_graph_scopes: frozenset[str] = frozenset(),
) -> tuple[StageMemory, ...]:
    """Peak bytes per rank of every pipeline stage, stage 0 first. The options are the
    `ExecutionOptions` fields of the same name, with ``dropout`` for ``hidden_dropout``,
    ``keep_outputs`` for ``deallocate_pipeline_outputs`` off, ``cross_entropy`` for
    ``cross_entropy_fusion``, ``fragmentation`` for ``allocator_fragmentation`` (when given,
    it replaces the allowance's share for the ``expandable_segments`` allocator mode,
    `FrameworkAllowance.fragmentation`), ``zero3_engine`` for ``param_gather_engine``
    (DeepSpeed's stage-3 engine), ``fp8_weights`` for the FP8 weight fields
    (`costmodel.execution_derived.fp8_weight_storage`) and ``optimizer`` for Adam's state
    dtypes (`costmodel.execution_derived.optimizer_precision`). The model-state options
    (``main_grad_bytes``, ``ddp_gradient_copy``, ``step_gradient_copy``, ``optimizer``,
    ``optimizer_offload_fraction``, ``stale_main_grad``, ``zero3_engine``) are priced by
    `costmodel.model_state.state_layout` and `_stage_memory`, the activation options by
    `stage_activation_bytes`; ``bf16_layers``: the global indices of the decoder layers an
    fp8 or nvfp4 job keeps in bf16 (`costmodel.bf16_layers.bf16_layers`), which save their
    activations as a bf16 job's and hold their linear weights as bf16 parameters
    (`stage_weight_params`); ``cuda_graph_scopes``: the parts of each layer captured in CUDA
    graphs, whose static input copies add `StageMemory.cuda_graph_bytes`.

    Raises `SpecError` when the layers do not split over pp·vpp, the global batch gives
    no microbatch, the plan cannot run the precision-aware optimizer, or FP8 attention is
    asked of a job or recipe that cannot run it."""
    frame = FrameworkAllowance() if allowance is None else allowance
    if fragmentation is None:
        fragmentation = frame.fragmentation(expandable_segments)
    layout = state_layout(
        model,
        job,
        plan,
        main_grad_bytes=main_grad_bytes,
        optimizer=optimizer,
        optimizer_offload_fraction=optimizer_offload_fraction,
        fp8_weights=fp8_weights,
        ddp_gradient_copy=ddp_gradient_copy,
        stale_main_grad=stale_main_grad,
        step_gradient_copy=step_gradient_copy,
        zero3_engine=zero3_engine,
    )
    stages = []
    for rank in range(plan.pp):
        params = stage_weight_params(model, plan, rank, job.lora, bf16_layers)
        acts = stage_activation_bytes(
            model,
            job,
            plan,
            rank,
            attention,
            dropout,
            keep_outputs,
            cross_entropy,
            fp8_weights,
            fp8_attention,
            bf16_layers,
        )
        graph_bytes = graph_input_copy_bytes(model, job, plan, rank, cuda_graph_scopes)
        stages.append(
            _stage_memory(
                model, job, plan, rank, params, acts, layout, frame, fragmentation, graph_bytes
            )
        )
    return tuple(stages)


def stage_weight_params(
    model: ModelSpec,
    plan: ParallelPlan,
    pp_rank: int,
    lora: LoraSpec | None,
    bf16_layers: frozenset[int],
) -> StageParams:
    """Parameters one rank of stage ``pp_rank`` holds (`costmodel.rank_params.stage_params`,
    a ``lora`` job's adapters trained), with the linear weights of its ``bf16_layers`` (the
    global decoder-layer indices an fp8 or nvfp4 job keeps in bf16) held as bf16 parameters,
    without `Fp8WeightStorage`'s copies (`costmodel.bf16_layers.without_bf16_linear`)."""
    params = stage_params(model, plan, pp_rank, lora)
    if not bf16_layers:
        return params
    layers = stage_layer_indices(model, plan, pp_rank)
    return without_bf16_linear(params, bf16_linear_params(model, plan, layers, bf16_layers))


def stage_activation_bytes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    attention: AttentionKernel,
    dropout: bool,
    keep_outputs: bool,
    cross_entropy: CrossEntropyFusion,
    fp8_weights: Fp8WeightStorage,
    fp8_attention: bool,
    bf16_layers: frozenset[int],
) -> StageActivations:
    """`costmodel.activations.stage_activations` of one rank of stage ``pp_rank`` under the
    options of `memory_per_stage`: ``fp8_weights``' recipe sets whether the attention output
    projection keeps an FP8 copy of its input
    (`costmodel.activation_shard.projection_saves_original_input`) and whether the routed
    experts' first GEMM saves its 16-bit input
    (`costmodel.saved_inputs.expert_fc1_saves_input`); with ``fp8_attention`` the fused
    attention core saves its Q, K, V and output in that recipe's FP8 form
    (`costmodel.fp8_attention.core_saved_bytes`)."""
    return stage_activations(
        model,
        job,
        plan,
        pp_rank,
        attention=attention,
        dropout=dropout,
        keep_outputs=keep_outputs,
        cross_entropy=cross_entropy,
        proj_saves_input=projection_saves_original_input(fp8_weights.recipe),
        fp8_attention_recipe=fp8_weights.recipe if fp8_attention else None,
        bf16_layers=bf16_layers,
        expert_fc1_saves_input=expert_fc1_saves_input(plan, job.precision, fp8_weights.recipe),
    )


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
