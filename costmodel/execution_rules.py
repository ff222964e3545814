"""The valid values of `costmodel.execution.ExecutionOptions` fields and the rules its
``__post_init__`` applies.

It holds the runtime, MoE dispatcher and TP-overlap method names, the CUDA graph scopes and
plan features a framework may name, and one function per group of field rules; each rule
raises `SpecError` with the field, its value and the fix. Rules that need other modules'
tables stay there (`costmodel.optimizer_offload.check_offload_fields`,
`costmodel.bf16_layer_rules.check_bf16_layer_fields`,
`costmodel.optimizer_state.OptimizerPrecision`, `costmodel.fp8_attention`).
`check_options`, the whole of ``__post_init__``, applies every group in turn. It reads the
options by field name, as `specs.fieldcheck` reads the specs: `costmodel.execution` imports
this module, so this module cannot import the class back.
"""

from __future__ import annotations

from typing import Any, Literal

from costmodel.bf16_layer_rules import check_bf16_layer_fields
from costmodel.fp8_attention import FP8_ATTENTION_KERNEL_RULE, check_fp8_attention_kernel
from costmodel.memory_allowances import FP8_RECIPES
from costmodel.optimizer_offload import check_offload_fields
from costmodel.optimizer_state import OptimizerPrecision
from costmodel.vocab_activations import CROSS_ENTROPY_FUSIONS
from specs.errors import SpecError

Runtime = Literal["megatron", "torch"]
MoeDispatcher = Literal["alltoall", "flex", "allgather"]
TpOverlapRsMethod = Literal["pipeline", "ring_exchange"]
ParamGatherEngine = Literal["megatron_fsdp", "deepspeed_zero3"]
PARAM_GATHER_ENGINES: tuple[ParamGatherEngine, ...] = ("megatron_fsdp", "deepspeed_zero3")
"""Engines that run a plan whose weights are sharded over the data-parallel group
(`ExecutionOptions.param_gather_engine`), Megatron-FSDP first (the default)."""
TP_OVERLAP_RS_METHODS: tuple[TpOverlapRsMethod, ...] = ("pipeline", "ring_exchange")
"""Userbuffers methods of the row-parallel forward reduce-scatter
(`ExecutionOptions.tp_overlap_rs_method`), Transformer Engine's default first."""
MOE_DISPATCHERS: tuple[MoeDispatcher, ...] = ("alltoall", "flex", "allgather")
"""Token dispatchers `costmodel.runtimes.megatron.moe_costs` prices, the default first."""

CUDA_GRAPH_SCOPES: frozenset[str] = frozenset(
    ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "layer", "full_iteration")
)
"""Names of `ExecutionOptions.cuda_graph_scopes`: Megatron-core's ``cuda_graph_modules``
(formerly ``cuda_graph_scope``; megatron/core/transformer/transformer_config.py;
``CudaGraphModule`` in megatron/core/transformer/enums.py) plus ``layer`` (its empty list:
the whole transformer layer) and ``full_iteration`` (``cuda_graph_impl="full_iteration"``:
the whole step). ``mamba`` captures a hybrid model's Mamba-2 layers (``CudaGraphModule.mamba``,
"Captures Mamba layers"; Megatron-Bridge's Nemotron-H and Nemotron 3 recipes set it): their
kernels launch as one graph. The host-launch term counts MoE launches only
(`costmodel.runtimes.megatron.moe_launches.captured_moe_launches`), so ``mamba``, like
``attn``, changes no priced term; on a model without Mamba layers it captures nothing."""
RUNTIMES: tuple[Runtime, ...] = ("megatron", "torch")
"""Runtime names, the default first."""

PLAN_FEATURES: frozenset[str] = frozenset(
    {
        "sequence_parallel",
        "tp_comm_overlap",
        "selective_recompute",
        "recompute_modules",
        "context_parallel",
        "distributed_optimizer",
        "uneven_pipeline_split",
        "interleaved_two_stages",
        "pipelined_grad_overlap",
        "ddp_bucket_size",
        "megatron_fsdp",
        "kv_sub_sharding",
    }
)
"""Plan features a framework may or may not implement (`ExecutionOptions.plan_features`),
each with the Megatron-LM argument that brought it:
- ``sequence_parallel``: ``--sequence-parallel`` (Korthikanti et al. 2022);
- ``tp_comm_overlap``: ``--tp-comm-overlap`` (Transformer Engine userbuffers);
- ``selective_recompute``: ``--recompute-granularity selective`` (Korthikanti et al. 2022);
- ``recompute_modules``: selective recompute of named modules, ``--recompute-modules``
  (Megatron-core ``TransformerConfig.recompute_modules``);
- ``context_parallel``: ``--context-parallel-size``;
- ``distributed_optimizer``: ``--use-distributed-optimizer`` (with it
  ``--overlap-param-gather``);
- ``uneven_pipeline_split``: ``--decoder-first/last-pipeline-num-layers``, the
  ``--account-for-*-in-pipeline-split`` flags and ``--pipeline-model-parallel-layout``;
- ``interleaved_two_stages``: the interleaved schedule with two pipeline stages (allowed only
  with ``--overlap-p2p-communication``; `validate_args` asks for pp > 2 otherwise);
- ``pipelined_grad_overlap``: gradient reduction overlapped with the backward when pp > 1
  (Megatron-core's DDP); Megatron-LM 2021 overlapped it only through PyTorch DDP, whose
  ``no_sync`` its pipelined schedules never entered, so every microbatch would be reduced;
- ``ddp_bucket_size``: ``--ddp-bucket-size``;
- ``megatron_fsdp``: ``--use-megatron-fsdp`` with ``--data-parallel-sharding-strategy``
  (Megatron-FSDP);
- ``kv_sub_sharding``: tp a multiple of grouped-query attention's key/value heads, which
  Megatron-core runs by sub-sharding the QKV activations (`specs.kv_sharding`; Megatron-LM
  commit f7dfb99795, 2025-12; no argument of its own)."""


def check_kernel_fields(
    *,
    fp8_recipe: str,
    runtime: str,
    attention: str,
    flash_attention_version: int,
    cross_entropy_fusion: str,
    main_grad_bytes: int,
) -> None:
    """The kernel and precision fields that name one of a fixed set of choices."""
    if fp8_recipe not in FP8_RECIPES:
        raise SpecError(
            f"fp8_recipe must be one of {', '.join(FP8_RECIPES)}, got {fp8_recipe!r}; "
            "delayed is Megatron-core's default"
        )
    if runtime not in RUNTIMES:
        raise SpecError(
            f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}; "
            "megatron for exported Megatron-LM plans, torch for paraplan's executor"
        )
    if attention not in ("flash", "materialized"):
        raise SpecError(f"attention must be 'flash' or 'materialized', got {attention!r}")
    if flash_attention_version not in (2, 3):
        raise SpecError(
            f"flash_attention_version must be 2 or 3, got {flash_attention_version!r}; "
            "2 for stacks before FlashAttention-3-class kernels, 3 for current ones"
        )
    if cross_entropy_fusion not in CROSS_ENTROPY_FUSIONS:
        raise SpecError(
            f"cross_entropy_fusion must be one of {', '.join(CROSS_ENTROPY_FUSIONS)}, got "
            f"{cross_entropy_fusion!r}; te for Transformer Engine's fused loss"
        )
    if main_grad_bytes not in (2, 4):
        raise SpecError(
            f"main_grad_bytes must be 2 (fp16/bf16 buffer) or 4 (fp32), got {main_grad_bytes!r}"
        )


def check_rate_fields(
    *,
    gemm_rate_factor: float,
    fp8_gemm_rate_factor: float | None,
    sustained_gemm_rate_factor: float | None,
    allocator_fragmentation: float | None,
    fp4_gemm_rate_factor: float | None = None,
) -> None:
    """The GEMM rate multipliers, in (0, 1], and the allocator's fragmentation share, in
    [0, 1); None where the field takes a fitted or per-mode default."""
    if not 0.0 < gemm_rate_factor <= 1.0:
        raise SpecError(
            f"gemm_rate_factor must be in (0, 1], got {gemm_rate_factor!r}; it "
            "scales the profile's GEMM efficiency down for an older BLAS library"
        )
    for name, low, recipe in (
        ("fp8_gemm_rate_factor", fp8_gemm_rate_factor, "fp8 GEMM efficiency down for FP8"),
        ("fp4_gemm_rate_factor", fp4_gemm_rate_factor, "fp4 GEMM efficiency down for NVFP4"),
    ):
        if low is not None and not 0.0 < low <= 1.0:
            raise SpecError(
                f"{name} must be in (0, 1] or None, got {low!r}; it scales the profile's "
                f"{recipe} recipe overheads, None takes the fitted default of the profile's "
                "GPU generation"
            )
    sustained = sustained_gemm_rate_factor
    if sustained is not None and not 0.0 < sustained <= 1.0:
        raise SpecError(
            f"sustained_gemm_rate_factor must be in (0, 1] or None, got {sustained!r}; "
            "None takes the fitted default of the profile's GPU generation"
        )
    frag = allocator_fragmentation
    if frag is not None and not 0.0 <= frag < 1.0:
        raise SpecError(
            f"allocator_fragmentation must be in [0, 1) or None, got {frag!r}; None keeps "
            "the allocator mode's default share"
        )


def check_moe_and_overlap_fields(
    *,
    moe_dispatcher: str,
    tp_overlap_rs_method: str,
    moe_load_imbalance: float,
    moe_host_launch_s: float,
    moe_expert_launch_s: float,
    moe_token_device_s: float,
    cuda_graph_scopes: frozenset[str],
) -> None:
    """The MoE dispatch and host-launch fields, the TP overlap method and the CUDA graph
    scopes."""
    if moe_dispatcher not in MOE_DISPATCHERS:
        raise SpecError(
            f"moe_dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got "
            f"{moe_dispatcher!r}; flex stands for the DeepEP and HybridEP backends"
        )
    if tp_overlap_rs_method not in TP_OVERLAP_RS_METHODS:
        raise SpecError(
            f"tp_overlap_rs_method must be one of {', '.join(TP_OVERLAP_RS_METHODS)}, got "
            f"{tp_overlap_rs_method!r}; pipeline is Transformer Engine's default"
        )
    if moe_load_imbalance < 1.0:
        raise SpecError(
            f"moe_load_imbalance must be >= 1 (most loaded rank over the mean), got "
            f"{moe_load_imbalance!r}; 1 is balanced routing"
        )
    unknown_scopes = sorted(cuda_graph_scopes - CUDA_GRAPH_SCOPES)
    if unknown_scopes:
        raise SpecError(
            f"cuda_graph_scopes has unknown names {unknown_scopes}; valid: "
            f"{', '.join(sorted(CUDA_GRAPH_SCOPES))}"
        )
    if moe_host_launch_s < 0.0:
        raise SpecError(
            f"moe_host_launch_s must be >= 0, got {moe_host_launch_s!r}; 0 removes "
            "the host-launch floor of MoE layers"
        )
    if moe_expert_launch_s < 0.0:
        raise SpecError(
            f"moe_expert_launch_s must be >= 0, got {moe_expert_launch_s!r}; 0 prices the "
            "launches Transformer Engine issues per local expert at no host time"
        )
    if moe_token_device_s < 0.0:
        raise SpecError(
            f"moe_token_device_s must be >= 0, got {moe_token_device_s!r}; 0 removes "
            "the MoE layers' fitted device time per token"
        )


def check_plan_features(plan_features: frozenset[str]) -> None:
    """Every name of ``plan_features`` is one of `PLAN_FEATURES`."""
    unknown = sorted(plan_features - PLAN_FEATURES)
    if unknown:
        raise SpecError(
            f"plan_features has unknown names {unknown}; valid: {', '.join(sorted(PLAN_FEATURES))}"
        )


def check_param_gather_engine(param_gather_engine: str, *, runtime: str) -> None:
    """``param_gather_engine`` is one of `PARAM_GATHER_ENGINES`, and DeepSpeed's engine is
    priced by the ``megatron`` runtime only."""
    if param_gather_engine not in PARAM_GATHER_ENGINES:
        raise SpecError(
            f"param_gather_engine must be one of {', '.join(PARAM_GATHER_ENGINES)}, got "
            f"{param_gather_engine!r}; megatron_fsdp is the default"
        )
    if param_gather_engine != "megatron_fsdp" and runtime != "megatron":
        raise SpecError(
            f"param_gather_engine {param_gather_engine!r} is priced by the megatron runtime "
            f"only, got runtime {runtime!r}: set param_gather_engine='megatron_fsdp' or "
            "runtime='megatron'"
        )


def check_megatron_only(
    *, runtime: str, cudnn_norm: bool, precision_aware: bool, fp8_attention: bool = False
) -> None:
    """The options only the ``megatron`` runtime implements are off under another runtime."""
    if cudnn_norm and runtime != "megatron":
        raise SpecError(
            f"cudnn_norm selects Transformer Engine's cuDNN norm kernels; the "
            f"{runtime} runtime runs PyTorch's norms: use runtime='megatron', or drop "
            "cudnn_norm"
        )
    if precision_aware and runtime != "megatron":
        raise SpecError(
            f"precision_aware_optimizer is Megatron-core's (Transformer Engine FusedAdam); "
            f"the {runtime} runtime steps fp32 AdamW: use runtime='megatron', or drop "
            "precision_aware_optimizer"
        )
    if fp8_attention and runtime != "megatron":
        raise SpecError(
            f"[{FP8_ATTENTION_KERNEL_RULE}] fp8_attention is Megatron-core's "
            f"fp8_dot_product_attention (Transformer Engine's FP8 DotProductAttention); the "
            f"{runtime} runtime, paraplan's executor, runs PyTorch's attention in bf16: use "
            "runtime megatron, or drop fp8_attention"
        )


def check_options(options: Any) -> None:
    """Every field rule of an `ExecutionOptions` (its ``__post_init__``), group by group;
    `SpecError` from the first that fails."""
    check_kernel_fields(
        fp8_recipe=options.fp8_recipe,
        runtime=options.runtime,
        attention=options.attention,
        flash_attention_version=options.flash_attention_version,
        cross_entropy_fusion=options.cross_entropy_fusion,
        main_grad_bytes=options.main_grad_bytes,
    )
    check_fp8_attention_kernel(
        options.fp8_attention,
        attention=options.attention,
        flash_attention_version=options.flash_attention_version,
    )
    check_rate_fields(
        gemm_rate_factor=options.gemm_rate_factor,
        fp8_gemm_rate_factor=options.fp8_gemm_rate_factor,
        fp4_gemm_rate_factor=options.fp4_gemm_rate_factor,
        sustained_gemm_rate_factor=options.sustained_gemm_rate_factor,
        allocator_fragmentation=options.allocator_fragmentation,
    )
    check_moe_and_overlap_fields(
        moe_dispatcher=options.moe_dispatcher,
        tp_overlap_rs_method=options.tp_overlap_rs_method,
        moe_load_imbalance=options.moe_load_imbalance,
        moe_host_launch_s=options.moe_host_launch_s,
        moe_expert_launch_s=options.moe_expert_launch_s,
        moe_token_device_s=options.moe_token_device_s,
        cuda_graph_scopes=options.cuda_graph_scopes,
    )
    check_plan_features(options.plan_features)
    check_param_gather_engine(options.param_gather_engine, runtime=options.runtime)
    check_offload_fields(
        options.optimizer_cpu_offload_fraction,
        runtime=options.runtime,
        fp8_param=options.fp8_param,
        fp8_recipe=options.fp8_recipe,
        precision_aware=options.precision_aware_optimizer,
    )
    OptimizerPrecision(  # its __post_init__ checks the optimizer dtype rules
        precision_aware=options.precision_aware_optimizer,
        exp_avg_dtype=options.exp_avg_dtype,
        exp_avg_sq_dtype=options.exp_avg_sq_dtype,
        main_params_dtype=options.main_params_dtype,
    )
    check_megatron_only(
        runtime=options.runtime,
        cudnn_norm=options.cudnn_norm,
        precision_aware=options.precision_aware_optimizer,
        fp8_attention=options.fp8_attention,
    )
    check_bf16_layer_fields(
        first_last_layers_bf16=options.first_last_layers_bf16,
        start=options.num_layers_at_start_in_bf16,
        end=options.num_layers_at_end_in_bf16,
        runtime=options.runtime,
    )
