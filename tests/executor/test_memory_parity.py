"""The executor's measured peak memory against the cost model's (`costmodel.runtimes.torch.memory`),
measured at test time on the tiny models: one rank with a step of one microbatch, whose
gradients never meet its activations, and of several, whose later microbatches run with the
gradients held; two ranks of an interleaved pipeline, which holds every send until the step
ends; and micro-batch 2, full recompute, MoE, two DDP replicas and two pipeline stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.runtimes.torch.memory import executor_memory_per_stage
from executor.run import RunConfig, execute
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

pytestmark = pytest.mark.slow

TOLERANCE = 0.03
"""Tensor bytes are deterministic on CPU; 3% leaves room for small temporaries."""


@pytest.mark.parametrize(("global_batch", "micro_batch"), [(4, 4), (4, 1)])
def test_peak_memory_matches_the_model(tmp_path: Path, global_batch: int, micro_batch: int):
    plan = ParallelPlan(micro_batch_size=micro_batch)
    job = TrainingJob(seq_length=128, global_batch_size=global_batch, precision="fp32")
    model = get_preset("tiny")
    bundle = PlanBundle(
        model=model, cluster=ClusterSpec(hardware="cpu", num_gpus=1), job=job, plan=plan
    )
    execute(RunConfig(bundle=bundle, out_dir=str(tmp_path), steps=2, warmup=1, profile_steps=1))
    measured = max(json.loads((tmp_path / "metrics.json").read_text())["peak_memory_gib"])
    (stage,) = executor_memory_per_stage(model, job, plan)
    if global_batch == micro_batch:
        assert stage.gradients_bytes == 0 < stage.activations_bytes  # the backward makes them
    else:
        assert stage.gradients_bytes == stage.weights_bytes
    assert stage.total_bytes / 2**30 == pytest.approx(measured, rel=TOLERANCE)


def test_interleaved_pipeline_peak_matches_the_model(tmp_path: Path):
    plan = ParallelPlan(pp=2, vpp=2, schedule="interleaved")
    job = TrainingJob(seq_length=128, global_batch_size=16, precision="fp32")
    model = get_preset("tiny")
    bundle = PlanBundle(
        model=model, cluster=ClusterSpec(hardware="cpu", num_gpus=2), job=job, plan=plan
    )
    execute(RunConfig(bundle=bundle, out_dir=str(tmp_path), steps=2, warmup=1, profile_steps=1))
    measured = json.loads((tmp_path / "metrics.json").read_text())["peak_memory_gib"]
    stages = executor_memory_per_stage(model, job, plan)
    for stage, gib in zip(stages, measured, strict=True):  # rank r runs stage r (pp only)
        assert stage.total_bytes / 2**30 == pytest.approx(gib, rel=TOLERANCE)
        assert stage.comm_buffers_bytes > 16 * 128 * model.hidden_size * 4  # 16+ held sends


RUN_CASES = {
    "mbs2": ("tiny", ParallelPlan(micro_batch_size=2), 1),
    "full recompute": ("tiny", ParallelPlan(recompute="full"), 1),
    "moe": ("tiny-moe", ParallelPlan(), 1),
    "ddp2": ("tiny", ParallelPlan(dp=2), 2),
    "pp2": ("tiny", ParallelPlan(pp=2), 2),
}
"""Plans whose measured peak the cost model's executor memory must follow, measured now."""


@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_peak_memory_of_each_stage_follows_the_executor(tmp_path: Path, case: str):
    # every rank's measured peak against its stage's (rank r is stage r under pp, the dp
    # replicas share stage 0); 5%: full recompute's re-run forward keeps a few temporaries
    # the model does not count
    name, plan, world = RUN_CASES[case]
    model = get_preset(name)
    job = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
    bundle = PlanBundle(
        model=model, cluster=ClusterSpec(hardware="cpu", num_gpus=world), job=job, plan=plan
    )
    execute(RunConfig(bundle=bundle, out_dir=str(tmp_path), steps=2, warmup=1, profile_steps=1))
    measured = json.loads((tmp_path / "metrics.json").read_text())["peak_memory_gib"]
    stages = executor_memory_per_stage(model, job, plan)
    assert len(measured) == world
    for rank, gib in enumerate(measured):
        stage = stages[rank if plan.pp > 1 else 0]
        assert stage.total_bytes / 2**30 == pytest.approx(gib, rel=0.05), (case, rank)
