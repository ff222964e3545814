"""A LoRA job in the planner: the search space without Megatron-FSDP, the search's plans
passing the rules, the memory floor below the per-plan model state, the refusals before a
search that no plan can pass, and the exports' refusals (planner.finetune_space,
planner.memory_floor, planner.export, planner.export_torchtitan)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.memory_allowances import FrameworkAllowance
from planner.candidates import enumerate_candidates
from planner.export import MEGATRON_LORA_RULE, megatron_arguments, megatron_command
from planner.export_torchtitan import TORCHTITAN_LORA_RULE, torchtitan_config
from planner.finetune_space import LORA_EXCLUDED_FEATURES, space_for_lora
from planner.memory_floor import model_state_floor_bytes
from planner.search import search_plans
from planner.space import SearchSpace, plan_from_row
from profiles.store import load_profile
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.test_memory_floor import peak_model_state_bytes

LORA = LoraSpec(rank=16, targets=("linear_qkv",))
JOB = TrainingJob(seq_length=4096, global_batch_size=64, lora=LORA)
MODEL = get_preset("llama3-8b")
CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)


def test_space_for_lora_drops_megatron_fsdp() -> None:
    full = TrainingJob(seq_length=4096, global_batch_size=64)
    assert space_for_lora(SearchSpace(), MODEL, CLUSTER, full) == SearchSpace()
    space = space_for_lora(SearchSpace(), MODEL, CLUSTER, JOB)
    assert not space.features & LORA_EXCLUDED_FEATURES


DENSE_MLA = get_preset("tiny").replace(
    kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16, v_head_dim=32, num_query_groups=None
)
"""A dense model with multi-latent attention (no ``linear_qkv``)."""


@pytest.mark.parametrize(
    ("model", "job", "rule"),
    [
        (get_preset("tiny-moe"), JOB, "lora_not_on_experts"),
        (DENSE_MLA, JOB, "lora_not_on_mla"),
        (MODEL, dataclasses.replace(JOB, optimizer="dist_muon"), "lora_needs_adam"),
    ],
)
def test_a_search_no_plan_can_pass_is_refused_up_front(model, job, rule) -> None:
    with pytest.raises(SpecError, match=rule):
        space_for_lora(SearchSpace(), model, CLUSTER, job)


def test_fixed_megatron_fsdp_is_refused_up_front() -> None:
    space = SearchSpace(fixed={"use_megatron_fsdp": True})
    with pytest.raises(SpecError, match="lora_not_with_megatron_fsdp"):
        space_for_lora(space, MODEL, CLUSTER, JOB)


def test_search_for_a_lora_job_finds_plans_the_rules_pass() -> None:
    result = search_plans(MODEL, CLUSTER, JOB, load_profile("h100-sxm-80gb"), top_k=3)
    assert result.best is not None
    for ranked in result.top:
        assert not ranked.plan.use_megatron_fsdp
        assert check_plan(MODEL, CLUSTER, JOB, ranked.plan) == []
        assert ranked.estimate.lora == LORA


def test_the_memory_floor_stays_below_a_lora_plans_model_state() -> None:
    table = enumerate_candidates(MODEL, CLUSTER, JOB, SearchSpace(), 8).table
    rows = table.sample(n=30, random_state=3)
    floors = model_state_floor_bytes(MODEL, JOB, rows)
    fixed = FrameworkAllowance().fixed_bytes
    for floor, row in zip(floors, rows.to_dict("records"), strict=True):
        plan = plan_from_row(row, MODEL)
        assert floor <= peak_model_state_bytes(MODEL, JOB, plan) + fixed + 1e-6


def _bundle(job: TrainingJob) -> PlanBundle:
    return PlanBundle(model=MODEL, cluster=CLUSTER, job=job, plan=ParallelPlan.for_world(16, tp=2))


def test_the_exports_refuse_a_lora_job_and_name_megatron_bridge() -> None:
    with pytest.raises(SpecError, match=MEGATRON_LORA_RULE) as err:
        megatron_arguments(_bundle(JOB))
    assert "peft = LoRA(dim=16, alpha=32, target_modules=['linear_qkv'])" in str(err.value)
    with pytest.raises(SpecError, match=MEGATRON_LORA_RULE):
        megatron_command(_bundle(JOB), 8)
    with pytest.raises(SpecError, match=TORCHTITAN_LORA_RULE):
        torchtitan_config(_bundle(JOB))
    full = dataclasses.replace(JOB, lora=None)
    assert "--tensor-model-parallel-size" in megatron_arguments(_bundle(full))
