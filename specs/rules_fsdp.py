"""Rules on the Megatron-FSDP fields of a plan, as Megatron-LM's `validate_args` checks
them (megatron/training/arguments.py, `if args.use_megatron_fsdp:` block)."""

from __future__ import annotations

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import rule


@rule
def sharding_strategy_needs_megatron_fsdp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """data_parallel_sharding_strategy other than no_shard needs use_megatron_fsdp: the
    strategy is read only by Megatron-FSDP (`--data-parallel-sharding-strategy`)."""
    strategy = plan.data_parallel_sharding_strategy
    if strategy == "no_shard" or plan.use_megatron_fsdp:
        return None
    return (
        f"data_parallel_sharding_strategy ({strategy}) is a Megatron-FSDP setting, got "
        "use_megatron_fsdp (False): set use_megatron_fsdp=True or "
        "data_parallel_sharding_strategy='no_shard' (use distributed_optimizer=True to shard "
        "only the optimizer without FSDP)"
    )


@rule
def megatron_fsdp_excludes_distributed_optimizer(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """use_megatron_fsdp and distributed_optimizer are exclusive: Megatron-FSDP version 2
    refuses `--use-distributed-optimizer` and version 1 replaces it by its own sharding
    (arguments.py); what is sharded is data_parallel_sharding_strategy's choice."""
    if not (plan.use_megatron_fsdp and plan.distributed_optimizer):
        return None
    return (
        "use_megatron_fsdp (True) shards by data_parallel_sharding_strategy "
        f"({plan.data_parallel_sharding_strategy}) and excludes distributed_optimizer (True): "
        "set distributed_optimizer=False (optimizer sharding is the 'optim' strategy)"
    )


FSDP_RULES = (sharding_strategy_needs_megatron_fsdp, megatron_fsdp_excludes_distributed_optimizer)
"""The Megatron-FSDP rules in check order."""
