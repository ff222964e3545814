"""Per-rank weight, gradient and optimizer bytes under Megatron-FSDP.

Megatron-FSDP shards over the data-parallel group (dp·cp for dense parameters, the
expert-data-parallel group for routed experts) what `data_parallel_sharding_strategy`
names, in ZeRO's stages (Rajbhandari et al. 2020, §5: P_os, P_os+g, P_os+g+p):

- `no_shard`: nothing (DDP); `optim`: optimizer state; `optim_grads`: + gradients;
  `optim_grads_params`: + weights.
- Sharded weights are all-gathered one layer (module) at a time for forward and again for
  backward, with the next layer prefetched, so two layers' full (TP/EP-local) weights are
  resident besides the shard; sharded gradients are reduce-scattered a layer at a time, so
  two layers' full gradients are resident while they are produced and reduced, and they
  are reduced in every backward pass, not once per iteration
  (`grads_reduced_every_backward`).
- The unit modules are the transformer layers (Megatron-core's Megatron-FSDP adapter:
  ``fsdp_unit_modules = [TransformerLayer]``, ``megatron/core/distributed/fsdp/
  mcore_fsdp_adapter.py``). The other modules (word embedding, final norm, output layer:
  `costmodel.rank_params.non_unit_params`) are gathered by their forward pre-hook and released
  neither after their forward nor after their backward (only unit modules register
  ``_post_forward`` and the post-backward release, ``megatron_fsdp/megatron_fsdp.py``
  from core_v0.14.0), so under `optim_grads_params` their whole weights are resident
  through the forward and backward passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specs.model import ModelSpec
from specs.params import count_params
from specs.plan import ParallelPlan

GATHERED_LAYERS = 2
"""Layers whose full weights (and gradients) are resident at once: the one computing and
the one prefetched (Megatron-FSDP's double buffering)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FsdpStateBytes:
    """Bytes of one rank's model state under Megatron-FSDP."""

    weights_bytes: float
    """Weight shard plus the gathered working set when weights are sharded."""
    gradients_bytes: float
    """Gradient shard plus the working set when gradients are sharded."""
    optimizer_bytes: float
    """Optimizer state (fp32 master weights and Adam moments)."""


def largest_layer_params(model: ModelSpec, plan: ParallelPlan) -> float:
    """Parameters of the largest transformer layer held by one rank: attention and dense
    MLP over tp, routed experts over ep·etp, norms, router, latent projections, MLA's down
    projections and a DSA indexer whole."""
    return max(
        (layer.attention + layer.mlp) / plan.tp
        + layer.norms
        + layer.router
        + layer.latent_projections
        + layer.latent_down_projections
        + layer.indexer
        + layer.routed_experts / (plan.ep * plan.expert_tp)
        for layer in count_params(model).layers
    )


def largest_layer_weight_bytes(
    model: ModelSpec, plan: ParallelPlan, weight_bytes: float, linear_bytes: float
) -> float:
    """Weight bytes of the largest transformer layer held by one rank, its linear layers
    at ``linear_bytes`` per parameter (FP8 parameters:
    `costmodel.memory_allowances.Fp8WeightStorage`)
    and its norms and router at ``weight_bytes``."""
    return max(
        linear_bytes
        * (
            (layer.attention + layer.mlp) / plan.tp
            + layer.latent_projections
            + layer.latent_down_projections
            + layer.indexer
            + layer.routed_experts / (plan.ep * plan.expert_tp)
        )
        + weight_bytes * (layer.norms + layer.router)
        for layer in count_params(model).layers
    )


def fsdp_state_bytes(
    model: ModelSpec,
    plan: ParallelPlan,
    *,
    dense_params: float,
    expert_params: float,
    bytes_per_param: tuple[int, int, int],
    linear_params: float = 0.0,
    linear_param_bytes: float | None = None,
    linear_shard_bytes: float | None = None,
    non_unit_params: float = 0.0,
    gathered_layers: float = GATHERED_LAYERS,
) -> FsdpStateBytes:
    """Weight, gradient and optimizer bytes of a rank holding ``dense_params`` dense and
    ``expert_params`` routed-expert parameters (its TP/EP/PP share), under the plan's
    sharding strategy. ``bytes_per_param``: (weight, gradient, optimizer) bytes;
    ``linear_params`` of them (the transformer layers' linear layers) are stored at
    ``linear_param_bytes`` each whole or gathered and ``linear_shard_bytes`` each in the
    shard (FP8 parameters, `costmodel.memory_allowances.Fp8WeightStorage`; the weight bytes when
    None), the shard at the rank's mean bytes per parameter; ``non_unit_params`` of the dense
    ones (outside the unit modules) are held whole at the weight bytes under
    `optim_grads_params` (module docstring). ``gathered_layers``: full weights and gradients
    resident at once, in units of the largest layer (`GATHERED_LAYERS`; DeepSpeed's stage-3
    engine, `costmodel.runtimes.megatron.zero3_schedule.gathered_layers`)."""
    weight, grad, state = bytes_per_param
    linear_weight = weight if linear_param_bytes is None else linear_param_bytes
    shard_weight = linear_weight if linear_shard_bytes is None else linear_shard_bytes
    strategy = plan.data_parallel_sharding_strategy
    dense_shards = plan.dp * plan.cp
    expert_shards = max(plan.expert_dp, 1)
    total = dense_params + expert_params
    sharded = dense_params / dense_shards + expert_params / expert_shards
    working = gathered_layers * largest_layer_params(model, plan)
    optimizer = state * (total if strategy == "no_shard" else sharded)
    grads_sharded = strategy in ("optim_grads", "optim_grads_params")
    gradients = grad * (min(sharded + working, total) if grads_sharded else total)
    whole_bytes = weight * (total - linear_params) + linear_weight * linear_params
    if strategy == "optim_grads_params":
        shard_bytes = weight * (total - linear_params) + shard_weight * linear_params
        mean = shard_bytes / total if total else float(weight)
        layers_bytes = gathered_layers * largest_layer_weight_bytes(
            model, plan, weight, linear_weight
        )
        non_unit_bytes = weight * non_unit_params * (1.0 - 1.0 / dense_shards)
        weights = min(mean * sharded + layers_bytes + non_unit_bytes, whole_bytes)
    else:
        weights = whole_bytes
    return FsdpStateBytes(
        weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer
    )


def grads_reduce_scattered(plan: ParallelPlan) -> bool:
    """True when gradients leave the backward by reduce-scatter rather than all-reduce: the
    distributed optimizer, or Megatron-FSDP sharding gradients (`optim_grads`,
    `optim_grads_params`)."""
    sharded = plan.data_parallel_sharding_strategy in ("optim_grads", "optim_grads_params")
    return plan.distributed_optimizer or (plan.use_megatron_fsdp and sharded)


def grads_reduced_every_backward(plan: ParallelPlan) -> bool:
    """True when gradients are reduce-scattered in every backward pass, not once after the
    last microbatch: Megatron-FSDP sharding gradients (`optim_grads`, `optim_grads_params`)
    keeps only the gradient shard, so each backward reduces its layers' gradients as they
    are produced whatever the gradient-accumulation step (``grad_reduce_every_bprop`` in
    ``megatron_fsdp/megatron_fsdp.py``; its ``no_sync`` does not stop them). The
    distributed optimizer and the other strategies reduce once per iteration."""
    sharded = plan.data_parallel_sharding_strategy in ("optim_grads", "optim_grads_params")
    return plan.use_megatron_fsdp and sharded


def optimizer_sharded(plan: ParallelPlan) -> bool:
    """True when the optimizer step runs on a dp·cp shard of the parameters."""
    strategy_shards = plan.data_parallel_sharding_strategy != "no_shard"
    return plan.distributed_optimizer or (plan.use_megatron_fsdp and strategy_shards)


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkGather:
    """Megatron-FSDP's parameter gathers of one model chunk of a rank."""

    gather_s: float
    """All-gather of every parameter of the chunk, once."""
    num_layers: int
    """Modules it gathers one at a time: its transformer and MTP layers (at least 1: a
    chunk of only the embedding or the loss gathers one module)."""
    num_passes: float
    """Gathers of the whole chunk in one iteration: one per forward and per backward pass
    under Megatron-FSDP; DeepSpeed's stage-3 engine gathers more per backward
    (`costmodel.runtimes.megatron.zero3_schedule.backward_gather_sweeps`). Each is a
    layer-by-layer sweep that exposes its first layer's gather."""


def fsdp_param_gather_exposed_s(*, chunks: Sequence[ChunkGather], compute_s: float) -> float:
    """Exposed seconds of Megatron-FSDP's per-layer parameter all-gathers on one rank.

    Under `optim_grads_params` each forward and each backward pass of a microbatch gathers
    every layer of its chunk again. Each layer's gather is prefetched while the previous
    layer computes, so a pass exposes only its first layer's gather (the chunk's gather
    over its own layer count: chunks of an uneven split have different counts,
    `specs.pipeline_split`), plus whatever all the gathers take beyond the compute they
    hide behind (``compute_s``, the rank's forward and backward passes).
    """
    total_s = sum(c.num_passes * c.gather_s for c in chunks if c.gather_s > 0)
    if total_s <= 0:
        return 0.0
    first_layers_s = sum(
        c.num_passes * c.gather_s / max(c.num_layers, 1) for c in chunks if c.gather_s > 0
    )
    return first_layers_s + max(total_s - first_layers_s - compute_s, 0.0)
