"""Tests of `specs.rules`: every rule rejects a plan that breaks it and accepts one on the
right side of its relation; messages carry the operands' values; suggested fixes really
fix; `check_plan` never raises and its verdict agrees with the rank layout (the property
tests are in `test_rules_property.py`)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules import (
    RULES,
    Violation,
    check_plan,
    require_valid_plan,
    rule_by_id,
    rule_ids,
)
from tests.specs.rule_cases import CASES
from tests.specs.rule_specs import CLUSTER, JOB, LLAMA, MIXTRAL, PLAN, Case, Change, Specs


def test_cases_cover_every_rule() -> None:
    assert sorted(c.rule for c in CASES) == sorted(rule_ids())


def test_rule_ids_are_unique_snake_case_and_match_functions() -> None:
    ids = rule_ids()
    assert len(set(ids)) == len(ids) == len(RULES)
    assert all(re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", i) for i in ids)
    assert all(rule_by_id(i) is r for i, r in zip(ids, RULES, strict=True))


def test_rule_by_id_miss_lists_the_ids() -> None:
    with pytest.raises(SpecError, match="heads_divisible_by_tp"):
        rule_by_id("heads_divisible_by_pp")


@pytest.mark.parametrize("model", [LLAMA, MIXTRAL.replace(moe_shared_expert_size=2048)])
def test_valid_plan_has_no_violations(model: ModelSpec) -> None:
    assert check_plan(model, CLUSTER, JOB, PLAN) == []
    require_valid_plan(model, CLUSTER, JOB, PLAN)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_rule_rejects(case: Case) -> None:
    specs = case.reject.specs()
    violation = rule_by_id(case.rule)(*specs)
    assert isinstance(violation, Violation)
    assert violation.rule == case.rule
    for operand in case.operands:
        assert operand in violation.message, operand
    assert case.rule in {v.rule for v in check_plan(*specs)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_rule_accepts(case: Case) -> None:
    specs = case.accept.specs()
    assert rule_by_id(case.rule)(*specs) is None
    assert case.rule not in {v.rule for v in check_plan(*specs)}


# Fields a fix may name, and which spec carries them.
_FIX_FIELDS = {
    **{name: "plan" for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")},
    "micro_batch_size": "plan",
    "global_batch_size": "job",
    "seq_length": "job",
}
_FIX = re.compile(r"\b(\w+)(?: in \{([\d, ]+)\}|=(\d+)\b)")


def _fixes(message: str) -> list[tuple[str, int]]:
    found = []
    for name, listed, single in _FIX.findall(message):
        if name in _FIX_FIELDS:
            values = listed.split(", ") if listed else [single]
            found += [(name, int(v)) for v in values]
    return found


def _apply(specs: Specs, name: str, value: int) -> Specs:
    model, cluster, job, plan = specs
    if _FIX_FIELDS[name] == "job":
        return model, cluster, dataclasses.replace(job, **{name: value}), plan
    return model, cluster, job, plan.replace(**{name: value})


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_every_suggested_value_fixes_the_rule(case: Case) -> None:
    specs = case.reject.specs()
    violation = rule_by_id(case.rule)(*specs)
    assert violation is not None
    for name, value in _fixes(violation.message):
        assert rule_by_id(case.rule)(*_apply(specs, name, value)) is None, (name, value)


@pytest.mark.parametrize(
    ("change", "rule", "expected"),
    [
        # 30 layers on 60 GPUs: the divisors of gcd(30, 60) closest to 4
        (
            Change(model={"num_layers": 30}, cluster={"num_gpus": 60}),
            "layers_divisible_by_pp",
            "try pp in {1, 2, 3, 5, 6}",
        ),
        (
            Change(plan={"tp": 3}, cluster={"num_gpus": 8}),
            "heads_divisible_by_tp",
            "try tp in {1, 2, 4, 8}",
        ),
        (
            Change(cluster={"num_gpus": 60}),
            "world_size_matches",
            "tp·pp·cp = 8 does not divide 60",
        ),
        (
            Change(job={"global_batch_size": 4}),
            "global_batch_divisible_by_mbs_dp",
            "no whole microbatch",
        ),
        (Change(plan={"vpp": 1}), "schedule_matches_vpp", "needs vpp > 1"),
    ],
)
def test_message_details(change: Change, rule: str, expected: str) -> None:
    violation = rule_by_id(rule)(*change.specs())
    assert violation is not None
    assert expected in violation.message


def test_layers_divisible_by_pp_suggests_a_layout_that_passes_every_rule() -> None:
    # 61 layers (DeepSeek-V3 shape) on pp4 vpp4: no pp > 1 divides 61 and no equal
    # first/last count leaves whole chunks, so the fix is an explicit layout (the
    # Megatron-Bridge DeepSeek-V3 GB200 recipe runs pp4 vpp4 with one).
    model = MIXTRAL.replace(num_layers=61, mtp_num_layers=1)
    plan = PLAN.replace(tp=1, pp=4, vpp=4, dp=16, tp_comm_overlap=False, sequence_parallel=False)
    job = TrainingJob(seq_length=4096, global_batch_size=256)
    violation = rule_by_id("layers_divisible_by_pp")(model, CLUSTER, job, plan)
    assert violation is not None
    found = re.search(r"pipeline_model_parallel_layout='([^']+)'", violation.message)
    assert found is not None, violation.message
    fixed = plan.replace(pipeline_model_parallel_layout=found.group(1))
    assert check_plan(model, CLUSTER, job, fixed) == []


def test_one_f_one_b_accepts_fewer_microbatches_than_stages() -> None:
    # Megatron's non-interleaved 1F1B runs with m < pp (all warmup), so no rule fires.
    specs = Change(plan={"vpp": 1, "schedule": "1f1b"}, job={"global_batch_size": 16}).specs()
    assert check_plan(*specs) == []


def test_require_valid_plan_lists_every_violation() -> None:
    model, cluster, job, plan = Change(plan={"tp": 3, "vpp": 3}).specs()
    with pytest.raises(SpecError) as info:
        require_valid_plan(model, cluster, job, plan)
    text = str(info.value)
    assert "heads_divisible_by_tp" in text and "layers_per_stage_divisible_by_vpp" in text


def test_overlap_param_gather_with_dist_muon_names_the_fix_muon_allows() -> None:
    # the message once told a dist_muon job to set distributed_optimizer=True, which
    # muon_excludes_sharded_optimizer then refuses
    model = ModelSpec(
        name="m", num_layers=4, hidden_size=256, num_attention_heads=8,
        ffn_hidden_size=512, vocab_size=1000,
    )  # fmt: skip
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=512, global_batch_size=8, optimizer="dist_muon")
    plan = ParallelPlan(dp=8, overlap_grad_reduce=True, overlap_param_gather=True)
    found = {v.rule: v.message for v in check_plan(model, cluster, job, plan)}
    message = found["overlap_param_gather_needs_distributed_optimizer"]
    assert "optimizer (dist_muon)" in message and "distributed_optimizer=True" not in message
