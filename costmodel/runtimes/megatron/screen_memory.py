"""Memory columns of the closed-form screen (`costmodel.runtimes.megatron.screen`).

Over the screen's per-plan columns ``c`` (numpy arrays, one entry per plan row), the peak
bytes of one rank, the largest of stage 0, the fullest middle stage and the last stage
(`costmodel.memory.memory_per_stage` in closed form):

- model state: weights, gradient buffers and the device's share of the optimizer state
  (of the trained parameters; a LoRA job's frozen base keeps its weights alone),
  under the distributed optimizer's or Megatron-FSDP's sharding
  (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`; sharded weights and
  gradients keep `GATHERED_LAYERS` layers whole besides their shard) and, under Muon, the
  worst rank's whole parameters (`costmodel.runtimes.megatron.screen_muon`);
- activations of the microbatches a stage holds at its peak
  (`costmodel.activations.stage_activations`, the in-flight counts of
  `costmodel.activations.in_flight_chunk_counts` in closed form), from the per-microbatch
  activation columns of `costmodel.runtimes.megatron.screen_activations.activation_columns`;
- communication buffers (pipeline boundaries, TP and MoE exchange, the distributed
  optimizer's padded buckets) and the framework allowance
  (`costmodel.memory_allowances.FrameworkAllowance`); with
  `ExecutionOptions.step_gradient_copy`, and under Muon (the Newton-Schulz working set or
  `dist_muon`'s gather buffers, `costmodel.runtimes.megatron.screen_muon`), the optimizer
  step's own peak (`costmodel.model_state.step_peak_bytes`);
- per-layer CUDA graphs' static input copies of the received chunk inputs
  (`costmodel.cuda_graph_memory.graph_input_copy_bytes`), taking every chunk's first layer
  to be of the model's first layer's kind.
"""

from __future__ import annotations

import numpy as np

from costmodel import compute as ops
from costmodel.bf16_layers import PRICED_TAGS
from costmodel.cuda_graph_memory import captures_layer_input
from costmodel.cuda_graph_rules import per_layer_graphs
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_weight_storage, optimizer_precision
from costmodel.memory_allowances import FrameworkAllowance
from costmodel.model_state import bytes_per_param, device_optimizer_bytes, step_peak_bytes
from costmodel.optimizer_muon import is_muon
from costmodel.optimizer_state import with_offload
from costmodel.runtimes.megatron.megatron_fsdp import GATHERED_LAYERS
from costmodel.runtimes.megatron.screen_muon import worst_state_bytes, worst_working_bytes
from costmodel.runtimes.megatron.screen_sharding import adam_state_per_row
from specs.job import TrainingJob
from specs.model import ModelSpec


def _in_flight(
    pp: np.ndarray, vpp: np.ndarray, m: np.ndarray, stage: np.ndarray, chunk: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Microbatches of ``chunk`` that ``stage`` holds at its peak, and the total over chunks
    (`costmodel.activations.in_flight_chunk_counts` in closed form)."""
    one_f_one_b = np.minimum(pp - stage, m)
    held = np.minimum(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp)
    groups, rest = held // pp, held % pp
    per_chunk = pp * (groups // vpp + (chunk < groups % vpp)) + np.where(
        groups % vpp == chunk, rest, 0
    )
    interleaved = vpp > 1
    return (np.where(interleaved, per_chunk, one_f_one_b), np.where(interleaved, held, one_f_one_b))


def _optimizer_shards(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Ranks the optimizer state of a dense and of an expert parameter is sharded over."""
    dense_shards = np.where(c["optim_sharded"], c["dp"] * c["cp"], 1)
    expert_shards = np.where(c["optim_sharded"], c["edp"], 1)
    return dense_shards, expert_shards


def _model_state_bytes(
    c: dict[str, np.ndarray],
    tag: str,
    job: TrainingJob,
    options: ExecutionOptions,
    state: np.ndarray,
    grad_copies: np.ndarray,
) -> np.ndarray:
    """Weights, gradient buffers and device optimizer state of stage ``tag``'s rank, bytes;
    ``state`` is Adam's state bytes per parameter (`screen_sharding.adam_state_per_row`),
    ``grad_copies`` the gradient buffers held in the backward
    (`costmodel.model_state.held_gradient_copies`)."""
    weight, grad, _ = bytes_per_param(job, options.main_grad_bytes)
    fp8_weights = fp8_weight_storage(options)
    linear_param, linear_cache = fp8_weights.param_bytes(job), fp8_weights.cache_bytes(job)
    linear_shard = fp8_weights.shard_bytes(job)
    fsdp = c["use_megatron_fsdp"].astype(bool)
    dense_shards, expert_shards = _optimizer_shards(c)
    dense, expert = c[f"p{tag}d"], c[f"p{tag}e"]
    params = dense + expert
    # Megatron-FSDP (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_state_bytes`):
    # sharded weights and gradients keep GATHERED_LAYERS layers whole besides their
    # shard; sharded weights keep the modules outside the units whole
    sharded = dense / (c["dp"] * c["cp"]) + expert / np.maximum(c["edp"], 1)
    non_unit = weight * c[f"p{tag}u"] * (1.0 - 1.0 / (c["dp"] * c["cp"]))
    resident = np.minimum(sharded + GATHERED_LAYERS * c["layer_max"], params)
    # linear layers' weights at `Fp8WeightStorage` bytes; those of the layers kept in bf16
    # (`costmodel.bf16_layers.without_bf16_linear`) at the job's weight bytes
    linear = c[f"p{tag}l"] - c[f"p{tag}l16"]
    whole = weight * (params - linear) + linear_param * linear
    layer = linear_param * c["layer_lin"] + weight * c["layer_other"]
    shard = (weight * (params - linear) + linear_shard * linear) / params * sharded
    gathered = np.minimum(shard + GATHERED_LAYERS * layer + non_unit, whole)
    # a LoRA job's frozen base: its weights only (`costmodel.model_state.stage_state_bytes`)
    frozen, frozen_linear = c[f"p{tag}f"], c[f"p{tag}fl"]
    frozen_bytes = weight * (frozen - frozen_linear) + fp8_weights.linear_bytes(job) * frozen_linear
    optimizer_state = state * (dense / dense_shards + expert / expert_shards)
    if is_muon(job):  # the worst rank's whole parameters (costmodel.muon_sharding)
        optimizer_state = np.where(fsdp, optimizer_state, worst_state_bytes(c, tag))
    return (
        np.where(c["params_sharded"], gathered, whole)
        + frozen_bytes
        + linear_cache * linear
        + grad
        * np.where(c["grads_sharded"] & c["use_megatron_fsdp"], resident, params * grad_copies)
        + device_optimizer_bytes(optimizer_state, options.optimizer_cpu_offload_fraction)
    )


def _activation_bytes(
    c: dict[str, np.ndarray],
    tag: str,
    stage: np.ndarray,
    m: np.ndarray,
    scale: np.ndarray,
    boundary: np.ndarray,
    keep_outputs: bool,
) -> np.ndarray:
    """Activation bytes stage ``tag`` (index ``stage``) holds at its peak: its in-flight
    microbatches' layers, the MTP depths' on the last chunk (``act_mtp`` per
    depth), the embedding's on stage 0, the output layer's and loss's on the last stage,
    and with ``keep_outputs`` (`costmodel.activations.stage_activations`) the sent
    ``boundary`` tensors; ``scale`` is micro-batch size over cp."""
    pp, vpp = c["pp"], c["vpp"]
    first_chunk, total = _in_flight(pp, vpp, m, stage, np.zeros_like(pp))
    last_chunk, _ = _in_flight(pp, vpp, m, stage, vpp - 1)
    kinds = [k for k in PRICED_TAGS if f"a{tag}{k}" in c]
    per_chunk = sum(c[f"a{tag}{k}"] * c[f"act_{k}"] for k in kinds) / vpp
    layers = (total * per_chunk + last_chunk * c[f"mtp{tag}"] * c["act_mtp"]) * scale
    acts = layers + c["act_work"] * scale
    acts += np.where(stage == 0, first_chunk * c["act_emb"] * scale, 0.0)
    loss = last_chunk * c["act_out"] + np.where(last_chunk > 0, c["act_out_once"], 0.0)
    acts += np.where(stage == pp - 1, loss * scale, 0.0)
    if keep_outputs:
        sending = total - np.where(stage == pp - 1, last_chunk, 0)
        acts += np.where(pp > 1, sending * boundary, 0.0)
    return acts


def _graph_copy_bytes(
    c: dict[str, np.ndarray],
    model: ModelSpec,
    options: ExecutionOptions,
    stage: np.ndarray,
    m: np.ndarray,
    boundary: np.ndarray,
) -> np.ndarray:
    """`costmodel.cuda_graph_memory.graph_input_copy_bytes` in closed form: one
    ``boundary`` tensor per in-flight microbatch of every chunk that receives its input,
    where the scopes capture the first part of the model's first layer."""
    scopes = options.cuda_graph_scopes
    if not per_layer_graphs(scopes) or not captures_layer_input(model.layer_kinds()[0], scopes):
        return np.zeros(len(stage))
    pp = c["pp"]
    first_chunk, total = _in_flight(pp, c["vpp"], m, stage, np.zeros_like(pp))
    receiving = total - np.where(stage == 0, first_chunk, 0)
    return np.where(pp > 1, receiving * boundary, 0.0)


def _exchange_bytes(
    c: dict[str, np.ndarray], model: ModelSpec, job: TrainingJob
) -> tuple[np.ndarray, np.ndarray]:
    """One microbatch's pipeline boundary tensor, and the TP (sequence parallelism,
    userbuffers) and MoE dispatch buffers, bytes."""
    e = ops.element_bytes(job.precision)
    tokens = c["micro_batch_size"] * job.seq_length / c["cp"]
    sp_div = np.where(c["sequence_parallel"], c["tp"], 1)
    boundary = e * tokens * model.hidden_size / sp_div
    extra = np.where(
        c["tp_comm_overlap"],
        4 * e * tokens * model.hidden_size,
        np.where(c["sequence_parallel"], e * tokens * model.hidden_size, 0.0),
    )
    if model.is_moe:
        rows = model.moe_top_k * tokens / sp_div * (model.moe_capacity_factor or 1.0)
        extra = extra + e * rows * model.expert_hidden_size
    return boundary, extra


def memory_bytes(
    c: dict[str, np.ndarray],
    model: ModelSpec,
    job: TrainingJob,
    m: np.ndarray,
    options: ExecutionOptions,
) -> np.ndarray:
    """Peak bytes per rank over stages 0, 1 and p-1 (see the module docstring); ``m`` is
    the number of microbatches (at least 1). Pipeline outputs are kept unless
    `ExecutionOptions.deallocate_pipeline_outputs`; the gradient copies, fragmentation,
    optimizer precision, offloading and CUDA graph scopes are the options' as in
    `costmodel.memory.memory_per_stage`."""
    weight, grad, _ = bytes_per_param(job, options.main_grad_bytes)
    optimizer = with_offload(optimizer_precision(options), options.optimizer_cpu_offload_fraction)
    state = adam_state_per_row(c, job, optimizer, fp8_weight_storage(options))
    # gradient buffers in the backward and at the step
    # (`costmodel.model_state.held_gradient_copies`)
    fsdp = c["use_megatron_fsdp"].astype(bool)
    ddp = c["overlap_grad_reduce"].astype(bool) & ~fsdp
    local = (
        ~c["overlap_grad_reduce"].astype(bool) & ~fsdp & ~c["distributed_optimizer"].astype(bool)
    )
    step_copies = np.where(ddp & options.ddp_gradient_copy, 2, 1)
    grad_copies = np.where(local & options.stale_main_grad, 2, step_copies)
    frame = FrameworkAllowance()
    fragmentation = options.allocator_fragmentation
    share = (
        frame.fragmentation(options.expandable_segments) if fragmentation is None else fragmentation
    )
    pp = c["pp"]
    scale = c["micro_batch_size"] / c["cp"]
    boundary, extra = _exchange_bytes(c, model, job)
    distopt = c["distributed_optimizer"].astype(bool)
    dense_shards, expert_shards = _optimizer_shards(c)
    padding_unit = np.lcm(c["dp"] * c["cp"], 128) * (weight + grad)
    keep_outputs = not options.deallocate_pipeline_outputs
    peak = np.zeros(len(pp))
    for tag, stage in (("0", np.zeros_like(pp)), ("1", c["s1"]), ("l", pp - 1)):
        dense, expert = c[f"p{tag}d"], c[f"p{tag}e"]
        params = dense + expert
        model_state = _model_state_bytes(c, tag, job, options, state, grad_copies)
        acts = _activation_bytes(c, tag, stage, m, scale, boundary, keep_outputs)
        directions = np.where(pp == 1, 0, np.where(c["vpp"] > 1, 2, (stage > 0) + (stage < pp - 1)))
        buckets = np.where(c["overlap_grad_reduce"], np.ceil(params / c["bucket"]), 1)
        comm = directions * boundary + extra + np.where(distopt, buckets * padding_unit, 0.0)
        total_bytes = model_state + acts + comm + frame.fixed_bytes + share * (acts + comm)
        if options.step_gradient_copy or is_muon(job):
            stepped = dense / dense_shards + expert / expert_shards
            step_state = model_state - (grad_copies - step_copies) * grad * params
            step = step_peak_bytes(
                job,
                step_state,
                stepped,
                options.main_grad_bytes,
                frame.fixed_bytes,
                gradient_copy=options.step_gradient_copy,
                working_bytes=worst_working_bytes(c, tag) if is_muon(job) else 0.0,
            )
            total_bytes = np.maximum(total_bytes, step)
        # the graphs' static buffers live through the backward and the step alike
        total_bytes += _graph_copy_bytes(c, model, options, stage, m, boundary)
        peak = np.maximum(peak, total_bytes)
    return peak
