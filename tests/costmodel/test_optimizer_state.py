"""Adam's state under Megatron-LM's precision-aware optimizer (`costmodel.optimizer_state`):
bytes per parameter per combination, the rules Megatron-core enforces, the memory and the
optimizer step that read them, and the screen agreeing with the simulator."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute import memory_bound_time_s
from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import optimizer_precision
from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS
from costmodel.memory import memory_per_stage
from costmodel.optimizer_passes import optimizer_step_time_s
from costmodel.optimizer_state import (
    PRECISION_AWARE_RULE,
    OptimizerPrecision,
    adam_state_bytes,
    adam_step_state_bytes,
    precision_aware_unmet,
)
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs import ClusterSpec, ParallelPlan, TrainingJob
from specs.errors import SpecError
from specs.presets import get_preset

BF16_MOMENTS = OptimizerPrecision(
    precision_aware=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"
)
PAO_OPTIONS = dataclasses.replace(
    DEFAULT_OPTIONS, precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"
)
PROFILE = load_profile("h100-sxm-80gb")
MODEL = get_preset("llama3-8b")
CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
DISTOPT = ParallelPlan.for_world(8, tp=2, distributed_optimizer=True, overlap_grad_reduce=True)


def pao(**dtypes: str) -> OptimizerPrecision:
    return OptimizerPrecision(precision_aware=True, **dtypes)


# (run precision, optimizer, FP8 recipe, FP8 parameters, Megatron-FSDP) -> (master, total)
# bytes per parameter. Sources: Megatron-core OptimizerConfig.__post_init__
# (use_precision_aware_optimizer_no_fp8_or_ds_fp8), distrib_optimizer.py (fp32 main params
# unless FusedAdam holds them), TE FusedAdam store_param_remainders (int16 remainders of bf16
# params); docs/cost-model.md "Optimizer state" gives the table.
@pytest.mark.parametrize(
    ("precision", "optimizer", "recipe", "fp8_param", "fsdp", "master", "total"),
    [
        ("bf16", OptimizerPrecision(), "delayed", False, False, 4, 12),  # 4 + 4 + 4
        ("fp32", OptimizerPrecision(), "delayed", False, False, 0, 8),  # weight stepped in place
        ("bf16", BF16_MOMENTS, "delayed", False, False, 2, 6),  # remainders + 2 + 2
        ("bf16", pao(), "delayed", False, False, 2, 10),  # remainders, fp32 moments
        ("bf16", pao(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8"), "delayed", False, False, 2, 4),
        ("bf16", pao(exp_avg_dtype="fp16", exp_avg_sq_dtype="bf16"), "delayed", False, False, 2, 6),
        (
            "bf16",
            pao(main_params_dtype="fp16", exp_avg_dtype="bf16"),
            "delayed",
            False,
            False,
            2,
            8,
        ),
        ("fp8", BF16_MOMENTS, "mxfp8", True, False, 4, 8),  # the model zoo's MXFP8 runs
        ("fp8", BF16_MOMENTS, "tensorwise", False, False, 4, 8),  # Megatron keeps fp32 main
        ("fp8", BF16_MOMENTS, "delayed", False, False, 2, 6),  # FusedAdam, bf16 params
        ("fp8", BF16_MOMENTS, "delayed", True, False, 4, 8),  # FP8 params: no remainders
        ("fp32", BF16_MOMENTS, "delayed", False, False, 4, 8),  # FusedAdam's fp32 master
        ("bf16", BF16_MOMENTS, "delayed", False, True, 4, 8),  # Megatron-FSDP's fp32 buffer
    ],
)
def test_bytes_per_parameter_of_each_combination(
    precision, optimizer, recipe, fp8_param, fsdp, master, total
) -> None:
    state = adam_state_bytes(
        precision, optimizer, fp8_recipe=recipe, fp8_param=fp8_param, megatron_fsdp=fsdp
    )
    assert (state.master_bytes, state.total_bytes) == (master, total)


def test_fusedadam_holds_the_master_weights_only_where_megatron_hands_them_over() -> None:
    assert adam_state_bytes("bf16", BF16_MOMENTS).te_master
    assert adam_state_bytes("fp8", BF16_MOMENTS, fp8_recipe="delayed").te_master
    assert not adam_state_bytes("fp8", BF16_MOMENTS, fp8_recipe="mxfp8").te_master
    fp16_master = pao(main_params_dtype="fp16")
    assert adam_state_bytes("fp8", fp16_master, fp8_recipe="mxfp8").te_master
    assert not adam_state_bytes("bf16").te_master


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"exp_avg_dtype": "bf16"}, "exp_avg_dtype bf16 needs the precision-aware optimizer"),
        ({"main_params_dtype": "fp16"}, "main_params_dtype fp16 needs"),
        ({"precision_aware": True, "exp_avg_sq_dtype": "int8"}, "must be one of fp32, fp16"),
        ({"precision_aware": True, "main_params_dtype": "bf16"}, "must be one of fp32, fp16"),
    ],
)
def test_megatron_cores_dtype_rules(fields, match) -> None:
    with pytest.raises(SpecError, match=match):
        OptimizerPrecision(**fields)


def test_execution_options_check_the_dtypes_and_the_runtime() -> None:
    with pytest.raises(SpecError, match="needs the precision-aware optimizer"):
        ExecutionOptions(exp_avg_dtype="bf16")
    with pytest.raises(SpecError, match="the torch runtime steps fp32 AdamW"):
        dataclasses.replace(TORCH_OPTIONS, precision_aware_optimizer=True)
    assert optimizer_precision(PAO_OPTIONS) == BF16_MOMENTS


def test_the_distributed_optimizer_or_megatron_fsdp_is_required() -> None:
    unmet = precision_aware_unmet(BF16_MOMENTS, distributed_optimizer=False, megatron_fsdp=False)
    assert unmet is not None and "add --dist-opt" in unmet
    assert (
        precision_aware_unmet(BF16_MOMENTS, distributed_optimizer=True, megatron_fsdp=False) is None
    )
    assert (
        precision_aware_unmet(BF16_MOMENTS, distributed_optimizer=False, megatron_fsdp=True) is None
    )
    fp16 = pao(main_params_dtype="fp16")
    unmet = precision_aware_unmet(fp16, distributed_optimizer=False, megatron_fsdp=True)
    assert unmet is not None and "--megatron-fsdp-main-params-dtype" in unmet
    plain = ParallelPlan.for_world(8, tp=2)
    with pytest.raises(SpecError, match=PRECISION_AWARE_RULE):
        memory_per_stage(MODEL, JOB, plain, optimizer=BF16_MOMENTS)


def test_memory_keeps_half_the_optimizer_state_with_bf16_moments() -> None:
    default = estimate_plan(MODEL, CLUSTER, JOB, DISTOPT, PROFILE).memory[0]
    aware = estimate_plan(MODEL, CLUSTER, JOB, DISTOPT, PROFILE, options=PAO_OPTIONS).memory[0]
    assert aware.optimizer_bytes == pytest.approx(default.optimizer_bytes * 6 / 12, rel=1e-12)
    assert aware.weights_bytes == default.weights_bytes
    assert aware.gradients_bytes == default.gradients_bytes


@pytest.mark.parametrize(
    "plan",
    [
        DISTOPT,
        ParallelPlan.for_world(
            8,
            tp=2,
            use_megatron_fsdp=True,
            data_parallel_sharding_strategy="optim_grads_params",
            overlap_grad_reduce=True,
            overlap_param_gather=True,
        ),
    ],
)
def test_screen_agrees_with_the_simulator(plan: ParallelPlan) -> None:
    est = estimate_plan(MODEL, CLUSTER, JOB, plan, PROFILE, options=PAO_OPTIONS)
    screened = screen_plans(MODEL, CLUSTER, JOB, PROFILE, plans_frame([plan]), options=PAO_OPTIONS)
    assert float(screened["peak_memory_bytes"].iloc[0]) == pytest.approx(
        est.peak_memory_bytes, rel=0.02
    )


def test_the_screen_refuses_plans_without_a_sharded_optimizer() -> None:
    plain = ParallelPlan.for_world(8, tp=2)
    screened = screen_plans(
        MODEL, CLUSTER, JOB, PROFILE, plans_frame([plain, DISTOPT]), options=PAO_OPTIONS
    )
    assert list(screened["fits"]) == [False, True]
    assert screened["iteration_time_s"].iloc[0] == float("inf")


# Bytes per parameter of the optimizer shard that one step moves: gradient read, weights and
# moments (`adam_step_state_bytes`), the gradient norm's read; four passes, plus two per
# state that FusedAdam unscales into an fp32 copy and scales back.
@pytest.mark.parametrize(
    ("optimizer", "main_grad_bytes", "per_param", "passes"),
    [
        (OptimizerPrecision(), 4, 4 + 16 + 10 + 4, 4),  # Megatron-core's fp32 Adam
        (BF16_MOMENTS, 4, 4 + 8 + 8 + 4, 4),  # fused bf16 moments, bf16 weight + remainder
        (BF16_MOMENTS, 2, 2 + 8 + 8 + 2, 4),  # bf16 gradients read as they are, no copy
        (pao(exp_avg_dtype="fp16", exp_avg_sq_dtype="fp16"), 4, 4 + 2 * 40 + 8 + 4, 8),
        (pao(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp32"), 4, 4 + 22 + 8 + 8 + 4, 6),
    ],
)
def test_optimizer_step_bytes(optimizer, main_grad_bytes, per_param, passes) -> None:
    state = adam_state_bytes("bf16", optimizer)
    got = optimizer_step_time_s(
        PROFILE,
        shard_params=1e9,
        local_params=0,
        mixed_precision=True,
        num_tensors=1,
        main_grad_bytes=main_grad_bytes,
        state=state,
    )
    assert got == pytest.approx(memory_bound_time_s(PROFILE, per_param * 1e9, num_ops=passes))


def test_the_default_state_prices_the_step_as_before() -> None:
    for precision, mixed in (("bf16", True), ("fp32", False)):
        kwargs = {"shard_params": 3e8, "local_params": 1e9, "mixed_precision": mixed}
        plain = optimizer_step_time_s(PROFILE, num_tensors=40, **kwargs)
        state = adam_state_bytes(precision)
        assert optimizer_step_time_s(PROFILE, num_tensors=40, state=state, **kwargs) == plain
    assert adam_step_state_bytes(adam_state_bytes("bf16"), mixed_precision=True) == (26, 0)
