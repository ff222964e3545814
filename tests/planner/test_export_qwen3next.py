"""Megatron-LM export of a gated DeltaNet model (Qwen3-Next): the GPT path
(``pretrain_gpt.py --experimental-attention-variant gdn --linear-attention-freq``, as
Megatron-Bridge trains it) and the hybrid path it keeps for what the GPT path cannot build,
with the ``--linear-*`` sizes, gated attention, the gated shared expert and the partial
rotary share, parsed as Megatron-LM d98e8a64 does (`TransformerConfig` fields become flags
through ``ArgumentGroupFactory``) and checked against Megatron's argument asserts and
`TransformerConfig.__post_init__`'s gated DeltaNet asserts; the torchtitan export
refuses."""

from __future__ import annotations

import argparse

import pytest

from planner.export import megatron_arguments, megatron_command, megatron_environment
from planner.export_gdn_gpt import gdn_gpt_arguments, gpt_layers, linear_attention_freq_argument
from planner.export_torchtitan import torchtitan_toml
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.pipeline_layout import expand_layout
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.megatron_args import assert_megatron_accepts, moe_freq_type
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
    variants = ["gdn", "gdn2", "dsa", "gated_delta_net"]  # the TransformerConfig Literal
    p.add_argument("--experimental-attention-variant", choices=variants)
    p.add_argument("--linear-attention-freq", type=moe_freq_type)  # la_freq_type
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


def parsed(b: PlanBundle) -> argparse.Namespace:
    """The export parsed, through Megatron's argument asserts and the gated DeltaNet asserts
    of `TransformerConfig.__post_init__`."""
    args = qwen3_next_parser().parse_args(megatron_arguments(b))
    assert_megatron_accepts(args, b.cluster.num_gpus, megatron_environment(b))
    if args.experimental_attention_variant is not None:
        assert args.linear_attention_freq is not None  # "must be set for linear gdn"
    tp_cp = args.tensor_model_parallel_size * (args.context_parallel_size or 1)
    assert args.linear_num_value_heads % args.linear_num_key_heads == 0
    assert args.linear_num_key_heads % tp_cp == 0 and args.linear_num_value_heads % tp_cp == 0
    return args


def linear_attention_pattern(args: argparse.Namespace) -> list[int]:
    """`get_linear_attention_pattern` (experimental_attention_variant_module_specs.py)."""
    freq = args.linear_attention_freq
    if isinstance(freq, int):
        return [0 if (i + 1) % freq == 0 else 1 for i in range(args.num_layers)]
    assert len(freq) == args.num_layers
    return list(freq)


def test_golden_qwen3_next_recipe_plan() -> None:
    # Megatron-Bridge v0.6.0 qwen3_next_bridge.py: experimental_attention_variant
    # "gated_delta_net" (HEAD's alias of "gdn"), linear_attention_freq 4 (HF
    # full_attention_interval), qk_layernorm, attention_output_gate, shared-expert gate
    b = bundle(pp=4, ep=8, distributed_optimizer=True)
    args = parsed(b)
    assert args.num_layers == 48 and args.experimental_attention_variant == "gdn"
    assert args.linear_attention_freq == 4 and args.moe_layer_freq == 1
    layers = ["G" if v else "*" for v in linear_attention_pattern(args)]
    assert "".join(s + "E" for s in layers) == b.model.hybrid_layer_pattern
    assert args.hybrid_layer_pattern is None and args.spec is None
    assert args.mtp_num_layers == 1 and layers[-1] == "*"  # the MTP layer: the last's spec
    gdn = (args.linear_key_head_dim, args.linear_value_head_dim, args.linear_num_key_heads)
    assert (*gdn, args.linear_num_value_heads, args.linear_conv_kernel_dim) == (128, 128, 16, 32, 4)
    assert args.attention_output_gate and args.moe_shared_expert_gate and args.qk_layernorm
    assert args.apply_layernorm_1p  # Qwen3NextBridge: layernorm_zero_centered_gamma = True
    assert args.rotary_percent == 0.25 and args.rotary_base == 10_000_000
    assert args.moe_shared_expert_intermediate_size == 512 and args.moe_router_topk == 10
    assert args.mamba_state_dim is None  # no M layer: no Mamba-2 sizes
    text = megatron_command(b, 8)
    assert "pretrain_gpt.py" in text and "no q/k norm submodules" not in text


def test_virtual_stages_count_transformer_layers() -> None:
    args = parsed(bundle(pp=4, vpp=2, ep=8))
    assert args.num_layers_per_virtual_pipeline_stage == 6  # 48 / (4·2)


def test_uneven_split_is_a_layout_of_transformer_layers() -> None:
    layout = "Et*22|t*26|t*24|t*24mL"  # hybrid symbols: two per transformer layer
    args = parsed(bundle(pp=4, ep=8, pipeline_model_parallel_layout=layout))
    stages = expand_layout(args.pipeline_model_parallel_layout)
    assert [s.count("t") for s in stages] == [11, 13, 12, 12] and stages[-1].endswith("mL")


def test_split_inside_a_layer_keeps_the_hybrid_path() -> None:
    layout = "Et*21|t*27|t*24|t*24mL"  # a boundary between a mixer and its MoE
    b = bundle(pp=4, ep=8, pipeline_model_parallel_layout=layout)
    args = qwen3_next_parser().parse_args(megatron_arguments(b))
    main, mtp = args.hybrid_layer_pattern.split("/")
    assert [len(s) for s in main.split("|")] == [21, 27, 24, 24] and mtp == "*E"
    assert args.num_layers == 96 and args.experimental_attention_variant is None
    text = megatron_command(b, 8)
    assert "pretrain_hybrid.py" in text and "no q/k norm submodules" in text
    with pytest.raises(SpecError, match=r"\[gdn_gpt_path_expressible\].*cuts a transformer"):
        gdn_gpt_arguments(b.model, b.plan)


def test_gdn_norm_out_is_recomputed_on_the_gpt_path_only() -> None:
    modules = ("layernorm", "moe", "moe_act", "gdn_norm_out")
    b = bundle(pp=4, ep=8, recompute="selective", recompute_modules=modules)
    args = parsed(b)
    assert args.recompute_modules == list(modules) and args.experimental_attention_variant
    layout = "Et*21|t*27|t*24|t*24mL"  # the hybrid path: no attention variant is set
    hybrid = bundle(
        pp=4,
        ep=8,
        pipeline_model_parallel_layout=layout,
        recompute="selective",
        recompute_modules=("gdn_norm_out",),
    )
    with pytest.raises(SpecError, match=r"\[gdn_norm_out_needs_gpt_path\].*cuts a transformer"):
        megatron_arguments(hybrid)


def test_gpt_layers_of_patterns() -> None:
    assert gpt_layers("GEGM") is None and gpt_layers("GGEE") is None and gpt_layers("GE*") is None
    layers = gpt_layers("*EGEGEGE" * 2)
    assert layers is not None and layers.moe == (1,) * 8
    # attention first in every group of four: no integer N, a list expression
    assert linear_attention_freq_argument(layers) == "([0]*1+[1]*3)*2"
    assert eval(linear_attention_freq_argument(layers)) == [0, 1, 1, 1] * 2


def test_tp_splits_the_gdn_heads() -> None:
    args = parsed(bundle(tp=4, ep=8))
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
