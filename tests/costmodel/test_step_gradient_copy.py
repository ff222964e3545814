"""The optimizer step's fp32 gradient copy of Megatron-LM 2021 (`ExecutionOptions.
step_gradient_copy`, `costmodel.model_state.step_peak_bytes`): ``main_param.grad =
model_param.grad.float()`` copies every fp16 gradient to fp32 after the backward has freed
the activations, a second peak of the rank that the stages with much model state and few
activations reach (the last stage of the 175B GPT of SC21 Table 2 at tp 4, pp 12, full
recompute: one microbatch in flight, the output layer's own copy of the embedding)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute import FP32_BYTES
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import MEGATRON_2021
from costmodel.memory_allowances import FrameworkAllowance
from costmodel.model_state import step_peak_bytes
from costmodel.plan_frame import plans_frame
from costmodel.rank_params import stage_params
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.cluster import ClusterSpec
from specs.presets import get_preset

# GPT-3 175B (96 layers, hidden 12288, 96 heads): the 145.6B SC21 preset with 96 layers.
MODEL = dataclasses.replace(get_preset("gpt-145.6b"), num_layers=96)
PROFILE = load_profile("a100-sxm-80gb")
CLUSTER = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=384)
JOB = TrainingJob(seq_length=2048, global_batch_size=1536, precision="bf16")
TP4 = ParallelPlan(
    tp=4,
    pp=12,
    vpp=2,
    dp=8,
    micro_batch_size=1,
    recompute="full",
    schedule="interleaved",
    overlap_grad_reduce=False,
)


def test_step_peak_is_model_state_the_fp32_copy_and_the_fixed_bytes() -> None:
    est = estimate_plan(MODEL, CLUSTER, JOB, TP4, PROFILE, options=MEGATRON_2021)
    stage = est.memory[-1]
    assert stage.optimizer_step_bytes > 0
    params = stage_params(MODEL, TP4, TP4.pp - 1).total  # no distributed optimizer in 2021
    # the step sees one fp16 gradient: local DDP's previous ones are released by then
    # (`ExecutionOptions.stale_main_grad`)
    held = stage.model_state_bytes - 2 * params
    expected = held + FP32_BYTES * params + FrameworkAllowance().fixed_bytes
    assert stage.total_bytes == pytest.approx(expected, rel=1e-12)
    without = dataclasses.replace(MEGATRON_2021, step_gradient_copy=False)
    before = estimate_plan(MODEL, CLUSTER, JOB, TP4, PROFILE, options=without).memory[-1]
    assert before.optimizer_step_bytes == 0.0
    assert stage.total_bytes - before.total_bytes == pytest.approx(stage.optimizer_step_bytes)


def test_backward_peak_stands_where_activations_outweigh_the_copy() -> None:
    # SC21 Figure 17's run without recompute at batch 8: 8 microbatches in flight.
    plan = ParallelPlan(
        tp=8, pp=16, dp=1, micro_batch_size=1, recompute="none", overlap_grad_reduce=False
    )
    job = TrainingJob(seq_length=2048, global_batch_size=8, precision="bf16")
    model = get_preset("gpt-145.6b")
    cluster = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=128)
    est = estimate_plan(model, cluster, job, plan, PROFILE, options=MEGATRON_2021)
    assert est.memory[0].optimizer_step_bytes == 0.0


def test_screen_agrees_with_the_simulator_on_the_step_peak() -> None:
    est = estimate_plan(MODEL, CLUSTER, JOB, TP4, PROFILE, options=MEGATRON_2021)
    screened = screen_plans(MODEL, CLUSTER, JOB, PROFILE, plans_frame([TP4]), options=MEGATRON_2021)
    assert float(screened["peak_memory_bytes"].iloc[0]) == pytest.approx(
        est.peak_memory_bytes, rel=0.02
    )


@pytest.mark.parametrize(
    ("precision", "main_grad_bytes", "expected"),
    [("bf16", 2, 10.0 + FP32_BYTES * 3.0 + 1.0), ("bf16", 4, 0.0), ("fp32", 4, 0.0)],
)
def test_only_16_bit_gradients_are_copied(
    precision: str, main_grad_bytes: int, expected: float
) -> None:
    job = TrainingJob(seq_length=2048, global_batch_size=8, precision=precision)
    assert step_peak_bytes(job, 10.0, 3.0, main_grad_bytes, 1.0) == expected
