"""Argument groups shared by several subcommands, and their conversion into specs.

Flag names follow DESIGN.md's command line; each help text states units and defaults.
Conversions only parse and build specs: validation is the specs' own (`SpecError`) and the
plan rules' (`specs.rules.check_plan`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import runtime_options
from costmodel.execution_rules import RUNTIMES
from costmodel.memory_allowances import FP8_RECIPES
from paraplan.flags import spellings
from paraplan.fp8_args import add_fp8_attention_arg, fp8_attention_fields
from paraplan.lora_args import add_lora_args, lora_from_args
from paraplan.optimizer_args import (
    add_optimizer_offload_args,
    add_optimizer_precision_args,
    optimizer_offload_fields,
    optimizer_precision_fields,
)
from paraplan.time_args import add_time_recipe_args, time_option_fields
from paraplan.vpp_args import add_layers_per_virtual_stage_arg, layers_per_virtual_stage_vpp
from profiles.store import stored_profile_names
from specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingJob
from specs.errors import SpecError
from specs.loading import load_model
from specs.pipeline_layout import layout_vpp

DEFAULT_HARDWARE = "h100-sxm-80gb"

CROSS_ENTROPY_IMPLS = ("native", "te", "te_fp32_grad")
"""Choices of ``--cross-entropy-fusion-impl``: Megatron-core's ``cross_entropy_fusion_impl``
(``native``, ``te``) with ``te`` split by the Transformer Engine release
(`costmodel.activations.logits_element_bytes`)."""


def add_problem_args(
    parser: argparse.ArgumentParser,
    *,
    hardware_required: bool = False,
    num_gpus_required: bool = True,
) -> None:
    """--model, --hardware, --num-gpus, --gpus-per-node, --seq-len, --global-batch, --precision,
    --optimizer, the LoRA flags (`paraplan.lora_args`).

    ``num_gpus_required=False`` serves the cluster-sizing form of `paraplan plan`, which
    searches over GPU counts itself.
    """
    g = parser.add_argument_group("model, cluster and job")
    g.add_argument(
        "--model",
        required=True,
        help="preset name (see `paraplan models`), or a path to a Hugging Face config.json "
        "or a paraplan ModelSpec JSON",
    )
    g.add_argument(
        "--hardware",
        required=hardware_required,
        default=None if hardware_required else DEFAULT_HARDWARE,
        help=f"stored hardware profile name ({', '.join(stored_profile_names())}) or a path "
        "to a profile JSON" + ("" if hardware_required else f" (default: {DEFAULT_HARDWARE})"),
    )
    g.add_argument(
        "--num-gpus",
        type=int,
        required=num_gpus_required,
        default=None,
        help="world size (GPUs or processes)",
    )
    g.add_argument(
        "--gpus-per-node", type=int, default=None, help="GPUs per node (default: the profile's)"
    )
    g.add_argument(*spellings("--seq-len"), type=int, required=True, help="tokens per sequence")
    g.add_argument(
        *spellings("--global-batch"),
        type=int,
        required=True,
        help="sequences per iteration (whole job)",
    )
    g.add_argument(
        "--precision",
        choices=("bf16", "fp8", "nvfp4", "fp32"),
        default="bf16",
        help="default: bf16; nvfp4: NVFP4 GEMMs (Blackwell profiles, megatron runtime)",
    )
    g.add_argument(
        "--optimizer",
        choices=("adam", "muon", "dist_muon"),
        default="adam",
        help="Megatron-LM --optimizer: adam, muon (Muon on 2-D weights, Adam on the rest) or "
        "dist_muon (the same sharded layer-wise over dp*cp; excludes --dist-opt); default: adam",
    )
    add_lora_args(g)


def add_plan_args(parser: argparse.ArgumentParser) -> None:
    """The parallel plan knobs; dp is derived as num_gpus / (tp·pp·cp)."""
    g = parser.add_argument_group("parallel plan (dp = num_gpus / (tp*pp*cp))")
    g.add_argument(*spellings("--tp"), type=int, default=1, help="tensor-parallel size (default 1)")
    g.add_argument(*spellings("--pp"), type=int, default=1, help="pipeline stages (default 1)")
    g.add_argument(
        *spellings("--vpp"),
        type=int,
        default=None,
        help="model chunks per pipeline rank; >1 = interleaved (default 1, or with "
        "--pipeline-model-parallel-layout its virtual stages / pp, as Megatron-LM derives it)",
    )
    g.add_argument(
        *spellings("--cp"), type=int, default=1, help="context-parallel size (default 1)"
    )
    g.add_argument(*spellings("--ep"), type=int, default=1, help="expert-parallel size (default 1)")
    g.add_argument(
        *spellings("--etp"), type=int, default=None, help="expert tensor-parallel size (default tp)"
    )
    g.add_argument(
        *spellings("--mbs"), type=int, default=1, help="micro-batch size in sequences (default 1)"
    )
    g.add_argument(
        *spellings("--sp"),
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Megatron sequence parallel over the TP group (default off, as in Megatron)",
    )
    g.add_argument(
        *spellings("--recompute"),
        choices=("none", "selective", "full"),
        default="none",
        help="default none",
    )
    g.add_argument(
        "--recompute-num-layers",
        type=int,
        default=None,
        help="with --recompute full: layers per pipeline chunk (block) or per recompute group "
        "(uniform), as Megatron's --recompute-num-layers (default: every layer)",
    )
    g.add_argument(
        "--recompute-method",
        choices=("uniform", "block"),
        default="uniform",
        help="with --recompute full: Megatron's --recompute-method, uniform (recompute groups "
        "of --recompute-num-layers layers) or block (the first --recompute-num-layers layers "
        "of each chunk); default uniform",
    )
    g.add_argument(
        "--recompute-modules",
        default=None,
        help="with --recompute selective: comma-separated Megatron-core modules "
        "(core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; default "
        "core_attn; 'none': no module)",
    )
    g.add_argument(
        "--cpu-offloading-num-layers",
        type=int,
        default=0,
        help="layers whose activations are offloaded to host memory (default 0: off)",
    )
    g.add_argument(
        "--offload-modules",
        default=None,
        help="fine-grained activation offloading: comma-separated modules whose input is "
        "offloaded (attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act)",
    )
    g.add_argument(
        *spellings("--dist-opt"),
        action=argparse.BooleanOptionalAction,
        default=False,
        help="distributed optimizer (shard optimizer state over dp*cp)",
    )
    g.add_argument(
        "--use-megatron-fsdp",
        action="store_true",
        help="shard over dp*cp with Megatron-FSDP instead of DDP / distributed optimizer",
    )
    g.add_argument(
        "--data-parallel-sharding-strategy",
        choices=("no_shard", "optim", "optim_grads", "optim_grads_params"),
        default=None,
        help="with --use-megatron-fsdp: what is sharded (default optim_grads_params, as Megatron)",
    )
    g.add_argument(
        *spellings("--bucket-size"), type=int, default=None, help="gradient bucket in parameters"
    )
    g.add_argument("--overlap-grad-reduce", action="store_true", help="overlap DP grad reduce")
    g.add_argument("--overlap-param-gather", action="store_true", help="overlap param all-gather")
    g.add_argument("--tp-comm-overlap", action="store_true", help="overlap TP comm with GEMMs")
    add_split_args(g, searched=False)


def add_split_args(group: argparse._ArgumentGroup, *, searched: bool) -> None:
    """The uneven pipeline split flags, with Megatron-LM's names (`specs.pipeline_split`);
    with ``searched`` every flag defaults to None (unset = searched)."""
    group.add_argument(
        "--decoder-first-pipeline-num-layers",
        type=int,
        default=None,
        help="transformer layers on the first pipeline stage (default: even split)",
    )
    group.add_argument(
        "--decoder-last-pipeline-num-layers",
        type=int,
        default=None,
        help="transformer layers on the last pipeline stage (default: even split)",
    )
    for flag, text in (
        ("--account-for-embedding-in-pipeline-split", "count the embedding as one layer"),
        ("--account-for-loss-in-pipeline-split", "count the output layer and loss as one layer"),
    ):
        if searched:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            group.add_argument(flag, action="store_true", help=text)
    group.add_argument(
        "--pipeline-model-parallel-layout",
        default=None,
        help='explicit layout, e.g. "Et|(tt|)*30mL" (E embedding, t layer, m MTP layer, '
        "L loss, | stage boundary); vpp = stages / pp",
    )
    add_layers_per_virtual_stage_arg(group)


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    """The ModelSpec named by --model."""
    return load_model(args.model)


def cluster_from_args(args: argparse.Namespace) -> ClusterSpec:
    """The ClusterSpec of --hardware, --num-gpus and --gpus-per-node."""
    return ClusterSpec(
        hardware=args.hardware, num_gpus=args.num_gpus, gpus_per_node=args.gpus_per_node
    )


def job_from_args(args: argparse.Namespace) -> TrainingJob:
    """The TrainingJob of --seq-len, --global-batch, --precision, --optimizer and the LoRA
    flags (`paraplan.lora_args.lora_from_args`)."""
    return TrainingJob(
        seq_length=args.seq_len,
        global_batch_size=args.global_batch,
        precision=args.precision,
        optimizer=getattr(args, "optimizer", "adam"),
        lora=lora_from_args(args),
    )


def plan_from_args(args: argparse.Namespace) -> ParallelPlan:
    """The ParallelPlan of the plan flags, dp derived from --num-gpus."""
    degrees: dict[str, Any] = {
        "tp": args.tp,
        "pp": args.pp,
        "vpp": vpp_from_args(args),
        "cp": args.cp,
        "ep": args.ep,
        "etp": args.etp,
        "micro_batch_size": args.mbs,
        "sequence_parallel": args.sp,
        "recompute": args.recompute,
        "recompute_num_layers": args.recompute_num_layers,
        "recompute_method": args.recompute_method,
        **saver_fields(args),
        "distributed_optimizer": args.dist_opt,
        "ddp_bucket_size": args.bucket_size,
        "overlap_grad_reduce": args.overlap_grad_reduce,
        "overlap_param_gather": args.overlap_param_gather,
        "tp_comm_overlap": args.tp_comm_overlap,
        "decoder_first_pipeline_num_layers": args.decoder_first_pipeline_num_layers,
        "decoder_last_pipeline_num_layers": args.decoder_last_pipeline_num_layers,
        "account_for_embedding_in_pipeline_split": args.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": args.account_for_loss_in_pipeline_split,
        "pipeline_model_parallel_layout": args.pipeline_model_parallel_layout,
        **megatron_fsdp_fields(args),
    }
    return ParallelPlan.for_world(args.num_gpus, **degrees)


def vpp_from_args(args: argparse.Namespace) -> int:
    """--vpp as given; the vpp of --num-layers-per-virtual-pipeline-stage
    (`paraplan.vpp_args.layers_per_virtual_stage_vpp`); else the virtual stages of
    --pipeline-model-parallel-layout over --pp (`specs.pipeline_layout.layout_vpp`,
    Megatron-LM's derivation), else 1. A layout whose stages pp does not divide keeps 1, and
    the layout rules report it."""
    derived_from_layers = layers_per_virtual_stage_vpp(args)
    if derived_from_layers is not None:
        return derived_from_layers
    if args.vpp is not None:
        return int(args.vpp)
    layout = args.pipeline_model_parallel_layout
    derived = layout_vpp(layout, args.pp) if layout is not None else None
    return derived or 1


def module_list(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated module list of --recompute-modules / --offload-modules as a tuple;
    None when not given, an empty tuple for 'none'."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())


def saver_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The per-module recompute and activation-offloading plan fields of the flags."""
    return {
        "recompute_modules": module_list(args.recompute_modules),
        "cpu_offloading_num_layers": args.cpu_offloading_num_layers,
        "offload_modules": module_list(args.offload_modules) or (),
    }


def add_runtime_arg(parser: argparse.ArgumentParser, default: str) -> None:
    """--runtime: which runtime model prices the plan (`costmodel.execution_rules.RUNTIMES`)."""
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default=default,
        help="runtime model of the prediction: megatron (Megatron-core with Transformer "
        "Engine, what exported plans run) or torch (paraplan's executor: DTensor, "
        f"DDP/FSDP2, torch pipelining); default {default}",
    )


def add_recipe_args(parser: argparse.ArgumentParser) -> None:
    """Launch settings of a Megatron recipe that are not plan degrees (`ExecutionOptions`):
    those that move memory and time (the FP8 recipe, FP8 parameters, the gradient dtype,
    the fused loss, the allocator mode) and those that move time only
    (`paraplan.time_args.add_time_recipe_args`)."""
    group = parser.add_argument_group("recipe settings (megatron runtime)")
    group.add_argument(
        "--fp8-recipe",
        choices=FP8_RECIPES,
        default=None,
        help="Transformer Engine FP8 scaling recipe with --precision fp8 (Megatron "
        "--fp8-recipe): delayed (default), tensorwise (current scaling) or mxfp8",
    )
    group.add_argument(
        "--fp8-param-gather",
        action="store_true",
        help="FP8 linear weights (Megatron --fp8-param-gather; Megatron-Bridge FP8 recipes "
        "set it): no bf16 weight copy, FP8 parameter all-gather",
    )
    group.add_argument(
        "--fp4-param-gather",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --precision nvfp4: NVFP4 linear weights gathered as NVFP4 (Megatron "
        "--fp4-param-gather; Megatron-Bridge's nvfp4 recipe sets it from release 26.06, the "
        "default here); --no-fp4-param-gather: bf16 weights with Transformer Engine's NVFP4 "
        "copies",
    )
    add_fp8_attention_arg(group)
    group.add_argument(
        "--grad-reduce-in-bf16",
        action="store_true",
        help="bf16 main gradients and gradient reduction (Megatron --grad-reduce-in-bf16) "
        "instead of the default fp32 ones",
    )
    add_optimizer_precision_args(group)
    group.add_argument(
        "--cross-entropy-loss-fusion",
        action="store_true",
        help="fused cross entropy in the loss (Megatron --cross-entropy-loss-fusion; "
        "default off: an fp32 copy of the logits per in-flight microbatch)",
    )
    group.add_argument(
        "--cross-entropy-fusion-impl",
        choices=CROSS_ENTROPY_IMPLS,
        default=None,
        help="with --cross-entropy-loss-fusion (Megatron --cross-entropy-fusion-impl): native "
        "(default; keeps the fp32 copy), te (Transformer Engine 2.2-2.17: gradient in the bf16 "
        "logits, no fp32 copy; Megatron-Bridge sets it) or te_fp32_grad (Transformer Engine "
        "2.18 and later: an fp32 gradient buffer)",
    )
    group.add_argument(
        "--expandable-segments",
        action="store_true",
        help="the run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (half the caching "
        "allocator's fragmentation allowance)",
    )
    add_optimizer_offload_args(group)
    add_time_recipe_args(group)


def options_from_args(args: argparse.Namespace) -> ExecutionOptions:
    """The `ExecutionOptions` of ``--runtime`` with the recipe settings of
    `add_recipe_args` where the command has them (`ExecutionOptions` checks their values)."""
    options = runtime_options(args.runtime)
    changes: dict[str, Any] = {}
    if getattr(args, "fp8_recipe", None) is not None:
        changes["fp8_recipe"] = args.fp8_recipe
    if getattr(args, "fp8_param_gather", False):
        changes["fp8_param"] = True
    if getattr(args, "fp4_param_gather", None) is not None:
        changes["fp4_param"] = args.fp4_param_gather
    changes.update(fp8_attention_fields(args))
    if getattr(args, "grad_reduce_in_bf16", False):
        changes["main_grad_bytes"] = 2
    changes.update(optimizer_precision_fields(args))
    fusion = cross_entropy_fusion(args)
    if fusion is not None:
        changes["cross_entropy_fusion"] = fusion
    if getattr(args, "expandable_segments", False):
        changes["expandable_segments"] = True
    changes.update(optimizer_offload_fields(args))
    changes.update(time_option_fields(args))
    return dataclasses.replace(options, **changes) if changes else options


def cross_entropy_fusion(args: argparse.Namespace) -> str | None:
    """`ExecutionOptions.cross_entropy_fusion` of ``--cross-entropy-loss-fusion`` and
    ``--cross-entropy-fusion-impl``, or None where the command has neither flag set;
    `SpecError` for an implementation given without the fusion."""
    impl = getattr(args, "cross_entropy_fusion_impl", None)
    if not getattr(args, "cross_entropy_loss_fusion", False):
        if impl is not None:
            raise SpecError(
                f"--cross-entropy-fusion-impl {impl} chooses the fused loss's kernel; add "
                "--cross-entropy-loss-fusion (without it Megatron-core runs the unfused loss)"
            )
        return None
    return impl or "native"


def megatron_fsdp_fields(args: argparse.Namespace) -> dict[str, Any]:
    """`use_megatron_fsdp` and `data_parallel_sharding_strategy` of the flags; the strategy
    defaults to Megatron's `optim_grads_params` under --use-megatron-fsdp."""
    strategy = args.data_parallel_sharding_strategy
    if strategy is None:
        strategy = "optim_grads_params" if args.use_megatron_fsdp else "no_shard"
    return {
        "use_megatron_fsdp": args.use_megatron_fsdp,
        "data_parallel_sharding_strategy": strategy,
    }
