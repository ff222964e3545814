"""Megatron-LM 2021's local DDP keeps the previous iteration's fp16 gradients through the
forward and backward (`ExecutionOptions.stale_main_grad`): ``allreduce_gradients`` sets
``param.main_grad = param.grad`` and ``zero_grad(set_to_none=True)`` clears ``param.grad``
only, so the old tensor lives until the next ``allreduce_gradients`` after the pipeline
flush (NVIDIA/Megatron-LM de7dc40, ``megatron/model/distributed.py``,
``megatron/optimizer/optimizer.py``). PyTorch DDP rows keep their bucket copy instead."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import MEGATRON_2021
from costmodel.memory_allowances import FrameworkAllowance
from costmodel.model_state import held_gradient_copies, step_peak_bytes
from costmodel.plan_frame import plans_frame
from costmodel.rank_params import stage_params
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.cluster import ClusterSpec
from specs.presets import get_preset

MODEL = get_preset("gpt-18.4b")
PROFILE = load_profile("a100-sxm-80gb")
CLUSTER = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=256)
JOB = TrainingJob(seq_length=2048, global_batch_size=1024, precision="bf16")
LOCAL = ParallelPlan(tp=2, pp=4, dp=32, micro_batch_size=1, recompute="full")
TORCH = ParallelPlan(
    tp=8, pp=1, dp=32, micro_batch_size=8, recompute="full", overlap_grad_reduce=True
)
WITHOUT = dataclasses.replace(MEGATRON_2021, stale_main_grad=False)


def _stage(plan: ParallelPlan, options=MEGATRON_2021, rank: int = 0):
    return estimate_plan(MODEL, CLUSTER, JOB, plan, PROFILE, options=options).memory[rank]


def test_local_ddp_holds_two_fp16_gradients_in_the_backward() -> None:
    params = stage_params(MODEL, LOCAL, 0).total
    assert _stage(LOCAL).gradients_bytes == pytest.approx(2 * 2 * params)
    assert _stage(LOCAL, WITHOUT).gradients_bytes == pytest.approx(2 * params)


@pytest.mark.parametrize("recompute", ["full", "none"])
@pytest.mark.parametrize("rank", [0, 3])
def test_the_held_gradients_add_to_the_backward_peak_only(rank: int, recompute: str) -> None:
    # full recompute: the step is the peak; none: the backward is
    plan = dataclasses.replace(LOCAL, recompute=recompute)
    held, without = _stage(plan, rank=rank), _stage(plan, WITHOUT, rank=rank)
    params = stage_params(MODEL, plan, rank).total
    extra = held.gradients_bytes - without.gradients_bytes
    backward = without.total_bytes - without.optimizer_step_bytes + extra
    # the step sees the model state without them: they are released before it
    fixed = FrameworkAllowance().fixed_bytes
    step = step_peak_bytes(JOB, without.model_state_bytes, params, 2, fixed)
    assert step > 0
    assert held.total_bytes == pytest.approx(max(backward, step), rel=1e-12)


def test_pytorch_ddp_keeps_its_bucket_copy_and_no_held_gradients() -> None:
    assert _stage(TORCH).gradients_bytes == pytest.approx(_stage(TORCH, WITHOUT).gradients_bytes)
    params = stage_params(MODEL, TORCH, 0).total
    assert _stage(TORCH).gradients_bytes == pytest.approx(2 * 2 * params)


@pytest.mark.parametrize(
    ("overlap", "distopt", "ddp_copy", "stale", "expected"),
    [
        (False, False, True, True, (1, 2)),
        (False, False, True, False, (1, 1)),
        # sharded optimizer state in a 2021-era row is DeepSpeed ZeRO: no local DDP
        (False, True, True, True, (1, 1)),
        (True, False, True, True, (2, 2)),
        (True, False, False, True, (1, 1)),
    ],
)
def test_gradient_copies_at_the_step_and_in_the_backward(
    overlap: bool, distopt: bool, ddp_copy: bool, stale: bool, expected: tuple[int, int]
) -> None:
    plan = dataclasses.replace(LOCAL, overlap_grad_reduce=overlap, distributed_optimizer=distopt)
    assert held_gradient_copies(plan, ddp_gradient_copy=ddp_copy, stale_main_grad=stale) == (
        expected
    )


@pytest.mark.parametrize(
    "plan",
    [LOCAL, TORCH, dataclasses.replace(LOCAL, distributed_optimizer=True)],
    ids=["local", "torch", "zero"],
)
def test_screen_agrees_with_the_simulator(plan: ParallelPlan) -> None:
    est = estimate_plan(MODEL, CLUSTER, JOB, plan, PROFILE, options=MEGATRON_2021)
    screened = screen_plans(
        MODEL, CLUSTER, JOB, PROFILE, plans_frame([plan]), options=MEGATRON_2021
    )
    assert float(screened["peak_memory_bytes"].iloc[0]) == pytest.approx(
        est.peak_memory_bytes, rel=0.02
    )
