"""Megatron-LM's command line as the export tests check it: a parser of the flags an export
may use, spelled and typed as in `megatron/training/arguments.py` (`megatron_parser`;
unknown flags fail; with the execution options' flags: `option_parser`), and Megatron-LM's
validation of the parsed arguments (`assert_megatron_accepts`, megatron-facts.md §8.3;
of the option flags: `assert_megatron_takes_options`)."""

from __future__ import annotations

import argparse
import ast
from typing import get_args

from specs.pipeline_layout import expand_layout
from specs.plan import OffloadModule, RecomputeModule


def moe_freq_type(value: str) -> int | list[int]:
    """Megatron's `moe_freq_type`: an int, or a Python list expression it evaluates."""
    if value.lstrip("(").startswith("["):
        if value.startswith("["):
            return list(ast.literal_eval(value))
        return list(eval(value, {"__builtins__": {}}))
    return int(value)


def megatron_parser() -> argparse.ArgumentParser:
    """The Megatron-LM flags an export may use, spelled and typed as in
    `megatron/training/arguments.py` (megatron-facts.md §8.2); unknown flags fail."""
    p = argparse.ArgumentParser(exit_on_error=False)
    ints = [
        "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
        "--seq-length", "--max-position-embeddings", "--vocab-size", "--kv-channels",
        "--num-query-groups", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
        "--qk-pos-emb-head-dim", "--v-head-dim", "--num-experts", "--moe-router-topk",
        "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
        "--expert-model-parallel-size", "--expert-tensor-parallel-size",
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
        "--num-layers-per-virtual-pipeline-stage", "--context-parallel-size", "--rotary-base",
        "--ddp-bucket-size", "--micro-batch-size", "--global-batch-size",
        "--recompute-num-layers", "--mtp-num-layers", "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers", "--num-virtual-stages-per-pipeline-rank",
        "--moe-router-num-groups", "--moe-router-group-topk", "--moe-latent-size",
    ]  # fmt: skip
    for flag in ints:
        p.add_argument(flag, type=int)
    switches = [
        "--group-query-attention", "--multi-latent-attention", "--swiglu",
        "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
        "--moe-grouped-gemm", "--sequence-parallel", "--tp-comm-overlap",
        "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
        "--bf16", "--log-throughput", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--qk-layernorm", "--moe-router-pre-softmax",
        "--moe-router-enable-expert-bias",
        "--apply-layernorm-1p",  # TransformerConfig.layernorm_zero_centered_gamma's flag
    ]  # fmt: skip
    for flag in switches:
        p.add_argument(flag, action="store_true")
    p.add_argument("--tokenizer-type")
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    p.add_argument(
        "--position-embedding-type", choices=["learned_absolute", "rope", "none"],
        default="learned_absolute",
    )  # fmt: skip
    p.add_argument("--moe-layer-freq", type=moe_freq_type, default=1)
    # tuple_type and moe_freq_type of arguments.py; softmax_type of TransformerConfig
    p.add_argument("--window-size", type=lambda x: tuple(int(i) for i in x.strip("()").split(",")))
    p.add_argument("--window-attn-skip-freq", type=moe_freq_type)
    p.add_argument("--softmax-type", choices=["vanilla", "off-by-one", "learnable"])
    p.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall", "flex"])
    p.add_argument("--moe-expert-capacity-factor", type=float)
    p.add_argument("--cp-comm-type", choices=["p2p", "a2a", "all_gather", "a2a+p2p"])
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    # Megatron-core TransformerConfig choices (transformer_config.py)
    p.add_argument("--recompute-modules", nargs="*", choices=list(get_args(RecomputeModule)))
    p.add_argument("--cpu-offloading-num-layers", type=int, default=0)
    p.add_argument("--fine-grained-activation-offloading", action="store_true")
    p.add_argument("--offload-modules", nargs="*", choices=list(get_args(OffloadModule)))
    p.add_argument("--hidden-dropout", type=float, default=0.1)  # TransformerConfig
    p.add_argument("--attention-dropout", type=float, default=0.1)  # TransformerConfig
    p.add_argument("--fp8-format", choices=["e4m3", "hybrid"])
    # TransformerConfig.fp4 / fp4_recipe (generated flags) and --fp4-param-gather, d98e8a64
    p.add_argument("--fp4-format", dest="fp4", choices=["e2m1"])
    p.add_argument("--fp4-recipe", choices=["nvfp4", "custom"], default="nvfp4")
    p.add_argument("--fp4-param-gather", action="store_true")
    # TransformerConfig.first_last_layers_bf16 and its counts (generated flags, defaults
    # False, 1, 1), d98e8a64; --first-last-layers-bf16 and both counts in core_r0.14.0
    p.add_argument("--first-last-layers-bf16", action="store_true")
    p.add_argument("--num-layers-at-start-in-bf16", type=int, default=1)
    p.add_argument("--num-layers-at-end-in-bf16", type=int, default=1)
    # --optimizer choices of Megatron-LM d7288711 (Megatron-Bridge v0.4.0's)
    p.add_argument("--optimizer", choices=["adam", "sgd", "muon", "dist_muon", "lion"])
    p.add_argument("--pipeline-model-parallel-layout")
    p.add_argument("--use-megatron-fsdp", action="store_true")
    p.add_argument(
        "--data-parallel-sharding-strategy",
        choices=["no_shard", "optim", "optim_grads", "optim_grads_params"],
    )
    p.add_argument("--ckpt-format", choices=["torch", "torch_dist", "zarr", "fsdp_dtensor"])
    _add_router_arguments(p)
    return p


def _add_router_arguments(p: argparse.ArgumentParser) -> None:
    """Router flags: `_add_moe_args` of arguments.py (load balancing, aux-loss coefficient)
    and the TransformerConfig fields (types, choices and defaults of transformer_config.py)."""
    p.add_argument(
        "--moe-router-load-balancing-type", nargs="+", default="aux_loss",
        choices=["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn",
                 "quantile_balancing", "none"],
    )  # fmt: skip
    p.add_argument("--moe-aux-loss-coeff", type=float, nargs="+", default=0.0)
    p.add_argument(
        "--moe-router-score-function", choices=["softmax", "sigmoid", "sqrtsoftplus"],
        default="softmax",
    )  # fmt: skip
    p.add_argument("--moe-router-topk-scaling-factor", type=float)
    p.add_argument("--moe-router-bias-update-rate", type=float, default=1e-3)
    p.add_argument("--moe-router-dtype", choices=["fp32", "fp64"])


def _assert_megatron_router_rules(args: argparse.Namespace) -> None:
    """TransformerConfig.__post_init__'s router rules (transformer_config.py)."""
    assert not args.moe_router_enable_expert_bias or args.moe_router_score_function in (
        "sigmoid", "sqrtsoftplus",
    )  # fmt: skip
    balancing = args.moe_router_load_balancing_type
    balancing = balancing[0] if isinstance(balancing, list) else balancing
    assert not (
        args.moe_router_topk == 1 and args.moe_router_score_function == "softmax"
        and not args.moe_router_pre_softmax and balancing != "sinkhorn"
    )  # fmt: skip
    if args.moe_router_group_topk:
        assert args.moe_router_num_groups
        assert args.num_experts % args.moe_router_num_groups == 0
        assert args.moe_router_group_topk <= args.moe_router_num_groups


def _megatron_vpp(args: argparse.Namespace, p: int) -> int:
    """Megatron's pipeline split checks (`validate_args`, `TransformerConfig`; §8.3 rules
    5-7) written out for the parsed flags; returns the virtual pipeline size."""
    layers = args.num_layers
    acc = int(args.account_for_embedding_in_pipeline_split)
    acc += int(args.account_for_loss_in_pipeline_split)
    first, last = args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
    vpp_flags = [
        args.num_layers_per_virtual_pipeline_stage,
        args.num_virtual_stages_per_pipeline_rank,
    ]
    if args.pipeline_model_parallel_layout:
        assert first is None and last is None and acc == 0 and vpp_flags == [None, None]
        stages = len(expand_layout(args.pipeline_model_parallel_layout))
        assert stages % p == 0
        return stages // p
    vpp = 1
    if args.num_layers_per_virtual_pipeline_stage:
        assert first is None and last is None  # uneven needs --num-virtual-stages-...
        assert (layers + acc) % p == 0
        assert ((layers + acc) // p) % args.num_layers_per_virtual_pipeline_stage == 0
        vpp = (layers + acc) // p // args.num_layers_per_virtual_pipeline_stage
    elif args.num_virtual_stages_per_pipeline_rank:
        vpp = args.num_virtual_stages_per_pipeline_rank
    if first is not None or last is not None:
        assert acc == 0
        middle = layers - (first or 0) - (last or 0)
        ranks = p - (first is not None) - (last is not None)
        assert bool(middle) == bool(ranks) and (ranks == 0 or middle % ranks == 0)
        counts = [c for c in (first, last) if c is not None]
        counts += [middle // ranks] if ranks else []
        assert all(c % vpp == 0 for c in counts)
    else:
        assert (layers + acc) % p == 0
    return vpp


def assert_megatron_accepts(args: argparse.Namespace, world: int, env: dict[str, str]) -> None:
    """Megatron's validation (megatron-facts.md §8.3), applied to parsed arguments."""
    t, p, c = args.tensor_model_parallel_size, args.pipeline_model_parallel_size, 1
    c = args.context_parallel_size or 1
    assert world % (t * p * c) == 0  # rule 1
    dp = world // (t * p * c)
    if args.num_experts:  # rule 2
        e, et = args.expert_model_parallel_size, args.expert_tensor_parallel_size
        assert world % (et * e * p) == 0 and args.num_experts % e == 0
        assert args.moe_ffn_hidden_size % et == 0
        freq = args.moe_layer_freq
        assert isinstance(freq, int) or len(freq) == args.num_layers
        _assert_megatron_router_rules(args)
    b = args.micro_batch_size
    assert args.global_batch_size % (b * dp) == 0  # rule 3
    m = args.global_batch_size // (b * dp)
    a, g = args.num_attention_heads, args.num_query_groups or args.num_attention_heads
    assert a % t == 0 and (g % t == 0 or t % g == 0)  # rule 4
    assert args.kv_channels or args.hidden_size % a == 0
    assert args.ffn_hidden_size % t == 0 or args.num_experts
    assert bool(args.num_query_groups) == args.group_query_attention  # §1.3: both or none
    if _megatron_vpp(args, p) > 1:  # rules 5-7
        assert p > 1 and m >= p and m % p == 0
    assert c == 1 or args.seq_length % (2 * c) == 0  # rule 8
    if args.overlap_param_gather:  # rule 9
        sharded = args.use_distributed_optimizer or args.use_megatron_fsdp  # (or FSDP)
        assert sharded and args.overlap_grad_reduce
    assert not (args.use_megatron_fsdp and args.use_distributed_optimizer)
    assert not args.tp_comm_overlap or args.sequence_parallel  # rule 10
    assert not args.sequence_parallel or t > 1
    if args.recompute_granularity == "full":  # rules 11, 15
        assert args.recompute_method and args.recompute_num_layers
    else:
        assert args.recompute_method is None and args.recompute_num_layers is None
    if (t > 1 or c > 1) and not args.use_megatron_fsdp:  # rule 13 (not under FSDP)
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    assert args.max_position_embeddings >= args.seq_length


def option_parser() -> argparse.ArgumentParser:
    """`megatron_parser` with the execution-option flags, spelled, typed and restricted as
    NVIDIA/Megatron-LM d98e8a64 has them: `megatron/training/arguments.py` for the
    explicit ones, the `TransformerConfig` / `ModelParallelConfig` fields for the generated
    ones (`argument_utils.ArgumentGroupFactory`: ``--field-name``)."""
    p = megatron_parser()
    # TransformerConfig.attention_backend: AttnBackend enum names
    p.add_argument("--attention-backend", choices=["flash", "fused", "unfused", "local", "auto"])
    for flag, dest in (
        ("--no-gradient-accumulation-fusion", "gradient_accumulation_fusion"),
        ("--no-rope-fusion", "apply_rope_fusion"),
        ("--no-overlap-p2p-communication", "overlap_p2p_comm"),
        ("--no-check-for-nan-in-loss-and-grad", "check_for_nan_in_loss_and_grad"),
    ):
        p.add_argument(flag, action="store_false", dest=dest)
    p.add_argument(
        "--fp8-recipe", choices=["tensorwise", "delayed", "mxfp8", "blockwise", "custom"],
        default="delayed",
    )  # fmt: skip
    switches = [
        "--fp8-param-gather", "--grad-reduce-in-bf16", "--use-precision-aware-optimizer",
        "--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d",
        "--cross-entropy-loss-fusion", "--overlap-moe-expert-parallel-comm",
        "--delay-wgrad-compute", "--use-transformer-engine-op-fuser",
    ]  # fmt: skip
    for flag in switches:
        p.add_argument(flag, action="store_true")
    p.add_argument("--main-grads-dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--main-params-dtype", choices=["fp32", "fp16"], default="fp32")
    for flag in ("--exp-avg-dtype", "--exp-avg-sq-dtype"):
        p.add_argument(flag, choices=["fp32", "fp16", "bf16", "fp8"], default="fp32")
    p.add_argument("--optimizer-offload-fraction", type=float, default=1.0)
    p.add_argument("--tp-comm-overlap-cfg", type=str)
    p.add_argument("--cross-entropy-fusion-impl", choices=["native", "te"], default="native")
    p.add_argument(
        "--cuda-graph-impl", choices=["none", "local", "transformer_engine", "full_iteration"],
        default="none",
    )  # fmt: skip
    p.add_argument(
        "--cuda-graph-modules", nargs="+", default=[],
        choices=["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"],
    )  # fmt: skip
    return p


def assert_megatron_takes_options(args: argparse.Namespace) -> None:
    """The checks of Megatron-LM's `validate_args` on the option flags."""
    if args.fp8_param_gather:
        assert args.use_distributed_optimizer or args.use_megatron_fsdp
    if args.optimizer_cpu_offload:
        assert args.use_precision_aware_optimizer
        assert not args.fp8_param_gather or args.fp8_recipe == "delayed"
    if args.cuda_graph_impl == "full_iteration":
        assert not args.check_for_nan_in_loss_and_grad and args.cuda_graph_modules == []
    assert not (args.cross_entropy_loss_fusion and args.cross_entropy_fusion_impl == "te")
    aware = (args.exp_avg_dtype, args.exp_avg_sq_dtype, args.main_params_dtype)
    if aware != ("fp32",) * 3 or args.main_grads_dtype != "fp32":
        assert args.use_precision_aware_optimizer
    if args.fp8_recipe != "delayed" or args.fp8_param_gather:
        assert args.fp8_format is not None
    assert not (args.fp4 and args.fp8_format)  # "cannot be used simultaneously"
    assert not args.fp4_param_gather or args.fp4  # "must be used together with --fp4-format"
