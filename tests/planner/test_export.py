"""Tests of `planner.export` and `planner.export_torchtitan`: the exported Megatron-LM
arguments parse with Megatron's flag spellings and satisfy its validation rules
(megatron-facts.md §8.3); one golden export per model family; the torchtitan TOML parses
and its degrees tile the world."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import tomllib

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.candidates import enumerate_candidates
from planner.export import export_text, megatron_arguments, megatron_command, megatron_environment
from planner.export_model import moe_layer_freq_argument
from planner.export_torchtitan import torchtitan_config, torchtitan_sharding_note, torchtitan_toml
from planner.space import SearchSpace, plan_from_row
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.kv_sharding import EXECUTOR_KV_RULE
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.planner.megatron_args import assert_megatron_accepts, megatron_parser


def _bundle(model_name: str, gpus: int, seq: int, batch: int, **plan) -> PlanBundle:
    model = get_preset(model_name)
    bundle = PlanBundle(
        model=model,
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus),
        job=TrainingJob(seq_length=seq, global_batch_size=batch),
        plan=ParallelPlan.for_world(gpus, **plan),
    )
    assert check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan) == []
    return bundle


def _parsed(bundle: PlanBundle) -> argparse.Namespace:
    args = megatron_parser().parse_args(megatron_arguments(bundle))
    assert_megatron_accepts(args, bundle.cluster.num_gpus, megatron_environment(bundle))
    return args


# Golden values: the models' published configs (specs.presets) and megatron-facts.md §8.


def test_golden_llama_dense() -> None:
    bundle = _bundle(
        "llama3-8b", 64, 8192, 128, tp=4, pp=2, vpp=4, sequence_parallel=True,
        recompute="selective", distributed_optimizer=True, overlap_grad_reduce=True,
        overlap_param_gather=True,
    )  # fmt: skip
    argv = megatron_arguments(bundle)
    args = _parsed(bundle)
    assert args.group_query_attention and args.num_query_groups == 8
    assert args.swiglu and args.normalization == "RMSNorm"
    assert args.position_embedding_type == "rope" and args.untie_embeddings_and_output_weights
    assert args.num_layers_per_virtual_pipeline_stage == 4  # 32 / (2 * 4)
    assert args.recompute_granularity == "selective" and "--recompute-method" not in argv
    assert args.max_position_embeddings == 8192 and args.bf16
    assert megatron_environment(bundle) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert "--virtual-pipeline-model-parallel-size" not in argv


def test_golden_gpt_gelu_tied_learned() -> None:
    bundle = _bundle("gpt-1.7b", 8, 2048, 32, tp=1, pp=1, recompute="full")
    argv = megatron_arguments(bundle)
    args = _parsed(bundle)
    absent = (
        "--swiglu", "--untie-embeddings-and-output-weights", "--group-query-attention",
        "--position-embedding-type", "--normalization", "--disable-bias-linear",
    )  # fmt: skip
    for flag in absent:
        assert flag not in argv  # GELU, tied, learned positions, LayerNorm, biases on
    assert args.max_position_embeddings == 2048  # learned table: exactly the model's
    assert (args.recompute_method, args.recompute_num_layers) == ("uniform", 1)
    assert megatron_environment(bundle) == {}


def test_golden_mixtral_moe() -> None:
    bundle = _bundle(
        "mixtral-8x7b", 64, 4096, 256, tp=2, pp=4, ep=8, etp=1, sequence_parallel=True,
        distributed_optimizer=True,
    )  # fmt: skip
    args = _parsed(bundle)
    assert (args.num_experts, args.moe_router_topk, args.moe_layer_freq) == (8, 2, 1)
    assert args.moe_ffn_hidden_size == 14336  # experts use ffn_hidden_size in Mixtral
    assert (args.expert_model_parallel_size, args.expert_tensor_parallel_size) == (8, 1)
    assert args.moe_token_dispatcher_type == "alltoall" and args.moe_grouped_gemm


def test_golden_deepseek_leading_dense_layers() -> None:
    bundle = _bundle(
        "deepseek-v3", 256, 4096, 512, tp=2, pp=1, ep=64, etp=1, sequence_parallel=True,
        recompute="full", recompute_method="block", recompute_num_layers=30,
        distributed_optimizer=True,
    )  # fmt: skip
    model = bundle.model
    assert moe_layer_freq_argument(model) == "([0]*3+[1]*58)"  # first_k_dense_replace = 3
    args = _parsed(bundle)
    assert args.moe_layer_freq == [int(v) for v in model.moe_layer_mask()]
    assert args.multi_latent_attention and args.kv_lora_rank == 512 and args.q_lora_rank == 1536
    assert args.moe_shared_expert_intermediate_size == 2048
    assert (args.recompute_method, args.recompute_num_layers) == ("block", 30)
    assert "--group-query-attention" not in megatron_arguments(bundle)  # MLA has no groups
    assert args.moe_router_score_function == "sigmoid" and args.moe_router_enable_expert_bias
    assert (args.moe_router_num_groups, args.moe_router_group_topk) == (8, 4)
    assert args.moe_router_topk_scaling_factor == 2.5
    assert args.moe_router_load_balancing_type == ["seq_aux_loss"]


def test_golden_gpt_oss_sliding_window_and_sinks() -> None:
    # GPT-OSS: sliding_window 128 on even layers, full attention on odd ones, learned sinks
    # (Hugging Face config; Megatron-LM examples/gptoss/02_train.sh: --window-size 127,0
    # --window-attn-skip-freq 2 --softmax-type learnable).
    bundle = _bundle("gpt-oss-120b", 64, 8192, 512, ep=8, distributed_optimizer=True)
    args = _parsed(bundle)
    assert args.window_size == (127, 0) and args.window_attn_skip_freq == 2
    assert args.softmax_type == "learnable"
    windowed = [n % args.window_attn_skip_freq != 0 for n in range(1, args.num_layers + 1)]
    assert windowed == list(bundle.model.window_layer_mask())
    assert "--window-size" not in megatron_arguments(_bundle("llama3-8b", 8, 4096, 64))


def test_moe_layer_freq_with_stride_and_prefix() -> None:
    model = get_preset("tiny-moe").replace(num_layers=8, moe_first_dense_layers=2, moe_layer_freq=2)
    assert moe_layer_freq_argument(model) == "[0,0,1,0,1,0,1,0]"
    assert moe_layer_freq_argument(get_preset("tiny-moe").replace(moe_layer_freq=2)) == "2"


def test_command_quotes_and_launches() -> None:
    bundle = _bundle("deepseek-v3", 256, 4096, 512, tp=2, ep=64, etp=1)
    text = megatron_command(bundle, 8)
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    assert "--nnodes 32 pretrain_gpt.py" in text
    assert "--moe-layer-freq '([0]*3+[1]*58)'" in text
    with pytest.raises(SpecError, match="megatron, torchtitan"):
        export_text(bundle, "nemo", 8)


def test_torchtitan_toml() -> None:
    bundle = _bundle(
        "llama3-8b", 64, 8192, 128, tp=4, pp=2, vpp=2, cp=2, recompute="full",
        distributed_optimizer=True,
    )  # fmt: skip
    parsed = tomllib.loads(torchtitan_toml(bundle))
    assert parsed == torchtitan_config(bundle)
    par = parsed["parallelism"]
    assert par["data_parallel_shard_degree"] == 4 and par["data_parallel_replicate_degree"] == 1
    product = (
        par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
        * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]
        * par["context_parallel_degree"]
    )  # fmt: skip
    assert product == 64
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] == 8  # 32 / (2 * 2)
    assert parsed["training"] == {
        "global_batch_size": 128, "local_batch_size": 32, "seq_len": 8192,
        "mixed_precision_param": "bfloat16",
    }  # fmt: skip
    assert parsed["activation_checkpoint"] == {"mode": "full"}
    assert parsed["model"] == {"name": "llama3", "flavor": "8B"}


def test_torchtitan_sharding_note_names_what_fsdp_shards_beyond_the_priced_plan() -> None:
    # torchtitan's dp_shard is FSDP: it agrees only with a plan priced fully sharded
    zero1 = _bundle("llama3-8b", 16, 4096, 64, tp=2, distributed_optimizer=True)
    note = torchtitan_sharding_note(zero1.plan)
    assert note is not None and "data_parallel_shard_degree = 8 runs FSDP" in note
    assert "(distributed optimizer, ZeRO-1)" in note
    assert f"# {note}" in torchtitan_toml(zero1)
    full = {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
    fsdp = _bundle("llama3-8b", 16, 4096, 64, tp=2, **full)
    assert torchtitan_sharding_note(fsdp.plan) is None
    ddp = _bundle("llama3-8b", 16, 4096, 64, tp=2)
    assert torchtitan_sharding_note(ddp.plan) is None
    assert "runs FSDP" not in torchtitan_toml(ddp)


def test_torchtitan_ddp_without_distributed_optimizer() -> None:
    bundle = _bundle("llama3-8b", 16, 4096, 64, tp=2, recompute="selective")
    par = torchtitan_config(bundle)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (8, 1)
    assert torchtitan_config(bundle)["activation_checkpoint"]["selective_ac_option"] == "op"


@functools.cache
def _valid_table(name: str, gpus: int) -> pd.DataFrame:
    model = get_preset(name)
    job = TrainingJob(seq_length=1024, global_batch_size=64)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    return enumerate_candidates(model, cluster, job, SearchSpace(max_micro_batch_size=2), 8).table


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["tiny", "tiny-gelu", "tiny-moe", "llama3-8b", "mixtral-8x7b"]),
    gpus=st.sampled_from([8, 16, 32]),
    pick=st.integers(0, 100_000),
)
def test_every_valid_plan_exports_to_accepted_arguments(name, gpus, pick) -> None:
    """Any plan of the search space that passes check_plan exports to arguments that pass
    Megatron's validation."""
    model = get_preset(name)
    job = TrainingJob(seq_length=1024, global_batch_size=64)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    table = _valid_table(name, gpus)
    plan = plan_from_row(table.iloc[pick % len(table)].to_dict(), model)
    bundle = PlanBundle(model=model, cluster=cluster, job=job, plan=plan)
    _parsed(bundle)


@pytest.mark.parametrize(
    ("name", "gpus", "seq", "batch", "plan", "flags"),
    [
        (  # Llama 3 405B, arXiv 2407.21783 §3.3.2: TP8 PP16, first and last stage 7 layers
            "llama3.1-405b", 16384, 8192, 2048,
            {"tp": 8, "pp": 16, "sequence_parallel": True, "distributed_optimizer": True,
             "decoder_first_pipeline_num_layers": 7, "decoder_last_pipeline_num_layers": 7},
            ["--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7"],
        ),
        (  # Megatron-Bridge Llama 3 405B: TP8 PP8 VPP8 CP2 on 1,024 H100, both account flags
            "llama3.1-405b", 1024, 8192, 512,
            {"tp": 8, "pp": 8, "vpp": 8, "cp": 2, "sequence_parallel": True,
             "distributed_optimizer": True, "account_for_embedding_in_pipeline_split": True,
             "account_for_loss_in_pipeline_split": True},
            ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
             "--num-layers-per-virtual-pipeline-stage 2"],
        ),
        (  # Megatron-Bridge Qwen3-235B-A22B: TP2 PP8 VPP4 EP32 ETP1 on 256 H100
            "qwen3-235b-a22b", 256, 4096, 2048,
            {"tp": 2, "pp": 8, "vpp": 4, "ep": 32, "etp": 1, "sequence_parallel": True,
             "distributed_optimizer": True, "account_for_embedding_in_pipeline_split": True,
             "account_for_loss_in_pipeline_split": True},
            ["--num-layers-per-virtual-pipeline-stage 3"],
        ),
        (  # Megatron-Bridge DeepSeek-V3: TP2 PP8 VPP4 EP64 on 1,024 H100 with a layout
            "deepseek-v3", 1024, 4096, 8192,
            {"tp": 2, "pp": 8, "vpp": 4, "ep": 64, "sequence_parallel": True,
             "distributed_optimizer": True, "pipeline_model_parallel_layout": "Et|(tt|)*30mL"},
            ["--pipeline-model-parallel-layout 'Et|(tt|)*30mL'", "--mtp-num-layers 1"],
        ),
    ],
)  # fmt: skip
def test_uneven_split_exports_carry_megatrons_flags(name, gpus, seq, batch, plan, flags) -> None:
    bundle = _bundle(name, gpus, seq, batch, **plan)
    text = megatron_command(bundle, 8)
    for flag in flags:
        assert flag in text
    assert "--num-virtual-stages-per-pipeline-rank" not in text or "decoder-first" in text
    _parsed(bundle)  # Megatron's own checks on the parsed flags
    titan = torchtitan_config(bundle)["parallelism"]
    parts = titan["module_fqns_per_model_part"]
    assert len(parts) == bundle.plan.pp * bundle.plan.vpp
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    layers = [m for part in parts for m in part if m.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(bundle.model.num_layers)]
    if bundle.model.mtp_num_layers:
        assert "no multi-token-prediction" in torchtitan_toml(bundle)


def test_memory_savers_export_with_megatron_core_names() -> None:
    bundle = _bundle(
        "llama3-8b", 8, 8192, 64, recompute="selective", recompute_modules=("layernorm", "mlp")
    )
    args = _parsed(bundle)
    assert args.recompute_granularity == "selective"
    assert args.recompute_modules == ["layernorm", "mlp"]
    assert "--recompute-modules" not in megatron_arguments(
        _bundle("llama3-8b", 8, 8192, 64, recompute="selective")
    )
    layers = _parsed(_bundle("llama3-8b", 8, 8192, 64, cpu_offloading_num_layers=12))
    assert layers.cpu_offloading_num_layers == 12 and not layers.fine_grained_activation_offloading
    fine = _bundle("llama3-8b", 8, 8192, 64, offload_modules=("core_attn", "attn_proj"))
    parsed = _parsed(fine)
    assert parsed.fine_grained_activation_offloading
    assert parsed.offload_modules == ["core_attn", "attn_proj"]
    assert megatron_environment(fine)["NVTE_CPU_OFFLOAD_V1"] == "1"


@pytest.mark.parametrize(
    ("name", "family", "flavor"),
    [
        # torchtitan/models/<family>/__init__.py registries: qwen3_configs, gptoss_configs
        ("qwen3-235b-a22b", "qwen3", "235B-A22B"),
        ("qwen3-30b-a3b", "qwen3", "30B-A3B"),
        ("gpt-oss-120b", "gpt_oss", "120b"),
        ("gpt-oss-20b", "gpt_oss", "20b"),
        ("deepseek-v3", "deepseek_v3", "671B"),
    ],
)
def test_torchtitan_names_the_models_family(name, family, flavor) -> None:
    bundle = _bundle(name, 64, 4096, 64, ep=8, distributed_optimizer=True)
    assert torchtitan_config(bundle)["model"] == {"name": family, "flavor": flavor}
    assert "has no flavor" not in torchtitan_toml(bundle)


def test_torchtitan_flavor_outside_the_registry_is_named_and_unsupported_refused() -> None:
    text = torchtitan_toml(_bundle("kimi-k2", 64, 4096, 64, ep=8, distributed_optimizer=True))
    assert tomllib.loads(text)["model"]["name"] == "deepseek_v3"
    assert "has no flavor 'kimi-k2'" in text
    with pytest.raises(SpecError, match=r"\[torchtitan_model\].*mixtral-8x7b"):
        torchtitan_toml(_bundle("mixtral-8x7b", 16, 4096, 64, ep=8))


@pytest.mark.parametrize(
    ("base", "qk_norm", "family"),
    [
        # torchtitan's qwen3 flavors all set qk_norm=True (dense 0.6B-32B and the MoE ones);
        # its llama3 attention has no q/k norm
        ("llama3-8b", True, "qwen3"),
        ("llama3-8b", False, "llama3"),
        ("qwen3-30b-a3b", True, "qwen3"),
    ],
)
def test_torchtitan_family_follows_the_qk_norm(base, qk_norm, family) -> None:
    model = dataclasses.replace(get_preset(base), name="custom", qk_layernorm=qk_norm)
    plan = {"ep": 8} if model.is_moe else {}
    bundle = dataclasses.replace(_bundle(base, 64, 4096, 64, **plan), model=model)
    text = torchtitan_toml(bundle)
    assert tomllib.loads(text)["model"] == {"name": family, "flavor": "custom"}
    assert "has no flavor 'custom'" in text


@pytest.mark.parametrize(
    ("name", "base", "qk_norm"),
    [
        # rope_theta and q/k norms of the published config.json (specs.presets)
        ("llama3.1-405b", 500000, False),
        ("qwen3-235b-a22b", 1000000, True),
        ("gpt-oss-120b", 150000, False),
        ("deepseek-v3", 10000, False),
    ],
)
def test_megatron_export_carries_rotary_base_and_qk_layernorm(name, base, qk_norm) -> None:
    model = get_preset(name)
    bundle = _bundle(name, 64, 4096, 64, ep=8 if model.is_moe else 1)
    args = _parsed(bundle)
    assert args.rotary_base == base
    assert args.qk_layernorm is qk_norm


@pytest.mark.parametrize(
    ("name", "zero_centered"),
    [
        # Megatron-Bridge v0.6.0: NemotronBridge.provider_bridge and
        # Qwen3NextBridge.provider_bridge set layernorm_zero_centered_gamma = True
        ("nemotron-4-15b", True),
        ("nemotron-4-340b", True),
        ("llama3-8b", False),
        ("deepseek-v3", False),
    ],
)
def test_megatron_export_carries_zero_centred_norm_weights(name, zero_centered) -> None:
    model = get_preset(name)
    assert model.layernorm_zero_centered_gamma is zero_centered
    bundle = _bundle(name, 64, 4096, 64, ep=8 if model.is_moe else 1)
    assert _parsed(bundle).apply_layernorm_1p is zero_centered


def test_torchtitan_refuses_tp_above_the_key_value_heads() -> None:
    # llama3-8b has 8 key/value heads; tp 16 runs in Megatron-LM only (QKV sub-sharding)
    bundle = _bundle("llama3-8b", 16, 8192, 16, tp=16, sequence_parallel=True)
    _parsed(bundle)  # Megatron-LM takes it
    with pytest.raises(SpecError, match=EXECUTOR_KV_RULE):
        torchtitan_config(bundle)


def test_parallel_block_exports_to_neither_framework() -> None:
    # Megatron-LM's TransformerLayer and torchtitan's decoders add attention and MLP in
    # sequence: a gpt_j_residual model has no flag to run as priced
    bundle = _bundle("gpt-neox-20b", 8, 2048, 16, tp=2)
    with pytest.raises(SpecError, match=r"parallel_block_not_exported.*Megatron-LM"):
        megatron_arguments(bundle)
    with pytest.raises(SpecError, match=r"parallel_block_not_exported.*torchtitan"):
        torchtitan_config(bundle)
