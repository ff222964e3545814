"""The executor model's memory per stage (`costmodel.runtimes.torch.memory`): the parts of
one rank, and how recompute, sharding and pipelining change them."""

from __future__ import annotations

import pytest

from costmodel.runtimes.torch.memory import executor_memory_per_stage
from costmodel.runtimes.torch.ops import FP32
from costmodel.runtimes.torch.sync import stage_layout
from specs.plan import ParallelPlan
from tests.costmodel.torch_fixture import JOB, TINY


def test_memory_parts_of_one_rank():
    (stage,) = executor_memory_per_stage(TINY, JOB, ParallelPlan())
    params = stage_layout(TINY, ParallelPlan(), 0).dense
    assert stage.weights_bytes == stage.gradients_bytes == params * FP32
    assert stage.optimizer_bytes == 2 * params * FP32
    assert stage.framework_bytes == 0 and stage.comm_buffers_bytes == 0
    assert stage.in_flight_microbatches == 1


def test_memory_responds_to_recompute_sharding_and_pipelining():
    def total(**plan):
        return max(
            s.total_bytes for s in executor_memory_per_stage(TINY, JOB, ParallelPlan(**plan))
        )

    def acts(**plan):
        return executor_memory_per_stage(TINY, JOB, ParallelPlan(**plan))[0].activations_bytes

    assert acts(recompute="full") < acts(recompute="selective") < acts()
    ddp = executor_memory_per_stage(TINY, JOB, ParallelPlan(dp=2))[0]
    assert ddp.comm_buffers_bytes == ddp.gradients_bytes  # DDP's bucket buffers
    fsdp = executor_memory_per_stage(TINY, JOB, ParallelPlan(dp=2, distributed_optimizer=True))[0]
    assert fsdp.weights_bytes == pytest.approx(ddp.weights_bytes / 2)
    assert fsdp.optimizer_bytes == pytest.approx(ddp.optimizer_bytes / 2)
    first, last = executor_memory_per_stage(TINY, JOB, ParallelPlan(pp=2))
    assert first.in_flight_microbatches == 2 and last.in_flight_microbatches == 1
    assert total(micro_batch_size=2) > total()
