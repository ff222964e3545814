"""The plan-knob flags of `paraplan plan` (``--tp``, ``--pp``, ``--recompute``, ...), each
optional: a flag given fixes that `ParallelPlan` field, the others are searched; and the
search space they fix (`space_from_args`). The search (`planner.space`) is imported where
the space is built, so that ``--help`` and bad input answer without loading it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from paraplan.flags import spellings
from paraplan.plan_args import add_split_args, module_list, recompute_method
from paraplan.vpp_args import layers_per_virtual_stage_vpp

if TYPE_CHECKING:
    from planner.space import SearchSpace


KNOB_FLAGS: dict[str, str] = {
    "tp": "tp",
    "pp": "pp",
    "vpp": "vpp",
    "cp": "cp",
    "ep": "ep",
    "etp": "etp",
    "mbs": "micro_batch_size",
    "sp": "sequence_parallel",
    "recompute": "recompute",
    "recompute_num_layers": "recompute_num_layers",
    "recompute_method": "recompute_method",
    "dist_opt": "distributed_optimizer",
    "use_megatron_fsdp": "use_megatron_fsdp",
    "data_parallel_sharding_strategy": "data_parallel_sharding_strategy",
    "bucket_size": "ddp_bucket_size",
    "overlap_grad_reduce": "overlap_grad_reduce",
    "overlap_param_gather": "overlap_param_gather",
    "tp_comm_overlap": "tp_comm_overlap",
    "decoder_first_pipeline_num_layers": "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers": "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split": "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split": "account_for_loss_in_pipeline_split",
    "pipeline_model_parallel_layout": "pipeline_model_parallel_layout",
    "recompute_modules": "recompute_modules",
    "cpu_offloading_num_layers": "cpu_offloading_num_layers",
    "offload_modules": "offload_modules",
}
"""argparse dest -> `ParallelPlan` field of each knob flag."""


MODULE_FLAGS = ("recompute_modules", "offload_modules")
"""Knob flags whose comma-separated text is a module tuple (`paraplan.plan_args.module_list`)."""


def add_knob_args(parser: argparse.ArgumentParser) -> None:
    """The plan flags of `paraplan plan`, each optional: unset means searched."""
    g = parser.add_argument_group("fix plan knobs (unset = searched; dp = num_gpus/(tp*pp*cp))")
    for flag, text in (
        ("--tp", "tensor-parallel size"),
        ("--pp", "pipeline stages"),
        ("--vpp", "model chunks per pipeline rank"),
        ("--cp", "context-parallel size"),
        ("--ep", "expert-parallel size"),
        ("--etp", "expert tensor-parallel size"),
        ("--mbs", "micro-batch size (sequences)"),
        (
            "--recompute-num-layers",
            "with full recompute: layers per pipeline chunk (block) or per recompute group "
            "(uniform), as Megatron's --recompute-num-layers",
        ),
        (
            "--cpu-offloading-num-layers",
            "layers whose activations are offloaded to host memory (pp 1, no recompute; "
            "never searched: default 0, off)",
        ),
        ("--bucket-size", "DDP gradient bucket (parameters; 0: Megatron's default)"),
    ):
        g.add_argument(*spellings(flag), type=int, default=None, help=text)
    g.add_argument(*spellings("--recompute"), choices=("none", "selective", "full"), default=None)
    g.add_argument("--recompute-method", choices=("uniform", "block"), default=None)
    g.add_argument(
        "--recompute-modules",
        default=None,
        help="selective recompute of these comma-separated Megatron-core modules (core_attn, "
        "moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; 'none': no module); "
        "implies --recompute selective (default: searched where memory binds)",
    )
    g.add_argument(
        "--offload-modules",
        default=None,
        help="fine-grained activation offloading of these comma-separated modules' inputs "
        "(attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act; never "
        "searched: default off)",
    )
    g.add_argument(
        "--data-parallel-sharding-strategy",
        choices=("no_shard", "optim", "optim_grads", "optim_grads_params"),
        default=None,
        help="Megatron-FSDP sharding strategy (implies --use-megatron-fsdp unless no_shard; "
        "default: optim_grads_params searched beside the distributed optimizer)",
    )
    for flag, text in (
        ("--sp", "sequence parallel"),
        ("--dist-opt", "distributed optimizer"),
        ("--use-megatron-fsdp", "Megatron-FSDP (instead of DDP / distributed optimizer)"),
        ("--overlap-grad-reduce", "overlap DP gradient reduction"),
        ("--overlap-param-gather", "overlap parameter all-gather"),
        ("--tp-comm-overlap", "overlap TP communication with GEMMs"),
    ):
        g.add_argument(
            *spellings(flag), action=argparse.BooleanOptionalAction, default=None, help=text
        )
    add_split_args(g, searched=True)


def space_from_args(args: argparse.Namespace) -> SearchSpace:
    """The search space: fixed knobs from the flags that were given."""
    from planner.space import SearchSpace

    # a method beside none or selective recompute (--recompute-modules implies it) is refused
    selective = "selective" if args.recompute_modules is not None else None
    recompute_method(args.recompute or selective, args.recompute_method)
    fixed = {
        field: getattr(args, dest)
        for dest, field in KNOB_FLAGS.items()
        if getattr(args, dest) is not None
    }
    for name in MODULE_FLAGS:
        if name in fixed:
            fixed[name] = module_list(fixed[name])
    strategy = fixed.get("data_parallel_sharding_strategy")
    if strategy not in (None, "no_shard"):
        fixed.setdefault("use_megatron_fsdp", True)  # the strategy is Megatron-FSDP's
    if "recompute_modules" in fixed:
        fixed.setdefault("recompute", "selective")  # the modules are selective recompute's
    vpp = layers_per_virtual_stage_vpp(args)
    if vpp is not None:  # the count it was derived from fixes the account-for flags too
        fixed["vpp"] = vpp
        fixed.setdefault("account_for_embedding_in_pipeline_split", False)
        fixed.setdefault("account_for_loss_in_pipeline_split", False)
    return SearchSpace(
        fixed=fixed,
        tp_beyond_scale_up=args.tp_beyond_scale_up,
        max_micro_batch_size=args.max_mbs,
        # Megatron-LM takes --fp8-param-gather of an Adam job only with a sharded optimizer
        sharded_optimizer_only=args.fp8_param_gather and args.optimizer == "adam",
    )
