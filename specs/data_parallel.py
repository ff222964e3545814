"""How paraplan's executor shards data-parallel state: one function that the executor
(`executor.engine`) and the ``torch`` runtime of the cost model
(`costmodel.runtimes.torch`) both read, so that what is priced is what runs.

The executor runs every sharded data-parallel plan with FSDP2 ``fully_shard`` per
transformer block and per chunk; what differs between the plan's choices is whether the
gathered weights are freed after each forward (``reshard_after_forward``):

- ``distributed_optimizer``: FSDP2, resharding after forward with pp = 1 only;
- Megatron-FSDP ``optim_grads_params``: FSDP2, resharding after forward (ZeRO-3: weights
  gathered per layer in every forward and again in every backward);
- Megatron-FSDP ``optim`` and ``optim_grads``: FSDP2 without resharding after forward
  (weights stay gathered from forward to backward);
- Megatron-FSDP ``no_shard``, or neither: no FSDP2 (DDP with tp = 1, the bucketed
  all-reduce of `executor.data_parallel` with tp > 1).

FSDP2 always shards the weights it holds between steps, so under ``optim`` and
``optim_grads`` the executor shards more than Megatron-FSDP does; the gradient and
optimizer shards are the same (Rajbhandari et al. 2020, ZeRO §5: P_os, P_os+g, P_os+g+p).
"""

from __future__ import annotations

from specs.plan import ParallelPlan


def fsdp2_reshard_after_forward(plan: ParallelPlan) -> bool | None:
    """FSDP2's ``reshard_after_forward`` for ``plan`` (module list), or None when the
    executor does not use FSDP2 (DDP or the bucketed all-reduce). Independent of the world
    size: on one rank the executor wraps nothing whatever this returns."""
    if plan.use_megatron_fsdp:
        strategy = plan.data_parallel_sharding_strategy
        if strategy == "no_shard":
            return None
        return strategy == "optim_grads_params"
    if plan.distributed_optimizer:
        return plan.pp == 1
    return None
