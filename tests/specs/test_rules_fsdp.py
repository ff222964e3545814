"""Megatron-FSDP fields of ParallelPlan: rules, serde."""

from __future__ import annotations

import pytest

from specs import serde
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan, rule_ids

MODEL = get_preset("llama3-8b")
CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
JOB = TrainingJob(seq_length=8192, global_batch_size=128)


def _failed(plan: ParallelPlan) -> set[str]:
    return {v.rule for v in check_plan(MODEL, CLUSTER, JOB, plan)}


def test_fsdp_rules_are_registered() -> None:
    ids = rule_ids()
    assert "sharding_strategy_needs_megatron_fsdp" in ids
    assert "megatron_fsdp_excludes_distributed_optimizer" in ids


def test_fsdp_plan_is_valid() -> None:
    plan = ParallelPlan(
        dp=8, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params"
    )
    assert _failed(plan) == set()


def test_strategy_without_fsdp_is_rejected() -> None:
    plan = ParallelPlan(dp=8, data_parallel_sharding_strategy="optim")
    assert "sharding_strategy_needs_megatron_fsdp" in _failed(plan)


def test_fsdp_with_distributed_optimizer_is_rejected() -> None:
    plan = ParallelPlan(dp=8, use_megatron_fsdp=True, distributed_optimizer=True)
    assert "megatron_fsdp_excludes_distributed_optimizer" in _failed(plan)


def test_overlap_param_gather_accepts_fsdp() -> None:
    plan = ParallelPlan(
        dp=8, use_megatron_fsdp=True, overlap_grad_reduce=True, overlap_param_gather=True
    )
    assert "overlap_param_gather_needs_distributed_optimizer" not in _failed(plan)


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(SpecError, match="data_parallel_sharding_strategy"):
        ParallelPlan(data_parallel_sharding_strategy="full")  # type: ignore[arg-type]


def test_fsdp_fields_round_trip() -> None:
    plan = ParallelPlan(dp=8, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads")
    assert serde.from_dict(ParallelPlan, serde.to_dict(plan)) == plan
