"""Export of DeepSeek sparse attention (GLM-5.1, GLM-5.2): the Megatron-LM flags of
`TransformerConfig`'s DSA fields (as ``tests/functional_tests/test_cases/gpt/
gpt3_mcore_te_tp2_pp2_dsa/model_config.yaml`` passes them), ``--no-rope-fusion`` once, the
all-gather context parallelism; torchtitan, the executor and the torch runtime refuse."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS
from costmodel.execution_record import record_options
from planner.candidates import enumerate_candidates
from planner.export import megatron_arguments
from planner.export_torchtitan import torchtitan_toml
from planner.space import SearchSpace
from profiles.store import load_profile
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan


def bundle(name: str = "glm-5.1", **plan: object) -> PlanBundle:
    """A GLM-5 model on 192 H100s at pp 6, cp 2 (all-gather), ep 32."""
    b = PlanBundle(
        model=get_preset(name),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=192),
        job=TrainingJob(seq_length=8192, global_batch_size=256),
        plan=ParallelPlan.for_world(
            192, pp=6, cp=2, ep=32, cp_comm_type="all_gather", distributed_optimizer=True, **plan
        ),  # type: ignore[arg-type]
    )
    assert check_plan(b.model, b.cluster, b.job, b.plan) == []
    return b


def values(args: list[str], flag: str) -> list[str]:
    """The values following every occurrence of ``flag``."""
    return [args[i + 1] for i, a in enumerate(args) if a == flag and i + 1 < len(args)]


def test_glm51_flags() -> None:
    args = megatron_arguments(bundle())
    assert values(args, "--experimental-attention-variant") == ["dsa"]
    assert values(args, "--dsa-indexer-n-heads") == ["32"]
    assert values(args, "--dsa-indexer-head-dim") == ["128"]
    assert values(args, "--dsa-indexer-topk") == ["2048"]
    assert values(args, "--dsa-indexer-loss-coeff") == ["0.001"]
    assert "--dsa-indexer-use-sparse-loss" in args
    assert values(args, "--dsa-kernel-backend") == ["cudnn"]
    assert values(args, "--cp-comm-type") == ["all_gather"]
    assert "--dsa-indexer-topk-freq" not in args
    assert args.count("--no-rope-fusion") == 1
    assert "--multi-latent-attention" in args


def test_glm52_index_sharing_flags() -> None:
    # the split of Megatron-Bridge's GB200 GLM-5.2 recipe: 14 and 16 layers on the first and
    # last stages, so that every stage starts on a layer that computes its top-k
    split = {"decoder_first_pipeline_num_layers": 14, "decoder_last_pipeline_num_layers": 16}
    args = megatron_arguments(bundle("glm-5.2", **split))
    assert values(args, "--dsa-indexer-topk-freq") == ["4"]
    assert values(args, "--dsa-indexer-skip-topk-offset") == ["3"]


def test_glm52_even_split_breaks_index_sharing() -> None:
    b = bundle()
    plan = b.plan
    rules = [v.rule for v in check_plan(get_preset("glm-5.2"), b.cluster, b.job, plan)]
    assert rules == ["dsa_index_share_within_chunk"]


def test_torchtitan_refuses_dsa() -> None:
    with pytest.raises(SpecError, match=r"\[torchtitan_dsa\].*dsa_indexer_topk 2048"):
        torchtitan_toml(bundle())


def test_torch_runtime_refuses_dsa() -> None:
    b = bundle()
    with pytest.raises(SpecError, match=r"\[executor_dsa\].*--runtime megatron"):
        estimate_plan(
            b.model, b.cluster, b.job, b.plan, load_profile("h100-sxm-80gb"), options=TORCH_OPTIONS
        )


def test_rope_fusion_stated_once_when_the_options_turn_it_off() -> None:
    b = bundle()
    options = dataclasses.replace(DEFAULT_OPTIONS, rope_fusion=False)
    args = megatron_arguments(dataclasses.replace(b, execution=record_options(options)))
    assert args.count("--no-rope-fusion") == 1


def test_planner_searches_dsa_context_parallelism_as_all_gather() -> None:
    # the rule dsa_context_parallel_all_gather refuses the ring; the switch table states
    # all_gather for a DSA model at cp > 1, so cp > 1 stays among the valid candidates
    model = get_preset("glm-5.1").replace(name="glm5-small", num_layers=4, moe_first_dense_layers=1)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=8192, global_batch_size=32)
    table = enumerate_candidates(model, cluster, job, SearchSpace(max_micro_batch_size=1), 8).table
    with_cp = table[table["cp"] > 1]
    assert len(with_cp) > 0
    assert set(with_cp["cp_comm_type"]) == {"all_gather"}
    assert set(table[table["cp"] == 1]["cp_comm_type"]) == {"p2p"}
