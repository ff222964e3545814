"""LoRA jobs (specs.finetune, specs.rules_lora): the LoraSpec's validation and JSON round
trip, the adapters' shapes and parameter count, and the plan rules of a LoRA job."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from specs import serde
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.finetune import (
    DEFAULT_LORA_TARGETS,
    LORA_TARGETS,
    LoraSpec,
    executor_lora_refusal,
    layer_targets,
    lora_target_features,
    model_targets,
)
from specs.job import TrainingJob
from specs.layer_kinds import HYBRID_SYMBOLS
from specs.params import count_params, lora_layer_params
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan, rule_ids

QKV = LoraSpec(rank=16, targets=("linear_qkv",))


def lora_job(lora: LoraSpec = QKV, **fields: Any) -> TrainingJob:
    return TrainingJob(seq_length=4096, global_batch_size=32, lora=lora, **fields)


def test_defaults_are_megatron_bridges() -> None:
    # src/megatron/bridge/peft/lora.py (v0.5.0): alpha 32, all four linear layers
    lora = LoraSpec(rank=32)
    assert lora.alpha == 32
    assert lora.targets == DEFAULT_LORA_TARGETS
    assert DEFAULT_LORA_TARGETS == ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
    assert (*DEFAULT_LORA_TARGETS, "in_proj", "out_proj") == LORA_TARGETS
    assert TrainingJob(seq_length=8, global_batch_size=1).lora is None


@pytest.mark.parametrize(
    "fields",
    [
        {"rank": 0},
        {"rank": -4},
        {"rank": 8, "alpha": 0},
        {"rank": 8, "targets": ()},
        {"rank": 8, "targets": ("linear_qkv", "linear_qkv")},
        {"rank": 8, "targets": ("linear_q_proj",)},
        {"rank": 8, "targets": "linear_qkv"},
    ],
)
def test_bad_lora_specs_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(SpecError):
        LoraSpec(**fields)


def test_a_job_with_lora_round_trips_through_json() -> None:
    job = lora_job(LoraSpec(rank=8, alpha=16, targets=("linear_fc1", "linear_qkv")))
    assert serde.from_dict(TrainingJob, serde.to_dict(job)) == job
    assert serde.to_dict(job)["lora"] == {
        "rank": 8,
        "alpha": 16,
        "targets": ["linear_fc1", "linear_qkv"],
    }
    # an older job file without the key is a full training job
    assert serde.from_dict(TrainingJob, {"seq_length": 8, "global_batch_size": 1}).lora is None
    with pytest.raises(SpecError):
        serde.from_dict(TrainingJob, {"seq_length": 8, "global_batch_size": 1, "lora": {}})


def test_target_shapes_are_the_base_layers() -> None:
    # llama3-8b: h 4096, 32 heads of 128, 8 KV groups, SwiGLU F 14336
    model = get_preset("llama3-8b")
    assert lora_target_features(model, "linear_qkv") == (4096, 4096 + 2 * 1024, True)
    assert lora_target_features(model, "linear_proj") == (4096, 4096, False)
    assert lora_target_features(model, "linear_fc1") == (4096, 2 * 14336, True)
    assert lora_target_features(model, "linear_fc2") == (14336, 4096, False)
    with pytest.raises(SpecError):
        lora_target_features(model, "router")


def test_adapter_parameters_are_rank_times_in_plus_out() -> None:
    model = get_preset("llama3-8b")
    r = 16
    qkv, proj = r * (4096 + 6144), r * (4096 + 4096)
    fc1, fc2 = r * (4096 + 28672), r * (14336 + 4096)
    assert lora_layer_params(model, LoraSpec(rank=r)) == qkv + proj + fc1 + fc2
    assert lora_layer_params(model, QKV) == qkv
    # the model's own counts are unchanged by a job's adapters
    assert count_params(model).total == count_params(get_preset("llama3-8b")).total


def rules_broken(model_name: str, job: TrainingJob, gpus: int = 8, **plan: Any) -> set[str]:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    violations = check_plan(
        get_preset(model_name), cluster, job, ParallelPlan.for_world(gpus, **plan)
    )
    return {v.rule for v in violations}


def test_lora_rules_are_registered() -> None:
    ids = rule_ids()
    for rule in (
        "lora_rank_divisible_by_tp",
        "lora_not_on_experts",
        "lora_not_on_mla",
        "lora_not_with_megatron_fsdp",
        "lora_needs_adam",
    ):
        assert rule in ids


def test_rank_must_split_over_tp_for_column_parallel_targets() -> None:
    assert rules_broken("llama3-8b", lora_job(LoraSpec(rank=8)), tp=8) == set()
    odd = LoraSpec(rank=6, targets=("linear_qkv",))
    assert "lora_rank_divisible_by_tp" in rules_broken("llama3-8b", lora_job(odd), tp=4)
    # a row-parallel base splits A over its input, not over the rank
    rows = LoraSpec(rank=6, targets=("linear_proj", "linear_fc2"))
    assert rules_broken("llama3-8b", lora_job(rows), tp=4) == set()


def test_lora_is_refused_where_it_is_not_priced() -> None:
    assert "lora_not_on_experts" in rules_broken("tiny-moe", lora_job(LoraSpec(rank=4)))
    mla = get_preset("tiny").replace(
        kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16, v_head_dim=32
    )
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plan = ParallelPlan.for_world(8)
    mla_rules = {v.rule for v in check_plan(mla, cluster, lora_job(LoraSpec(rank=4)), plan)}
    assert "lora_not_on_mla" in mla_rules
    fsdp = rules_broken(
        "llama3-8b",
        lora_job(),
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
    )
    assert "lora_not_with_megatron_fsdp" in fsdp
    muon = rules_broken("llama3-8b", lora_job(optimizer="muon"))
    assert "lora_needs_adam" in muon
    # the same plans without LoRA break none of these
    full = TrainingJob(seq_length=4096, global_batch_size=32)
    assert not {r for r in rules_broken("tiny-moe", full) if r.startswith("lora")}


def test_the_executor_refuses_lora_with_a_rule_id() -> None:
    assert executor_lora_refusal(None) is None
    assert "[lora_not_in_executor]" in (executor_lora_refusal(QKV) or "")


NEMOTRON_H_TARGETS = LoraSpec(rank=16, targets=LORA_TARGETS)
"""Megatron-Bridge's Nemotron-H PEFT target_modules (recipes/nemotronh/h100/nemotronh.py)."""


def test_a_nemotron_h_8b_mamba_layer_adapts_its_in_proj_and_out_proj() -> None:
    model = get_preset("nemotron-h-8b")
    # h 4096, 128 heads of 64 (d_inner 8192), 8 groups, state 128 (preset_hybrid.py)
    in_proj_out = 2 * 8192 + 2 * 8 * 128 + 128
    assert lora_target_features(model, "in_proj") == (4096, in_proj_out, True)
    assert lora_target_features(model, "out_proj") == (8192, 4096, False)
    # in_proj: A h x r, B r x (2·8192 + 2·8·128 + 128); out_proj: A 8192 x r, B r x h
    by_hand = 4096 * 16 + 16 * 18560 + 8192 * 16 + 16 * 4096
    assert by_hand == 559_104
    mamba = HYBRID_SYMBOLS["M"]
    assert layer_targets(NEMOTRON_H_TARGETS, mamba) == ("in_proj", "out_proj")
    assert lora_layer_params(model, NEMOTRON_H_TARGETS, mamba) == by_hand
    assert lora_layer_params(model, LoraSpec(rank=16), mamba) == 0  # default: no Mamba target


def test_each_hybrid_layer_takes_the_targets_it_holds() -> None:
    model = get_preset("nemotron-h-8b")
    attention, mlp = HYBRID_SYMBOLS["*"], HYBRID_SYMBOLS["-"]
    assert layer_targets(NEMOTRON_H_TARGETS, attention) == ("linear_qkv", "linear_proj")
    assert layer_targets(NEMOTRON_H_TARGETS, mlp) == ("linear_fc1", "linear_fc2")
    assert layer_targets(NEMOTRON_H_TARGETS, HYBRID_SYMBOLS["E"]) == ()
    assert layer_targets(None, attention) == ()
    qkv, proj = (lora_target_features(model, t) for t in ("linear_qkv", "linear_proj"))
    assert lora_layer_params(model, NEMOTRON_H_TARGETS, attention) == 16 * (
        sum(qkv[:2]) + sum(proj[:2])
    )
    assert model_targets(model, NEMOTRON_H_TARGETS) == LORA_TARGETS
    llama = get_preset("llama3-8b")
    assert model_targets(llama, NEMOTRON_H_TARGETS) == DEFAULT_LORA_TARGETS
    with pytest.raises(SpecError, match="'in_proj' is not a linear layer of 'llama3-8b'"):
        lora_target_features(llama, "in_proj")


def test_lora_on_a_dense_hybrid_model_passes_the_rules_and_a_moe_hybrid_is_refused() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=4096, global_batch_size=128, lora=NEMOTRON_H_TARGETS)
    plan = ParallelPlan.for_world(8, tp=2, distributed_optimizer=True)
    assert check_plan(get_preset("nemotron-h-8b"), cluster, job, plan) == []
    moe = get_preset("nemotron-3-nano")
    violations = check_plan(moe, cluster, job, plan)
    assert "lora_not_on_experts" in {v.rule for v in violations}
    odd = dataclasses.replace(job, lora=LoraSpec(rank=3, targets=("in_proj",)))
    messages = [str(v) for v in check_plan(get_preset("nemotron-h-8b"), cluster, odd, plan)]
    assert any("in_proj: rank (3)" in m for m in messages)
    odd_row = dataclasses.replace(job, lora=LoraSpec(rank=3, targets=("out_proj",)))
    assert check_plan(get_preset("nemotron-h-8b"), cluster, odd_row, plan) == []
