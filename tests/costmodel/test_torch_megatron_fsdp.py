"""The ``torch`` runtime on Megatron-FSDP plans: it prices what the executor runs
(`specs.data_parallel.fsdp2_reshard_after_forward`): FSDP2 with or without resharding after
forward, DDP for ``no_shard``; gathers counted along the schedule
(`costmodel.runtimes.torch.sync.fsdp_gather_shares`)."""

from __future__ import annotations

import pytest

from costmodel.passes import comm_groups
from costmodel.runtimes.torch.memory import executor_memory_per_stage
from costmodel.runtimes.torch.pricing import executor_chunk_costs
from costmodel.runtimes.torch.sync import fsdp_gather_shares
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from specs.data_parallel import fsdp2_reshard_after_forward
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile

CPU = cpu_profile()
TINY = get_preset("tiny")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")


def fsdp(strategy: str, **degrees: int) -> ParallelPlan:
    return ParallelPlan(
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy=strategy,  # type: ignore[arg-type]
        **degrees,
    )


def chunks(plan: ParallelPlan, job: TrainingJob = JOB):
    placements = plan_placements(CPU, plan, RankPacking(gpus_per_node=4))
    return executor_chunk_costs(TINY, job, plan, CPU, comm_groups(placements), placements)


def test_the_executor_mechanism_per_strategy() -> None:
    assert fsdp2_reshard_after_forward(fsdp("optim_grads_params", dp=2, pp=2)) is True
    assert fsdp2_reshard_after_forward(fsdp("optim_grads", dp=2)) is False
    assert fsdp2_reshard_after_forward(fsdp("optim", dp=2)) is False
    assert fsdp2_reshard_after_forward(fsdp("no_shard", dp=2)) is None
    assert fsdp2_reshard_after_forward(ParallelPlan(dp=2, distributed_optimizer=True)) is True
    assert (
        fsdp2_reshard_after_forward(ParallelPlan(dp=2, pp=2, distributed_optimizer=True)) is False
    )
    assert fsdp2_reshard_after_forward(ParallelPlan(dp=2)) is None


def test_gather_counts_along_one_f_one_b() -> None:
    # pp 2, 4 microbatches. Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3: a pass gathers when the
    # chunk's previous pass was a forward (resharded) or there was none: F0 F1 B0 B1 B2
    # (a forward after a backward finds the weights still gathered, B3 follows B2).
    plan = fsdp("optim_grads_params", pp=2, dp=2)
    assert fsdp_gather_shares(plan, 4, 0, 0) == (2 / 4, 3 / 4)
    # Stage 1 runs F0 B0 F1 B1 F2 B2 F3 B3: F0 and every backward gather.
    assert fsdp_gather_shares(plan, 4, 1, 0) == (1 / 4, 4 / 4)
    # pp 1: gradient accumulation reshards after every backward, so every pass gathers.
    assert fsdp_gather_shares(fsdp("optim_grads_params", dp=2), 4, 0, 0) == (1.0, 1.0)
    # Without resharding after forward: forwards only; without FSDP2: none.
    assert fsdp_gather_shares(fsdp("optim_grads", dp=2, pp=2), 4, 0, 0) == (1.0, 0.0)
    assert fsdp_gather_shares(fsdp("no_shard", dp=2), 4, 0, 0) == (0.0, 0.0)


def test_strategies_price_their_gathers() -> None:
    ddp = chunks(ParallelPlan(dp=2))[0][0]
    params = chunks(fsdp("optim_grads_params", dp=2))[0][0]
    grads = chunks(fsdp("optim_grads", dp=2))[0][0]
    no_shard = chunks(fsdp("no_shard", dp=2))[0][0]
    assert no_shard == ddp
    # optim_grads gathers in the forward only, optim_grads_params in both passes
    assert grads.forward.compute_s == pytest.approx(params.forward.compute_s)
    assert grads.backward.compute_s == pytest.approx(ddp.backward.compute_s)
    assert params.backward.compute_s - ddp.backward.compute_s == pytest.approx(
        params.forward.compute_s - ddp.forward.compute_s
    )
    # the distributed optimizer with pp = 1 runs as optim_grads_params does
    distopt = chunks(ParallelPlan(dp=2, distributed_optimizer=True))[0][0]
    assert distopt == params


def test_memory_of_the_strategies() -> None:
    def stage(plan: ParallelPlan):
        return executor_memory_per_stage(TINY, JOB, plan)[0]

    ddp, no_shard = stage(ParallelPlan(dp=2)), stage(fsdp("no_shard", dp=2))
    assert no_shard == ddp
    params, grads = stage(fsdp("optim_grads_params", dp=2)), stage(fsdp("optim_grads", dp=2))
    for sharded in (params, grads):  # FSDP2 shards weights and optimizer state alike
        assert sharded.weights_bytes == pytest.approx(ddp.weights_bytes / 2)
        assert sharded.optimizer_bytes == pytest.approx(ddp.optimizer_bytes / 2)
    # resharding after forward keeps one module gathered at a time, else all of them
    assert params.comm_buffers_bytes < grads.comm_buffers_bytes
