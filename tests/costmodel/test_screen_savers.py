"""The screen prices per-module recompute and CPU activation offloading as the event
simulator does (`costmodel.screen.screen_plans` against `costmodel.estimate.estimate_plan`),
and plan frames carry the module tuples losslessly (`costmodel.plan_frame`)."""

from __future__ import annotations

import pytest

from costmodel.estimate import estimate_plan
from costmodel.plan_frame import plans_frame, row_plan
from costmodel.screen import screen_plans
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = "h100-sxm-80gb"
MOE = {"tp": 1, "pp": 2, "ep": 8, "dp": 16, "micro_batch_size": 2, "distributed_optimizer": True}
PLANS = [
    ParallelPlan(**MOE, recompute="selective"),
    ParallelPlan(**MOE, recompute="selective", recompute_modules=("layernorm", "moe_act")),
    ParallelPlan(**MOE, recompute="selective", recompute_modules=("moe",)),
    ParallelPlan(**MOE, recompute="selective", recompute_modules=()),
    ParallelPlan(tp=1, pp=1, ep=8, dp=32, distributed_optimizer=True, cpu_offloading_num_layers=16),
    ParallelPlan(tp=1, pp=1, ep=8, dp=32, offload_modules=("expert_fc1", "moe_act")),
]


def test_plan_frames_keep_the_module_tuples() -> None:
    frame = plans_frame(PLANS)
    assert [row_plan(row) for row in frame.to_dict("records")] == PLANS


def test_screen_prices_the_savers_as_the_simulator() -> None:
    model, profile = get_preset("mixtral-8x7b"), load_profile(H100)
    cluster = ClusterSpec(hardware=H100, num_gpus=32)
    job = TrainingJob(seq_length=4096, global_batch_size=256)
    screened = screen_plans(model, cluster, job, profile, plans_frame(PLANS))
    peaks, times = [], []
    for plan, (_, row) in zip(PLANS, screened.iterrows(), strict=True):
        est = estimate_plan(model, cluster, job, plan, profile)
        assert row["peak_memory_bytes"] == pytest.approx(est.peak_memory_bytes, rel=0.02)
        assert row["iteration_time_s"] == pytest.approx(est.iteration_time_s, rel=0.02)
        peaks.append(row["peak_memory_bytes"])
        times.append(row["iteration_time_s"])
    # the sets are priced apart: each frees memory and reruns work of its own
    assert len(set(peaks[:4])) == 4 and len(set(times[:4])) == 4


def test_screening_the_sets_together_prices_each_as_alone() -> None:
    # The screen prices a layer's passes once for every recompute set of the same shape
    # and adds each set's rerun: the same figures as screening each plan on its own.
    model, profile = get_preset("mixtral-8x7b"), load_profile(H100)
    cluster = ClusterSpec(hardware=H100, num_gpus=32)
    job = TrainingJob(seq_length=4096, global_batch_size=256)
    together = screen_plans(model, cluster, job, profile, plans_frame(PLANS))
    columns = ["iteration_time_s", "peak_memory_bytes", "tokens_per_s"]
    for position, plan in enumerate(PLANS):
        alone = screen_plans(model, cluster, job, profile, plans_frame([plan]))
        assert alone[columns].iloc[0].tolist() == together[columns].iloc[position].tolist()
