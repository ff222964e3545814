"""Zero-centred norm weights (``ModelSpec.layernorm_zero_centered_gamma``, Megatron-LM
``--apply-layernorm-1p``) reparametrise the norms' weights as 1 + γ: the same tensors, the
same kernels, so the cost model prices a plan the same with and without them."""

from __future__ import annotations

import dataclasses

from costmodel.estimate import estimate_plan
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
JOB = TrainingJob(seq_length=4096, global_batch_size=64)


def test_zero_centred_weights_change_no_cost() -> None:
    model = get_preset("nemotron-4-15b").replace(num_layers=8)
    assert model.layernorm_zero_centered_gamma
    plain = dataclasses.replace(model, layernorm_zero_centered_gamma=False)
    plans = [
        ParallelPlan.for_world(16, tp=2, pp=2, sequence_parallel=True),
        ParallelPlan.for_world(16, tp=4, recompute="full", distributed_optimizer=True),
    ]
    for plan in plans:
        one = estimate_plan(model, CLUSTER, JOB, plan, H100)
        other = estimate_plan(plain, CLUSTER, JOB, plan, H100)
        assert one.iteration_time_s == other.iteration_time_s
        assert one.peak_memory_bytes == other.peak_memory_bytes
    screened = screen_plans(model, CLUSTER, JOB, H100, plans_frame(plans))
    screened_plain = screen_plans(plain, CLUSTER, JOB, H100, plans_frame(plans))
    columns = ["iteration_time_s", "peak_memory_bytes"]
    assert screened[columns].equals(screened_plain[columns])
