"""Per-module recompute and CPU activation offloading in `ParallelPlan`: field checks, the
label, the JSON round trip, the rules of `specs.rules_savers` on real model shapes and the
executor's refusal."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import OffloadModule, ParallelPlan, RecomputeModule
from specs.presets import get_preset
from specs.rules import check_plan
from specs.rules_savers import executor_saver_refusal
from specs.serde import from_dict, to_dict

RECOMPUTE = get_args(RecomputeModule)
OFFLOAD = get_args(OffloadModule)


def _failed(model_name: str, plan: ParallelPlan, gpus: int = 8) -> set[str]:
    model = get_preset(model_name)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    return {v.rule for v in check_plan(model, cluster, job, plan)}


def test_default_selective_recompute_is_the_attention_core() -> None:
    assert ParallelPlan(recompute="selective").selective_modules == ("core_attn",)
    assert ParallelPlan(recompute="selective", recompute_modules=()).selective_modules == ()
    assert ParallelPlan(recompute="none").selective_modules == ()


@pytest.mark.parametrize(
    "changes",
    [
        {"recompute_modules": ("mlp", "mlp")},
        {"recompute_modules": ("attention",)},
        {"offload_modules": ("core_attn", "mlp")},
        {"cpu_offloading_num_layers": -1},
    ],
)
def test_field_checks_name_the_field_and_value(changes: dict[str, object]) -> None:
    with pytest.raises(SpecError, match="ParallelPlan"):
        ParallelPlan(**changes)


@given(
    st.lists(st.sampled_from(RECOMPUTE), unique=True),
    st.lists(st.sampled_from(OFFLOAD), unique=True),
)
def test_json_round_trip_and_label(recompute: list[str], offload: list[str]) -> None:
    plan = ParallelPlan(
        recompute="selective",
        recompute_modules=tuple(recompute),
        offload_modules=tuple(offload),
    )
    back = from_dict(ParallelPlan, json.loads(json.dumps(to_dict(plan))))
    assert back == plan
    label = plan.label()
    assert ("rc=" + ("+".join(recompute) or "-")) in label
    assert ("offload=" in label) == bool(offload)


def test_layer_offloading_label_and_rules() -> None:
    plan = ParallelPlan(dp=8, cpu_offloading_num_layers=16)
    assert "offload16" in plan.label()
    assert _failed("llama3-8b", plan) == set()
    pipelined = ParallelPlan(pp=2, dp=4, cpu_offloading_num_layers=16)
    assert "cpu_offloading_without_pipeline_or_recompute" in _failed("llama3-8b", pipelined)
    assert "cpu_offloading_layers_below_num_layers" in _failed(
        "llama3-8b", plan.replace(cpu_offloading_num_layers=32)
    )
    both = plan.replace(offload_modules=("core_attn",))
    assert "offload_modules_valid" in _failed("llama3-8b", both)


def test_module_rules_follow_the_model() -> None:
    mla = ParallelPlan(dp=8, recompute="selective", recompute_modules=("mla_up_proj",))
    assert "recompute_modules_match_model" in _failed("llama3-8b", mla)
    moe = ParallelPlan(ep=8, dp=8, recompute="selective", recompute_modules=("moe_act",))
    assert "recompute_modules_match_model" not in _failed("mixtral-8x7b", moe)
    assert "recompute_modules_match_model" in _failed("llama3-8b", moe.replace(ep=1))
    experts = ParallelPlan(dp=8, offload_modules=("expert_fc1",))
    assert "offload_modules_valid" in _failed("llama3-8b", experts)


def test_executor_refuses_savers_it_does_not_run() -> None:
    assert executor_saver_refusal(ParallelPlan(recompute="selective")) is None
    core = ParallelPlan(recompute="selective", recompute_modules=("core_attn",))
    assert executor_saver_refusal(core) is None
    message = executor_saver_refusal(core.replace(recompute_modules=("mlp",)))
    assert message is not None and "recompute_modules (mlp)" in message
    offload = executor_saver_refusal(ParallelPlan(cpu_offloading_num_layers=4))
    assert offload is not None and "cpu_offloading_num_layers 4" in offload
