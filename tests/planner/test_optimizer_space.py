"""A Muon job in the planner: the search space without the distributed optimizer, the
search's plans passing the rules, and the export (Megatron-LM's ``--optimizer`` flag,
torchtitan's refusal)."""

from __future__ import annotations

import dataclasses

import pytest

from planner.export import megatron_arguments
from planner.export_torchtitan import TORCHTITAN_MUON_REFUSAL, torchtitan_config
from planner.optimizer_space import MUON_EXCLUDED_FEATURES, space_for_optimizer
from planner.search import search_plans
from planner.space import SearchSpace
from profiles.store import load_profile
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.megatron_args import megatron_parser

JOB = TrainingJob(seq_length=4096, global_batch_size=64)
MODEL = get_preset("llama3-8b")
CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)


def test_space_for_adam_is_unchanged() -> None:
    space = SearchSpace()
    assert space_for_optimizer(space, JOB) is space


def test_space_for_muon_drops_sharded_optimizers() -> None:
    for optimizer in ("muon", "dist_muon"):
        job = dataclasses.replace(JOB, optimizer=optimizer)
        space = space_for_optimizer(SearchSpace(), job)
        assert not space.features & MUON_EXCLUDED_FEATURES
    muon = space_for_optimizer(SearchSpace(), dataclasses.replace(JOB, optimizer="muon"))
    assert muon.fixed == {"overlap_grad_reduce": False, "overlap_param_gather": False}
    dist = space_for_optimizer(SearchSpace(), dataclasses.replace(JOB, optimizer="dist_muon"))
    assert dist.fixed == {}


def test_space_for_muon_refuses_precision_aware_optimizer() -> None:
    space = dataclasses.replace(SearchSpace(), sharded_optimizer_only=True)
    with pytest.raises(SpecError, match="precision-aware optimizer"):
        space_for_optimizer(space, dataclasses.replace(JOB, optimizer="dist_muon"))


def test_search_for_dist_muon_finds_plans_the_rules_pass() -> None:
    job = dataclasses.replace(JOB, optimizer="dist_muon")
    result = search_plans(MODEL, CLUSTER, job, load_profile("h100-sxm-80gb"), top_k=3)
    assert result.best is not None
    for ranked in result.top:
        assert not ranked.plan.distributed_optimizer and not ranked.plan.use_megatron_fsdp
        assert check_plan(MODEL, CLUSTER, job, ranked.plan) == []


def _bundle(optimizer: str) -> PlanBundle:
    return PlanBundle(
        model=MODEL,
        cluster=CLUSTER,
        job=dataclasses.replace(JOB, optimizer=optimizer),
        plan=ParallelPlan.for_world(16, tp=2),
    )


@pytest.mark.parametrize("optimizer", ["adam", "muon", "dist_muon"])
def test_megatron_export_names_the_optimizer(optimizer: str) -> None:
    args = megatron_parser().parse_args(megatron_arguments(_bundle(optimizer)))
    assert args.optimizer == optimizer
    assert not args.use_distributed_optimizer


def test_torchtitan_export_refuses_muon() -> None:
    assert torchtitan_config(_bundle("adam"))["training"]["global_batch_size"] == 64
    with pytest.raises(SpecError, match=r"optimizer \(dist_muon\)") as err:
        torchtitan_config(_bundle("dist_muon"))
    assert TORCHTITAN_MUON_REFUSAL in str(err.value)
