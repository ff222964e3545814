"""Tests of `planner.export_options` and the execution record of plan.json
(`costmodel.execution_record`): every option field is classified; options round-trip
through plan.json; each exported option parses under Megatron-LM's spelling and passes its
checks; options Megatron-LM or torchtitan cannot take are refused with the field; an old
plan.json without the record exports as before."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from typing import Any

import pytest

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021, MEGATRON_2023, TORCH_OPTIONS
from costmodel.execution_record import options_from_record, record_options
from planner.export import (
    megatron_arguments,
    megatron_command,
    megatron_environment,
)
from planner.export_fields import MEGATRON_EXPORTED, MEGATRON_UNEXPRESSIBLE, PRICING_FIELDS
from planner.export_options import RULE
from planner.export_torchtitan import torchtitan_config, torchtitan_toml
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.serde import dumps, load, loads
from tests.planner.megatron_args import (
    assert_megatron_accepts,
    assert_megatron_takes_options,
    option_parser,
)

FP8_RECIPE_FLAGS = {
    "fp8_recipe": "tensorwise",
    "fp8_param": True,
    "precision_aware_optimizer": True,
    "exp_avg_dtype": "bf16",
    "exp_avg_sq_dtype": "bf16",
}
"""`paraplan plan --precision fp8 --fp8-recipe tensorwise --fp8-param-gather
--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`."""


def priced_bundle(
    options: ExecutionOptions, name: str = "llama3-8b", precision: str = "bf16", **plan: Any
) -> PlanBundle:
    """A plan of ``name`` on 16 H100 with ``options`` recorded."""
    plan = {"distributed_optimizer": True, **plan}
    return PlanBundle(
        model=get_preset(name),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16),
        job=TrainingJob(seq_length=4096, global_batch_size=64, precision=precision),
        plan=ParallelPlan.for_world(16, **plan),
        execution=record_options(options),
    )


def exported(bundle: PlanBundle) -> tuple[list[str], argparse.Namespace]:
    """The Megatron-LM arguments of ``bundle`` and their parse, checked as Megatron does."""
    argv = megatron_arguments(bundle)
    args = option_parser().parse_args(argv)
    assert_megatron_accepts(args, bundle.cluster.num_gpus, megatron_environment(bundle))
    assert_megatron_takes_options(args)
    return argv, args


def test_every_option_field_has_one_export_rule() -> None:
    fields = {f.name for f in dataclasses.fields(ExecutionOptions)}
    groups = [MEGATRON_EXPORTED, set(MEGATRON_UNEXPRESSIBLE), set(PRICING_FIELDS)]
    assert set().union(*groups) == fields
    assert sum(len(g) for g in groups) == len(fields)  # disjoint


@pytest.mark.parametrize(
    "options",
    [
        DEFAULT_OPTIONS,
        MEGATRON_2021,
        MEGATRON_2023,
        TORCH_OPTIONS,
        dataclasses.replace(DEFAULT_OPTIONS, **FP8_RECIPE_FLAGS),
        dataclasses.replace(
            DEFAULT_OPTIONS, cuda_graph_scopes=frozenset({"attn", "moe_router"}),
            moe_dispatcher="flex", optimizer_cpu_offload_fraction=0.5,
            precision_aware_optimizer=True, fp8_gemm_rate_factor=0.7,
        ),
    ],
)  # fmt: skip
def test_options_round_trip_through_plan_json(tmp_path, options) -> None:
    bundle = priced_bundle(options)
    path = tmp_path / "plan.json"
    path.write_text(dumps(bundle))
    back = load(PlanBundle, path)
    assert back == bundle
    assert options_from_record(back.execution) == options
    assert record_options(DEFAULT_OPTIONS) == {}


def test_old_plan_json_without_the_record_exports_as_before() -> None:
    bundle = priced_bundle(DEFAULT_OPTIONS, tp=2, sequence_parallel=True)
    data = json.loads(dumps(bundle))
    assert data.pop("execution") == {}
    old = loads(PlanBundle, json.dumps(data))
    assert old.execution == {} and megatron_command(old, 8) == megatron_command(bundle, 8)
    assert torchtitan_toml(old) == torchtitan_toml(bundle)


def test_unknown_recorded_option_is_a_clear_error() -> None:
    bundle = dataclasses.replace(priced_bundle(DEFAULT_OPTIONS), execution={"fp8_recipee": "x"})
    with pytest.raises(SpecError, match=r"'fp8_recipee' is no execution option.*'fp8_recipe'"):
        megatron_arguments(bundle)
    bad_value = dataclasses.replace(bundle, execution={"fp8_recipe": "hourly"})
    with pytest.raises(SpecError, match=r"execution'.fp8_recipe must be one of"):
        megatron_arguments(bad_value)


def test_nvfp4_plan_exports_the_fp4_flags_and_parameter_gather() -> None:
    argv, args = exported(priced_bundle(DEFAULT_OPTIONS, precision="nvfp4"))
    assert argv[argv.index("--fp4-format") + 1] == "e2m1"
    assert argv[argv.index("--fp4-recipe") + 1] == "nvfp4"
    assert args.fp4_param_gather and args.bf16 and args.fp8_format is None


def test_nvfp4_settings_in_another_job_and_nvfp4_in_torchtitan_are_refused() -> None:
    options = dataclasses.replace(DEFAULT_OPTIONS, fp4_param=False)
    with pytest.raises(SpecError, match=r"fp4_param=False.*--precision nvfp4"):
        megatron_arguments(priced_bundle(options, precision="bf16"))
    with pytest.raises(SpecError, match=r"\[torchtitan_has_no_nvfp4\].*export --to megatron"):
        torchtitan_config(priced_bundle(DEFAULT_OPTIONS, precision="nvfp4"))


def test_bf16_layers_export_with_both_counts_and_are_refused_elsewhere() -> None:
    options = dataclasses.replace(
        DEFAULT_OPTIONS, fp8_recipe="tensorwise", first_last_layers_bf16=True
    )
    argv, args = exported(priced_bundle(options, precision="fp8"))
    # Megatron-core's defaults (1, 1) are written out, as priced
    assert argv[argv.index("--num-layers-at-start-in-bf16") + 1] == "1"
    assert args.first_last_layers_bf16 and args.num_layers_at_end_in_bf16 == 1
    with pytest.raises(SpecError, match=r"first_last_layers_bf16=True.*--precision fp8 or nvfp4"):
        megatron_arguments(priced_bundle(options, precision="bf16"))
    with pytest.raises(SpecError, match=r"first_last_layers_bf16=True: torchtitan"):
        torchtitan_config(priced_bundle(options, precision="fp8"))


def test_fp8_and_precision_aware_plan_exports_every_priced_flag() -> None:
    options = dataclasses.replace(DEFAULT_OPTIONS, **FP8_RECIPE_FLAGS)
    argv, args = exported(priced_bundle(options, precision="fp8"))
    for flag in ("--fp8-param-gather", "--use-precision-aware-optimizer", "--fp8-format"):
        assert flag in argv
    assert args.fp8_recipe == "tensorwise" and args.fp8_format == "hybrid"
    assert (args.exp_avg_dtype, args.exp_avg_sq_dtype) == ("bf16", "bf16")
    assert args.main_params_dtype == "fp32" and "--main-params-dtype" not in argv


CASES: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    # (options, bundle arguments, parsed Megatron-LM attributes)
    ({"attention": "materialized"}, {}, {"attention_backend": "unfused"}),
    ({"grad_accumulation_fusion": False}, {}, {"gradient_accumulation_fusion": False}),
    ({"hidden_dropout": True}, {}, {"hidden_dropout": 0.1}),
    ({"hidden_dropout": False}, {}, {"hidden_dropout": 0.0, "attention_dropout": 0.0}),
    ({"overlap_p2p": False}, {}, {"overlap_p2p_comm": False}),
    ({"grad_nan_check": False}, {}, {"check_for_nan_in_loss_and_grad": False}),
    ({"rope_fusion": False}, {}, {"apply_rope_fusion": False}),
    ({"main_grad_bytes": 2}, {}, {"grad_reduce_in_bf16": True, "main_grads_dtype": "fp32"}),
    (
        {"main_grad_bytes": 2, "precision_aware_optimizer": True, "main_params_dtype": "fp16"},
        {},
        {"main_grads_dtype": "bf16", "main_params_dtype": "fp16", "grad_reduce_in_bf16": True},
    ),
    (
        {"fp8_recipe": "mxfp8", "fp8_param": True},
        {"precision": "fp8"},
        {"fp8_recipe": "mxfp8", "fp8_param_gather": True},
    ),
    (
        {"fp4_param": False},
        {"precision": "nvfp4"},
        {"fp4": "e2m1", "fp4_recipe": "nvfp4", "fp4_param_gather": False, "fp8_format": None},
    ),
    (
        {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 0,
         "num_layers_at_end_in_bf16": 4},
        {"precision": "nvfp4"},
        {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 0,
         "num_layers_at_end_in_bf16": 4, "fp4": "e2m1"},
    ),
    (
        {"precision_aware_optimizer": True, "exp_avg_dtype": "fp8", "exp_avg_sq_dtype": "fp16"},
        {},
        {"use_precision_aware_optimizer": True, "exp_avg_dtype": "fp8", "exp_avg_sq_dtype": "fp16"},
    ),
    (
        {"precision_aware_optimizer": True, "optimizer_cpu_offload_fraction": 0.25,
         "overlap_cpu_optimizer_d2h_h2d": True},
        {},
        {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.25,
         "overlap_cpu_optimizer_d2h_h2d": True},
    ),
    (
        {"cross_entropy_fusion": "native"}, {},
        {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "native"},
    ),
    ({"expandable_segments": True}, {}, {}),
    ({"cudnn_norm": True}, {}, {}),
    ({"cuda_graph_scopes": frozenset({"layer"})}, {}, {"cuda_graph_impl": "local"}),
    (
        {"cuda_graph_scopes": frozenset({"full_iteration"})}, {},
        {"cuda_graph_impl": "full_iteration", "check_for_nan_in_loss_and_grad": False},
    ),
    (
        {"cuda_graph_scopes": frozenset({"attn", "moe_router", "moe_preprocess"})},
        {"name": "mixtral-8x7b", "ep": 8},
        {"cuda_graph_impl": "transformer_engine",
         "cuda_graph_modules": ["attn", "moe_preprocess", "moe_router"]},
    ),
    (
        {"moe_dispatcher": "flex", "moe_a2a_overlap": True, "moe_fused_grouped_mlp": True},
        {"name": "mixtral-8x7b", "ep": 8, "pp": 2, "vpp": 2},
        {"moe_token_dispatcher_type": "flex", "overlap_moe_expert_parallel_comm": True,
         "delay_wgrad_compute": True, "use_transformer_engine_op_fuser": True},
    ),
    (
        {"tp_overlap_rs_method": "ring_exchange", "tp_overlap_bulk_sm_margin": False},
        {"tp": 2, "sequence_parallel": True, "tp_comm_overlap": True},
        {"tp_comm_overlap": True, "tp_comm_overlap_cfg": "tp_comm_overlap_cfg.yaml"},
    ),
    (
        {"tp_overlap_pipeline_sm_margin": False},
        {"tp": 2, "sequence_parallel": True, "tp_comm_overlap": True},
        {"tp_comm_overlap_cfg": "tp_comm_overlap_cfg.yaml"},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "where", "want"), CASES)
def test_each_exported_option_parses_with_megatrons_spelling(changes, where, want) -> None:
    options = dataclasses.replace(DEFAULT_OPTIONS, **changes)
    _, args = exported(priced_bundle(options, **where))
    for dest, value in want.items():
        assert getattr(args, dest) == value, dest


def test_the_cases_cover_every_exported_field() -> None:
    assert {name for changes, _, _ in CASES for name in changes} == MEGATRON_EXPORTED


def test_launch_environment_and_notes_of_the_options() -> None:
    options = dataclasses.replace(
        DEFAULT_OPTIONS, expandable_segments=True, moe_fused_grouped_mlp=True,
        flash_attention_version=2, cuda_graph_scopes=frozenset({"full_iteration"}),
        cudnn_norm=True,
    )  # fmt: skip
    bundle = priced_bundle(options, "mixtral-8x7b", ep=8)
    env = megatron_environment(bundle)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] == "1"
    assert env["NVTE_NORM_FWD_USE_CUDNN"] == env["NVTE_NORM_BWD_USE_CUDNN"] == "1"
    text = megatron_command(bundle, 8)
    assert "export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in text
    assert "export NVTE_NORM_FWD_USE_CUDNN=1" in text
    assert "# priced with FlashAttention-2-class" in text
    assert "# --cuda-graph-impl full_iteration needs --no-check-for-nan-in-loss-and-grad" in text


@pytest.mark.parametrize(
    ("options", "where", "fields"),
    [
        (TORCH_OPTIONS, {}, ["runtime"]),
        (
            MEGATRON_2021, {},
            ["bias_fusion", "two_pass_norm_backward", "loss_scaling", "pipeline_scatter_gather",
             "deallocate_pipeline_outputs", "tp_dgrad_overlap", "ddp_gradient_copy",
             "step_gradient_copy", "stale_main_grad"],
        ),
        ({"cross_entropy_fusion": "te"}, {}, ["cross_entropy_fusion"]),
        ({"cross_entropy_fusion": "te_fp32_grad"}, {}, ["cross_entropy_fusion"]),
        (FP8_RECIPE_FLAGS, {"precision": "bf16"}, ["fp8_recipe", "fp8_param"]),
        ({"fp8_param": True}, {"precision": "fp8", "distributed_optimizer": False}, ["fp8_param"]),
        ({"main_grad_bytes": 2}, {"precision": "fp32"}, ["main_grad_bytes"]),
        ({"moe_dispatcher": "flex", "moe_a2a_overlap": True}, {},
         ["moe_dispatcher", "moe_a2a_overlap"]),
        # Megatron-LM's arguments.py excludes fp8_dot_product_attention from its flags
        ({"fp8_attention": True}, {"precision": "fp8"}, ["fp8_attention"]),
    ],
)  # fmt: skip
def test_options_megatron_cannot_take_are_refused_by_name(options, where, fields) -> None:
    if isinstance(options, dict):
        options = dataclasses.replace(DEFAULT_OPTIONS, **options)
    bundle = priced_bundle(options, **where)
    with pytest.raises(SpecError, match=rf"^\[{RULE}\] .*Megatron-LM cannot take") as info:
        megatron_arguments(bundle)
    for field in fields:
        assert f"{field}=" in str(info.value)


def test_pricing_only_fields_are_not_arguments() -> None:
    options = dataclasses.replace(
        DEFAULT_OPTIONS, fp8_gemm_rate_factor=0.5, sustained_gemm_rate_factor=0.9,
        moe_load_imbalance=1.2, allocator_fragmentation=0.2, fp8_tn_gemm_only=False,
        plan_features=frozenset({"sequence_parallel"}), moe_host_launch_s=0.0,
        moe_token_device_s=0.0,
    )  # fmt: skip
    bundle = priced_bundle(options)
    assert megatron_arguments(bundle) == megatron_arguments(priced_bundle(DEFAULT_OPTIONS))


def test_torchtitan_takes_fp8_options_and_refuses_the_rest() -> None:
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise", fp8_param=True)
    bundle = priced_bundle(options, precision="fp8")
    parsed = tomllib.loads(torchtitan_toml(bundle))
    float8 = parsed["quantize"]["linear"]["float8"]
    assert float8 == torchtitan_config(bundle)["quantize.linear.float8"]
    assert float8["recipe_name"] == "tensorwise" and float8["enable_fsdp_float8_all_gather"]
    assert parsed["model"]["converters"] == ["quantize.linear.float8"]
    assert "quantize.linear.float8" not in torchtitan_config(priced_bundle(TORCH_OPTIONS))
    aware = dataclasses.replace(DEFAULT_OPTIONS, precision_aware_optimizer=True)
    with pytest.raises(SpecError, match=r"torchtitan cannot take: precision_aware_optimizer="):
        torchtitan_config(priced_bundle(aware))
    mx = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")
    with pytest.raises(SpecError, match=r"fp8_recipe='mxfp8'"):
        torchtitan_config(priced_bundle(mx, precision="fp8"))


def test_fp8_attention_is_not_a_megatron_lm_flag_nor_a_torchtitan_setting() -> None:
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_attention=True, fp8_recipe="tensorwise")
    bundle = priced_bundle(options, precision="fp8")
    with pytest.raises(SpecError, match=r"fp8_attention=True: .*--no-fp8-attention"):
        megatron_arguments(bundle)
    with pytest.raises(SpecError, match=r"torchtitan cannot take: fp8_attention=True"):
        torchtitan_config(bundle)


def test_userbuffers_settings_become_the_tp_comm_overlap_yaml() -> None:
    options = dataclasses.replace(
        DEFAULT_OPTIONS, tp_overlap_rs_method="ring_exchange", tp_overlap_bulk_sm_margin=False
    )
    bundle = priced_bundle(options, tp=2, sequence_parallel=True, tp_comm_overlap=True)
    text = megatron_command(bundle, 8)
    head, launch = text.split("torchrun ")
    block = head[head.index("cat > tp_comm_overlap_cfg.yaml <<'EOF'\n") :].splitlines()
    # Megatron-Bridge RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True) for the
    # row-parallel forward GEMMs, BulkOverlapCfg(..., set_sm_margin=False) for the bulk ones
    ring = ["  method: ring_exchange", "  num_sm: 1", "  set_sm_margin: true"]
    bulk = ["  set_sm_margin: false"]
    assert block[1:-1] == [
        "proj_fprop:", *ring, "fc2_fprop:", *ring,
        "qkv_dgrad:", *bulk, "qkv_wgrad:", *bulk, "fc1_dgrad:", *bulk, "fc1_wgrad:", *bulk,
    ]  # fmt: skip
    assert block[-1] == "EOF" and "--tp-comm-overlap-cfg tp_comm_overlap_cfg.yaml" in launch
    # without TP overlap the settings priced nothing, and no file is written
    plain = priced_bundle(options, tp=2, sequence_parallel=True)
    assert "tp-comm-overlap-cfg" not in megatron_command(plain, 8)
