"""The parallel plan flags shared by `check` and `estimate` (`add_plan_args`), the uneven
pipeline split flags `plan` searches over as well (`add_split_args`), and their conversion
into a `ParallelPlan` (`plan_from_args`).

Flag names follow DESIGN.md's command line; each help text states units and defaults. The
conversion only parses: validation is `ParallelPlan`'s own (`SpecError`) and the plan rules'
(`specs.rules.check_plan`).
"""

from __future__ import annotations

import argparse
from typing import Any

from paraplan.flags import spellings
from paraplan.vpp_args import add_layers_per_virtual_stage_arg, layers_per_virtual_stage_vpp
from specs import ParallelPlan
from specs.errors import SpecError
from specs.pipeline_layout import layout_vpp


def add_plan_args(parser: argparse.ArgumentParser) -> None:
    """The parallel plan knobs; dp is derived as num_gpus / (tp·pp·cp): the degrees, the
    memory savers, sharding and overlap (in that order on the help page), then the uneven
    pipeline split (`add_split_args`)."""
    g = parser.add_argument_group("parallel plan (dp = num_gpus / (tp*pp*cp))")
    add_degree_args(g)
    add_saver_args(g)
    add_sharding_args(g)
    add_split_args(g, searched=False)


def add_degree_args(g: argparse._ArgumentGroup) -> None:
    """--tp, --pp, --vpp, --cp, --ep, --etp, --mbs and --sp, added to the plan group ``g``."""
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


def add_saver_args(g: argparse._ArgumentGroup) -> None:
    """The recompute and activation-offloading flags (`saver_fields`), added to ``g``."""
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
        default=None,
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


def add_sharding_args(g: argparse._ArgumentGroup) -> None:
    """The data-parallel sharding, gradient bucket and overlap flags, added to ``g``."""
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
        "recompute_method": recompute_method(args.recompute, args.recompute_method),
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


def recompute_method(recompute: str | None, method: str | None) -> str:
    """``--recompute-method`` as given, else ``uniform``. `SpecError` when it is given with
    a ``--recompute`` other than ``full``: Megatron-LM's `validate_args` asserts
    ``recompute_method is None`` under selective recompute, and without recompute the
    method changes nothing, so either way the flag asks for what the plan does not do."""
    if method is not None and recompute not in (None, "full"):
        raise SpecError(
            f"--recompute-method {method} applies to --recompute full only, got --recompute "
            f"{recompute} (Megatron-LM asserts no recompute method under selective "
            "recompute): give --recompute full, or drop --recompute-method"
        )
    return method or "uniform"


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
