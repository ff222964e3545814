"""Megatron-LM export of a gated DeltaNet hybrid (Qwen3-Next): the pattern with ``G``
symbols, the ``--linear-*`` sizes, gated attention, the gated shared expert and the partial
rotary share, parsed as Megatron-LM d98e8a64 does (`TransformerConfig` fields become flags
through ``ArgumentGroupFactory``) and checked against `TransformerConfig.__post_init__`'s
gated DeltaNet asserts; the torchtitan export refuses."""

from __future__ import annotations

import argparse

import pytest

from planner.export import megatron_arguments, megatron_command
from planner.export_torchtitan import torchtitan_toml
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.test_export_hybrid import hybrid_parser


def qwen3_next_parser() -> argparse.ArgumentParser:
    """`tests.planner.test_export_hybrid.hybrid_parser` with the gated DeltaNet and gate
    fields of TransformerConfig and ``--rotary-percent`` (arguments.py)."""
    p = hybrid_parser()
    for flag in (
        "--linear-key-head-dim",
        "--linear-value-head-dim",
        "--linear-num-key-heads",
        "--linear-num-value-heads",
        "--linear-conv-kernel-dim",
    ):
        p.add_argument(flag, type=int)
    p.add_argument("--attention-output-gate", action="store_true")
    p.add_argument("--moe-shared-expert-gate", action="store_true")
    p.add_argument("--rotary-percent", type=float, default=1.0)
    return p


def bundle(gpus: int = 32, **plan: object) -> PlanBundle:
    """Qwen3-Next on H100s; Megatron-Bridge's recipe runs tp 1, pp 4, ep 8
    (recipes/qwen/h100/qwen3_next.py, v0.6.0)."""
    b = PlanBundle(
        model=get_preset("qwen3-next-80b-a3b"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus),
        job=TrainingJob(seq_length=4096, global_batch_size=512),
        plan=ParallelPlan.for_world(gpus, **plan),  # type: ignore[arg-type]
    )
    assert check_plan(b.model, b.cluster, b.job, b.plan) == []
    return b


def test_golden_qwen3_next_recipe_plan() -> None:
    b = bundle(pp=4, ep=8, distributed_optimizer=True)
    args = qwen3_next_parser().parse_args(megatron_arguments(b))
    main, mtp = args.hybrid_layer_pattern.split("/")
    segments = main.split("|")
    assert [len(s) for s in segments] == [24] * 4 and "".join(segments) == "GEGEGE*E" * 12
    assert mtp == "*E" and args.mtp_num_layers == 1
    gdn = (args.linear_key_head_dim, args.linear_value_head_dim, args.linear_num_key_heads)
    assert (*gdn, args.linear_num_value_heads, args.linear_conv_kernel_dim) == (128, 128, 16, 32, 4)
    assert args.attention_output_gate and args.moe_shared_expert_gate and args.qk_layernorm
    assert args.rotary_percent == 0.25 and args.rotary_base == 10_000_000
    assert args.moe_shared_expert_intermediate_size == 512 and args.moe_router_topk == 10
    assert args.mamba_state_dim is None  # no M layer: no Mamba-2 sizes
    # TransformerConfig.__post_init__'s gated DeltaNet asserts
    tp_cp = args.tensor_model_parallel_size * (args.context_parallel_size or 1)
    assert args.linear_num_value_heads % args.linear_num_key_heads == 0
    assert args.linear_num_key_heads % tp_cp == 0 and args.linear_num_value_heads % tp_cp == 0
    text = megatron_command(b, 8)
    assert "pretrain_hybrid.py" in text and "no q/k norm submodules" in text


def test_tp_splits_the_gdn_heads() -> None:
    args = qwen3_next_parser().parse_args(megatron_arguments(bundle(tp=4, ep=8)))
    assert args.tensor_model_parallel_size == 4 and args.linear_num_key_heads % 4 == 0


def test_torchtitan_refuses_qwen3_next() -> None:
    with pytest.raises(SpecError, match=r"\[torchtitan_hybrid\].*gated DeltaNet"):
        torchtitan_toml(bundle(pp=4, ep=8))


def test_torchtitan_refuses_gated_attention_on_a_transformer() -> None:
    gated = get_preset("qwen3-30b-a3b").replace(attention_output_gate=True)
    b = PlanBundle(
        model=gated,
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8),
        job=TrainingJob(seq_length=4096, global_batch_size=64),
        plan=ParallelPlan.for_world(8, ep=8),
    )
    with pytest.raises(SpecError, match=r"\[torchtitan_output_gate\].*attention_output_gate"):
        torchtitan_toml(b)
