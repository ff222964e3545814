"""Megatron-LM export of hybrid Mamba-2 models (`planner.export_hybrid`): the entry point,
the layer spec, the pattern cut by ``|`` into the plan's pipeline segments, the Mamba-2
flags, and Megatron-LM's hybrid validation (``validate_args`` and
``hybrid_layer_allocation.select_pipeline_segment`` at d98e8a64, and
``MambaContextParallel.__init__``'s cp asserts) on the parsed flags; the torchtitan export
refuses."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from planner.candidates import enumerate_candidates
from planner.export import megatron_arguments, megatron_command, megatron_environment
from planner.export_hybrid import hybrid_pattern_argument
from planner.export_torchtitan import torchtitan_toml
from planner.space import SearchSpace, plan_from_row
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.pipeline_split import pipeline_split
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.megatron_args import megatron_parser


def hybrid_parser() -> argparse.ArgumentParser:
    """`tests.planner.megatron_args.megatron_parser` with the hybrid flags of Megatron-LM
    d98e8a64: ``--spec`` (nargs *), ``--hybrid-layer-pattern``, the Mamba-2 fields of
    TransformerConfig (``mamba_num_heads`` optional) and its ``mtp_use_repeated_layer``."""
    p = megatron_parser()
    p.add_argument("--spec", nargs="*")
    p.add_argument("--hybrid-layer-pattern")
    p.add_argument("--mtp-use-repeated-layer", action="store_true")  # TransformerConfig
    for flag in (
        "--mamba-state-dim",
        "--mamba-head-dim",
        "--mamba-num-groups",
        "--mamba-num-heads",
    ):
        p.add_argument(flag, type=int)
    return p


def assert_megatron_accepts_hybrid(args: argparse.Namespace, bundle: PlanBundle) -> list[str]:
    """Megatron-LM's hybrid validation on the parsed flags; returns the pipeline segments."""
    model, plan = bundle.model, bundle.plan
    # the unified pattern "<main>/<mtp>/<mtp>...": identical MTP parts without "|", one per
    # --mtp-num-layers (hybrid_layer_allocation.parse_hybrid_pattern, validate_args)
    pattern, *mtp_parts = args.hybrid_layer_pattern.split("/")
    assert len(set(mtp_parts)) <= 1 and len(mtp_parts) == (args.mtp_num_layers or 0)
    assert all(part and set(part) <= set("M*-E") for part in mtp_parts)
    assert args.mtp_use_repeated_layer == model.mtp_repeated_layer
    assert args.spec == ["megatron.core.models.hybrid.hybrid_layer_specs", "hybrid_stack_spec"]
    assert len(pattern.replace("|", "")) == args.num_layers  # the layer count it derives
    assert set(pattern) <= set("M*-E|")
    segments = pattern.split("|")
    # pipes exclude every other split flag; they also fix vpp = segments / pp
    assert args.num_layers_per_virtual_pipeline_stage is None
    assert args.num_virtual_stages_per_pipeline_rank is None
    assert args.pipeline_model_parallel_layout is None
    assert not args.account_for_embedding_in_pipeline_split
    assert not args.account_for_loss_in_pipeline_split
    assert args.decoder_first_pipeline_num_layers is None
    assert args.decoder_last_pipeline_num_layers is None
    p = args.pipeline_model_parallel_size
    if len(segments) > 1:
        assert len(segments) % p == 0 and len(segments) // p == plan.vpp
    else:
        assert p == 1  # a pipe-free pattern is split at run time only with pp 1 here
    assert args.moe_layer_freq == 1  # absent: the E symbols place the experts
    t = args.tensor_model_parallel_size
    assert args.mamba_num_groups % t == 0  # MambaMixer's asserts
    heads = args.mamba_num_heads or 2 * args.hidden_size // args.mamba_head_dim
    assert heads % t == 0 and heads % args.mamba_num_groups == 0
    # MambaContextParallel.__init__: each tp rank's heads split over cp, its groups split
    # over cp or repeated on cp / (G / tp) ranks
    c, groups_tp = args.context_parallel_size or 1, args.mamba_num_groups // t
    assert (heads // t) % c == 0
    assert c % groups_tp == 0 if groups_tp < c else groups_tp % c == 0
    if t > 1 and not args.use_megatron_fsdp:  # Megatron-FSDP asserts the opposite
        assert megatron_environment(bundle).get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    assert (args.mamba_state_dim, args.mamba_head_dim) == (
        model.mamba_state_dim,
        model.mamba_head_dim,
    )
    return segments


def _bundle(name: str, gpus: int, seq: int, batch: int, **plan: object) -> PlanBundle:
    bundle = PlanBundle(
        model=get_preset(name),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus),
        job=TrainingJob(seq_length=seq, global_batch_size=batch),
        plan=ParallelPlan.for_world(gpus, **plan),  # type: ignore[arg-type]
    )
    assert check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan) == []
    return bundle


def _parsed(bundle: PlanBundle) -> tuple[argparse.Namespace, list[str]]:
    args = hybrid_parser().parse_args(megatron_arguments(bundle))
    return args, assert_megatron_accepts_hybrid(args, bundle)


def test_golden_nemotron_h_8b_interleaved() -> None:
    bundle = _bundle(
        "nemotron-h-8b", 64, 8192, 128, tp=4, pp=2, vpp=2, sequence_parallel=True,
        distributed_optimizer=True,
    )  # fmt: skip
    args, segments = _parsed(bundle)
    # 52 layers in pp 2 · vpp 2 = 4 segments of 13, in virtual stage order
    assert [len(s) for s in segments] == [13] * 4
    assert "".join(segments) == bundle.model.hybrid_layer_pattern
    assert (args.mamba_state_dim, args.mamba_head_dim, args.mamba_num_groups) == (128, 64, 8)
    assert args.mamba_num_heads is None  # 128 = 2·4096 / 64: Megatron's default
    assert args.position_embedding_type == "none" and not args.swiglu
    assert args.normalization == "RMSNorm" and args.untie_embeddings_and_output_weights
    text = megatron_command(bundle, 8)
    assert "pretrain_hybrid.py" in text and "pretrain_gpt.py" not in text
    assert "--hybrid-layer-pattern 'M-M-M-M*-M-M-|M-M-M*-M-M-M-|" in text
    assert "--num-layers-per-virtual-pipeline-stage" not in text


def test_golden_nemotron_3_nano_experts() -> None:
    bundle = _bundle(
        "nemotron-3-nano", 64, 8192, 256, tp=2, ep=8, sequence_parallel=True,
        distributed_optimizer=True,
    )  # fmt: skip
    argv = megatron_arguments(bundle)
    args, segments = _parsed(bundle)
    assert segments == [bundle.model.hybrid_layer_pattern]  # pp 1: no pipes
    assert args.mamba_num_heads == 64  # set in the spec: exported
    assert (args.num_experts, args.moe_router_topk, args.moe_ffn_hidden_size) == (128, 6, 1856)
    assert args.moe_shared_expert_intermediate_size == 3712
    assert "--moe-layer-freq" not in argv
    assert args.moe_router_score_function == "sigmoid" and args.moe_router_enable_expert_bias
    assert args.moe_router_topk_scaling_factor == 2.5
    assert (args.kv_channels, args.num_query_groups) == (128, 2)


def test_context_parallel_is_written_for_a_hybrid_model() -> None:
    # 128 heads and 8 groups at tp 4: 32 heads and 2 groups per tp rank; cp 4 gives each
    # rank 8 heads and one group (MambaContextParallel repeats each group on 2 cp ranks)
    bundle = _bundle(
        "nemotron-h-8b", 64, 65536, 64, tp=4, cp=4, sequence_parallel=True,
        distributed_optimizer=True,
    )  # fmt: skip
    argv = megatron_arguments(bundle)
    args, _ = _parsed(bundle)
    assert args.context_parallel_size == 4
    assert argv[argv.index("--context-parallel-size") + 1] == "4"
    assert "pretrain_hybrid.py" in megatron_command(bundle, 8)


def test_uneven_split_is_written_as_pipe_segments() -> None:
    # 118 layers on pp 4: 28 on the first stage, 30 on each other (no even split exists)
    bundle = _bundle(
        "nemotron-h-56b", 64, 8192, 64, tp=8, pp=4, sequence_parallel=True,
        decoder_first_pipeline_num_layers=28,
    )  # fmt: skip
    argv = megatron_arguments(bundle)
    _, segments = _parsed(bundle)
    assert [len(s) for s in segments] == [28, 30, 30, 30]
    assert "--decoder-first-pipeline-num-layers" not in argv


def test_pattern_segments_follow_the_pipeline_split() -> None:
    model = get_preset("nemotron-h-8b")
    plan = ParallelPlan(pp=4, dp=2, decoder_last_pipeline_num_layers=10)
    chunks = pipeline_split(model, plan).in_forward_order()
    segments = hybrid_pattern_argument(model, plan).split("|")
    assert [len(s) for s in segments] == [c.num_layers for c in chunks] == [14, 14, 14, 10]
    assert hybrid_pattern_argument(model, ParallelPlan(dp=8)) == model.hybrid_layer_pattern


@pytest.mark.parametrize("gpus", [8, 16])
def test_every_valid_hybrid_plan_exports_to_accepted_arguments(gpus: int) -> None:
    model = get_preset("nemotron-h-8b")
    job = TrainingJob(seq_length=1024, global_batch_size=64)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    table = enumerate_candidates(model, cluster, job, SearchSpace(max_micro_batch_size=2), 8).table
    assert len(table) and {1, 2} <= set(table["cp"])
    for index in range(0, len(table), max(1, len(table) // 40)):
        plan = plan_from_row(table.iloc[index].to_dict(), model)
        _parsed(PlanBundle(model=model, cluster=cluster, job=job, plan=plan))


def test_other_convolution_width_is_refused() -> None:
    bundle = _bundle("nemotron-h-8b", 8, 4096, 8, tp=1)
    wide = PlanBundle(
        model=bundle.model.replace(mamba_conv_kernel=8),
        cluster=bundle.cluster,
        job=bundle.job,
        plan=bundle.plan,
    )
    with pytest.raises(SpecError, match=r"\[mamba_conv_kernel_in_megatron_lm\].*d_conv 4"):
        megatron_arguments(wide)


def test_transformers_keep_pretrain_gpt() -> None:
    bundle = _bundle("llama3-8b", 8, 4096, 8, tp=1)
    text = megatron_command(bundle, 8)
    assert "pretrain_gpt.py" in text and "--hybrid-layer-pattern" not in text


def test_torchtitan_refuses_a_hybrid_model() -> None:
    bundle = _bundle("nemotron-h-8b", 8, 4096, 8, tp=1)
    with pytest.raises(
        SpecError, match=r"\[torchtitan_hybrid\].*no Mamba-2 or gated DeltaNet layer"
    ):
        torchtitan_toml(bundle)


def test_mtp_depths_are_written_in_the_unified_pattern() -> None:
    model = get_preset("nemotron-3-nano").replace(
        mtp_num_layers=2, mtp_hybrid_pattern="*E", mtp_repeated_layer=True
    )
    bundle = PlanBundle(
        model=model,
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64),
        job=TrainingJob(seq_length=8192, global_batch_size=256),
        plan=ParallelPlan.for_world(64, tp=2, pp=2, ep=8, sequence_parallel=True),
    )
    assert check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan) == []
    argv = megatron_arguments(bundle)
    args, segments = _parsed(bundle)
    main = model.hybrid_layer_pattern or ""
    assert args.hybrid_layer_pattern == "|".join(segments) + "/*E/*E"
    assert "".join(segments) == main and len(segments) == 2
    assert args.mtp_num_layers == 2 and args.mtp_use_repeated_layer
    assert argv.count("--mtp-use-repeated-layer") == 1
    separate = model.replace(mtp_repeated_layer=False)
    plain = dataclasses.replace(bundle, model=separate, plan=ParallelPlan.for_world(64, tp=2, ep=8))
    args, _ = _parsed(plain)
    assert args.hybrid_layer_pattern == main + "/*E/*E" and not args.mtp_use_repeated_layer


def test_mtp_depths_before_the_last_virtual_stage_are_refused() -> None:
    model = get_preset("nemotron-h-8b").replace(mtp_num_layers=1, mtp_hybrid_pattern="*-")
    layout = "E" + "t" * 26 + "|" + "t" * 26 + "m|L"
    plan = ParallelPlan.for_world(3, pp=3, pipeline_model_parallel_layout=layout)
    assert pipeline_split(model, plan).chunks[1][0].mtp_layers == 1
    with pytest.raises(SpecError, match="hybrid_mtp_on_last_virtual_stage"):
        hybrid_pattern_argument(model, plan)
