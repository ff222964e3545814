"""Megatron-LM export of a latent MoE model (``ModelSpec.moe_latent_size``): the
``--moe-latent-size`` flag, parsed as Megatron-LM's ``_add_moe_args`` declares it, for a
transformer and a hybrid model; none without a latent size; the torchtitan export refuses."""

from __future__ import annotations

import pytest

from planner.export import megatron_arguments
from planner.export_torchtitan import torchtitan_toml
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.megatron_args import megatron_parser
from tests.planner.test_export_hybrid import hybrid_parser


def _bundle(model: ModelSpec, **plan: object) -> PlanBundle:
    bundle = PlanBundle(
        model=model,
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16),
        job=TrainingJob(seq_length=4096, global_batch_size=64),
        plan=ParallelPlan.for_world(16, **plan),  # type: ignore[arg-type]
    )
    assert check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan) == []
    return bundle


def test_transformer_exports_its_latent_size() -> None:
    model = get_preset("qwen3-30b-a3b").replace(name="qwen3-latent", moe_latent_size=512)
    args = megatron_parser().parse_args(megatron_arguments(_bundle(model, tp=2, ep=8)))
    assert args.moe_latent_size == 512
    assert (args.num_experts, args.moe_ffn_hidden_size, args.hidden_size) == (128, 768, 2048)


def test_hybrid_model_exports_its_latent_size() -> None:
    model = get_preset("nemotron-3-nano").replace(name="nano-latent", moe_latent_size=1024)
    bundle = _bundle(model, tp=2, ep=8, sequence_parallel=True)
    args = hybrid_parser().parse_args(megatron_arguments(bundle))
    assert args.moe_latent_size == 1024


def test_no_latent_flag_without_a_latent_size() -> None:
    argv = megatron_arguments(_bundle(get_preset("qwen3-30b-a3b"), tp=2, ep=8))
    assert "--moe-latent-size" not in argv


def test_torchtitan_refuses_a_latent_moe_model() -> None:
    model = get_preset("qwen3-30b-a3b").replace(name="qwen3-latent", moe_latent_size=512)
    with pytest.raises(SpecError, match=r"\[torchtitan_latent_moe\].*--moe-latent-size"):
        torchtitan_toml(_bundle(model, tp=2, ep=8))
