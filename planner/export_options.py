"""The execution options a plan was priced with, as Megatron-LM arguments and torchtitan
keys (`planner.export` adds them to the plan's own).

A plan file records the `costmodel.execution.ExecutionOptions` fields that differ from
Megatron-LM's defaults (`costmodel.execution_record`); a field at its default needs no
argument. Every field is in one of three groups, which `tests/planner/test_export_options.py`
checks cover the dataclass:

- **exported** (`MEGATRON_EXPORTED`): the Megatron-LM argument of the same meaning, spelled
  as `megatron/training/arguments.py` of NVIDIA/Megatron-LM (snapshot d98e8a64) has it or
  generates it from a `TransformerConfig` field (`megatron/training/argument_utils.py`:
  ``--field-name``, ``--no-field-name`` for a bool that defaults to True). The paraplan
  command line takes the same spellings for the fields it sets (`paraplan.recipe_args`,
  `paraplan.time_args`, `paraplan.optimizer_args`), and `bench/cli_parity.py` writes its
  command lines with the functions below, so the names live here once. Three fields become
  environment variables of the launch (`megatron_option_environment`); the userbuffers
  settings become a YAML file that the launch snippet writes for ``--tp-comm-overlap-cfg``
  (`planner.export_userbuffers`).
- **pricing only** (`PRICING_FIELDS`): fitted factors and descriptions of the hardware,
  the software stack or the data, which no training argument sets; the export leaves them
  out (the plan's header comment names a non-default FlashAttention generation).
- **not expressible** (`MEGATRON_UNEXPRESSIBLE`): behaviour of older Megatron-LM code or of
  paraplan's own executor, and Megatron-core settings that Megatron-LM's command line cannot
  reach (``fp8_dot_product_attention``); a plan priced
  with one of them is refused (`SpecError` naming the field, its value, why and the fix),
  never exported as something else. So are value combinations Megatron-LM rejects
  (`megatron_option_refusals`).

Megatron-LM requires ``--no-check-for-nan-in-loss-and-grad`` with
``--cuda-graph-impl full_iteration`` (arguments.py); the export adds it, so such a run skips
the NaN check of each gradient bucket that the estimate priced (a memory-bound pass over the
gradients), and says so in a comment of the launch snippet.

torchtitan (`planner.export_torchtitan.torchtitan_option_config`, from the groups above):
its job config has FP8 linear layers (``[quantize.linear.float8]``: ``recipe_name``
``tensorwise``, ``enable_fsdp_float8_all_gather`` under FSDP;
`torchtitan/config/job_config.py` ``Float8Linear``), and any runtime; every other
non-default exported or unexpressible field is refused, FP8 attention with its own reason
(the job config's quantization converts linear layers, not attention).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from costmodel.bf16_layer_rules import LOW_PRECISIONS, bf16_layer_counts
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.execution_record import RECORD_KEY, options_from_record
from planner.export_userbuffers import userbuffers_arguments
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

RULE = "export_execution_options"
"""Rule name in the refusal messages of this module."""

PRICING_FIELDS: dict[str, str] = {
    "gemm_rate_factor": "a rate factor of the BLAS library the priced stack links",
    "fp8_gemm_rate_factor": "a rate factor fitted on published FP8 runs",
    "fp4_gemm_rate_factor": "a rate factor fitted on published NVFP4 runs",
    "sustained_gemm_rate_factor": "a rate factor fitted on published runs",
    "moe_host_launch_s": "a host cost per kernel launch fitted on published runs",
    "moe_expert_launch_s": "a host cost per per-expert kernel launch of Transformer Engine",
    "moe_token_device_s": "a device time per token fitted on published runs",
    "moe_load_imbalance": "the routing the data produces, not a setting",
    "allocator_fragmentation": "an allowance of the memory model",
    "fp8_tn_gemm_only": "a property of the GPU",
    "flash_attention_version": "the generation of the attention kernels installed",
    "plan_features": "the plans the search considered; no plan's cost reads it",
}
"""ExecutionOptions fields that are paraplan pricing knobs, not training arguments, with
what each describes; no export writes them."""

MEGATRON_UNEXPRESSIBLE: dict[str, str] = {
    "runtime": "the plan was priced as paraplan's executor, not Megatron-core: re-plan with "
    "--runtime megatron, or run it with `paraplan execute`",
    "bias_fusion": "Megatron-LM with Transformer Engine always adds linear biases in the GEMM "
    "epilogues: price with the current defaults (not MEGATRON_2021/2023)",
    "two_pass_norm_backward": "apex FusedLayerNorm of Megatron-LM 2021-2023 has no argument "
    "today: price with the current defaults",
    "loss_scaling": "fp16 loss scaling needs --fp16, which the job's precision does not say: "
    "price with the current defaults",
    "pipeline_scatter_gather": "--scatter-gather-tensors-in-pipeline was removed from "
    "Megatron-LM: price with the current defaults",
    "deallocate_pipeline_outputs": "Megatron-core always frees sent pipeline outputs: price "
    "with the current defaults",
    "tp_dgrad_overlap": "Megatron-core always overlaps the input-gradient reduction: price "
    "with the current defaults",
    "ddp_gradient_copy": "Megatron-LM no longer runs PyTorch DDP: price with the current defaults",
    "step_gradient_copy": "the fp32 gradient copy of Megatron-LM 2021's optimizer step has "
    "no argument: price with the current defaults",
    "stale_main_grad": "local DDP without contiguous buffers (Megatron-LM 2021) has no "
    "argument: price with the current defaults",
    "fp8_attention": "Megatron-LM's arguments.py generates no flag for TransformerConfig."
    "fp8_dot_product_attention (it lists the field among those with no CLI argument, snapshot "
    "d98e8a64; Megatron-Bridge recipes set it in their configs): re-plan with "
    "--no-fp8-attention, or run the plan through Megatron-Bridge with "
    "fp8_dot_product_attention=True",
}
"""ExecutionOptions fields no current Megatron-LM argument sets, with why and the fix; a
plan priced with one of them at another value than the default is refused."""

MEGATRON_EXPORTED: frozenset[str] = frozenset(
    {
        "attention",
        "grad_accumulation_fusion",
        "hidden_dropout",
        "main_grad_bytes",
        "overlap_p2p",
        "grad_nan_check",
        "moe_dispatcher",
        "moe_a2a_overlap",
        "moe_fused_grouped_mlp",
        "cuda_graph_scopes",
        "cross_entropy_fusion",
        "expandable_segments",
        "cudnn_norm",
        "fp8_recipe",
        "fp8_param",
        "fp4_param",
        "first_last_layers_bf16",
        "num_layers_at_start_in_bf16",
        "num_layers_at_end_in_bf16",
        "rope_fusion",
        "precision_aware_optimizer",
        "exp_avg_dtype",
        "exp_avg_sq_dtype",
        "main_params_dtype",
        "optimizer_cpu_offload_fraction",
        "overlap_cpu_optimizer_d2h_h2d",
        "tp_overlap_rs_method",
        "tp_overlap_bulk_sm_margin",
        "tp_overlap_pipeline_sm_margin",
    }
)
"""ExecutionOptions fields with a Megatron-LM argument or launch environment variable."""

MOE_FIELDS = ("moe_dispatcher", "moe_a2a_overlap", "moe_fused_grouped_mlp")
"""Exported fields that only a MoE model's layers read."""

FP8_FIELDS = ("fp8_recipe", "fp8_param")
"""Exported fields that only an fp8 job reads."""

FP4_FIELDS = ("fp4_param",)
"""Exported fields that only an nvfp4 job reads."""

BF16_LAYER_FIELDS = (
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
)
"""Exported fields that only an fp8 or nvfp4 job reads (`costmodel.bf16_layers`)."""


def bundle_options(bundle: PlanBundle) -> ExecutionOptions:
    """The execution options ``bundle``'s plan was priced with (its ``execution`` record;
    `DEFAULT_OPTIONS` for a plan file without one)."""
    return options_from_record(bundle.execution, where=f"plan file {RECORD_KEY!r}")


def changed_fields(options: ExecutionOptions) -> list[str]:
    """Names of the fields of ``options`` that differ from `DEFAULT_OPTIONS`."""
    return [
        f.name
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != getattr(DEFAULT_OPTIONS, f.name)
    ]


def refusal(field: str, value: Any, why: str) -> str:
    """One refusal line: the field, its value and why (with the fix)."""
    return f"{field}={value!r}: {why}"


def refused(target: str, lines: list[str]) -> SpecError:
    """The error of an export that cannot state every priced option."""
    return SpecError(
        f"[{RULE}] the plan was priced with execution options that {target} cannot take: "
        + "; ".join(lines)
    )


def megatron_option_refusals(
    options: ExecutionOptions, model: ModelSpec, job: TrainingJob, plan: ParallelPlan
) -> list[str]:
    """Why each priced option of ``options`` cannot become a Megatron-LM argument for this
    model, job and plan (`refusal` lines); empty when all can."""
    changed = changed_fields(options)
    lines = [
        refusal(name, getattr(options, name), MEGATRON_UNEXPRESSIBLE[name])
        for name in changed
        if name in MEGATRON_UNEXPRESSIBLE
    ]
    unknown = [n for n in changed if n not in MEGATRON_EXPORTED | set(PRICING_FIELDS)]
    lines += [
        refusal(n, getattr(options, n), "this paraplan has no export rule for it: export with "
                "a paraplan that has one, or re-plan without it")
        for n in unknown
    ]  # fmt: skip
    if options.cross_entropy_fusion in ("te", "te_fp32_grad"):
        why = (
            "Megatron-LM's arguments.py rejects --cross-entropy-fusion-impl te ('disabled due "
            "to stability issues'): re-plan with --cross-entropy-fusion-impl native, or run "
            "the plan through Megatron-Bridge"
        )
        lines.append(refusal("cross_entropy_fusion", options.cross_entropy_fusion, why))
    for needs, fields, fix in (
        ("fp8", FP8_FIELDS, "--precision fp8 or without the FP8 flags"),
        ("nvfp4", FP4_FIELDS, "--precision nvfp4 or without them"),
    ):
        if job.precision != needs:
            why = (
                f"{needs.upper()} settings need an {needs} job, the job is {job.precision}: "
                f"re-plan with {fix}"
            )
            lines += [refusal(n, getattr(options, n), why) for n in fields if n in changed]
    if job.precision not in LOW_PRECISIONS:
        why = (
            f"layers kept in bf16 need an fp8 or nvfp4 job, the job is {job.precision}: "
            "re-plan with --precision fp8 or nvfp4, or without --first-last-layers-bf16"
        )
        lines += [refusal(n, getattr(options, n), why) for n in BF16_LAYER_FIELDS if n in changed]
    if (
        job.precision == "fp8"
        and options.fp8_param
        and not (plan.distributed_optimizer or plan.use_megatron_fsdp)
    ):
        why = (
            "Megatron-LM takes --fp8-param-gather only with the distributed optimizer or "
            "Megatron-FSDP: re-plan with --dist-opt or --use-megatron-fsdp"
        )
        lines.append(refusal("fp8_param", True, why))
    if options.main_grad_bytes == 2 and job.precision == "fp32":
        why = "bf16 gradients need bf16 parameters, the job is fp32: re-plan with --precision bf16"
        lines.append(refusal("main_grad_bytes", 2, why))
    if not model.is_moe:
        why = f"{model.name} has no experts: re-plan without the MoE flags"
        lines += [refusal(n, getattr(options, n), why) for n in MOE_FIELDS if n in changed]
    return lines


def kernel_arguments(options: ExecutionOptions) -> list[str]:
    """Attention backend, fusions, dropout, pipeline-send overlap and the NaN check.

    Dropout is always stated: Megatron-LM's ``--hidden-dropout`` and ``--attention-dropout``
    default to 0.1 (`megatron/training/arguments.py`), while the estimate prices the
    residual dropout only where `ExecutionOptions.hidden_dropout` is set and attention
    dropout nowhere; without dropout both are exported as 0."""
    args = []
    if options.attention == "materialized":
        args += ["--attention-backend", "unfused"]
    if not options.grad_accumulation_fusion:
        args.append("--no-gradient-accumulation-fusion")
    if not options.rope_fusion:
        args.append("--no-rope-fusion")
    if options.hidden_dropout:
        args += ["--hidden-dropout", "0.1"]  # Megatron-LM's default rate
    else:
        # Megatron-LM applies 0.1 to both unless told otherwise; the estimate priced none.
        args += ["--hidden-dropout", "0.0", "--attention-dropout", "0.0"]
    if not options.overlap_p2p:
        args.append("--no-overlap-p2p-communication")
    if not options.grad_nan_check:
        args.append("--no-check-for-nan-in-loss-and-grad")
    return args


def fp8_arguments(options: ExecutionOptions) -> list[str]:
    """``--fp8-recipe`` where it is not Megatron-core's default, ``--fp8-param-gather``, and
    the layers kept in bf16: ``--first-last-layers-bf16`` with both counts stated
    (``--num-layers-at-start-in-bf16``, ``--num-layers-at-end-in-bf16``, Megatron-LM's
    arguments of ``TransformerConfig``'s fields; Megatron-core reads them in fp8 and fp4
    runs alike)."""
    args = []
    if options.fp8_recipe != DEFAULT_OPTIONS.fp8_recipe:
        args += ["--fp8-recipe", options.fp8_recipe]
    if options.fp8_param:
        args.append("--fp8-param-gather")
    if options.first_last_layers_bf16:
        start, end = bf16_layer_counts(options)
        args += ["--first-last-layers-bf16"]
        args += [
            "--num-layers-at-start-in-bf16",
            str(start),
            "--num-layers-at-end-in-bf16",
            str(end),
        ]
    return args


def precision_arguments(options: ExecutionOptions, job: TrainingJob) -> list[str]:
    """Megatron-LM's precision flags of ``job``: ``--bf16``; fp8 adds ``--fp8-format hybrid``;
    nvfp4 adds ``--fp4-format e2m1 --fp4-recipe nvfp4`` (``TransformerConfig.fp4`` and
    ``fp4_recipe``; Transformer Engine >= 2.7.0.dev0, never with ``--fp8-format``:
    ``megatron/training/arguments.py``) and ``--fp4-param-gather`` with
    `ExecutionOptions.fp4_param` (Megatron-Bridge's ``bf16_with_nvfp4_mixed``); fp32 none."""
    if job.precision == "fp32":
        return []
    if job.precision == "fp8":
        return ["--bf16", "--fp8-format", "hybrid"]
    if job.precision == "nvfp4":
        args = ["--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
        return args + (["--fp4-param-gather"] if options.fp4_param else [])
    return ["--bf16"]


def gradient_arguments(options: ExecutionOptions) -> list[str]:
    """bf16 main gradients: ``--grad-reduce-in-bf16``, and ``--main-grads-dtype bf16`` with
    the precision-aware optimizer (which reads its gradients in that dtype)."""
    if options.main_grad_bytes != 2:
        return []
    if options.precision_aware_optimizer:
        return ["--grad-reduce-in-bf16", "--main-grads-dtype", "bf16"]
    return ["--grad-reduce-in-bf16"]


def optimizer_precision_arguments(options: ExecutionOptions) -> list[str]:
    """``--use-precision-aware-optimizer`` and each of ``--exp-avg-dtype``,
    ``--exp-avg-sq-dtype`` and ``--main-params-dtype`` that is not fp32."""
    if not options.precision_aware_optimizer:
        return []
    args = ["--use-precision-aware-optimizer"]
    for name in ("exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype"):
        if getattr(options, name) != "fp32":
            args += ["--" + name.replace("_", "-"), getattr(options, name)]
    return args


def optimizer_offload_arguments(options: ExecutionOptions) -> list[str]:
    """``--optimizer-cpu-offload --optimizer-offload-fraction F`` and
    ``--overlap-cpu-optimizer-d2h-h2d``; none without offload."""
    fraction = options.optimizer_cpu_offload_fraction
    if fraction == 0:
        return []
    args = ["--optimizer-cpu-offload", "--optimizer-offload-fraction", repr(fraction)]
    return args + (
        ["--overlap-cpu-optimizer-d2h-h2d"] if options.overlap_cpu_optimizer_d2h_h2d else []
    )


def cross_entropy_arguments(options: ExecutionOptions) -> list[str]:
    """``--cross-entropy-loss-fusion --cross-entropy-fusion-impl IMPL`` for a fused loss."""
    if options.cross_entropy_fusion == "unfused":
        return []
    impl = options.cross_entropy_fusion
    return ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", impl]


def cuda_graph_arguments(scopes: frozenset[str]) -> list[str]:
    """``--cuda-graph-impl`` and ``--cuda-graph-modules`` of
    `ExecutionOptions.cuda_graph_scopes`: none when eager; Megatron-core's ``local`` graphs
    of whole layers (its empty module list); ``full_iteration``; else Transformer Engine's
    graphs of the named parts (the Megatron-Bridge recipes' ``transformer_engine``)."""
    if not scopes:
        return []
    if scopes == {"layer"}:
        return ["--cuda-graph-impl", "local"]
    if scopes == {"full_iteration"}:
        return ["--cuda-graph-impl", "full_iteration"]
    return ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", *sorted(scopes)]


def moe_option_arguments(options: ExecutionOptions) -> list[str]:
    """The all-to-all overlap (with ``--delay-wgrad-compute``, as priced) and Transformer
    Engine's operation fuser of the fused grouped MLP; the dispatcher is among the model's
    MoE arguments (`planner.export_model`)."""
    args = []
    if options.moe_a2a_overlap:
        args += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if options.moe_fused_grouped_mlp:
        args.append("--use-transformer-engine-op-fuser")
    return args


def megatron_option_arguments(
    options: ExecutionOptions, model: ModelSpec, job: TrainingJob, plan: ParallelPlan
) -> list[str]:
    """The Megatron-LM arguments of ``options``; `SpecError` listing every priced option
    Megatron-LM cannot take (`megatron_option_refusals`)."""
    lines = megatron_option_refusals(options, model, job, plan)
    if lines:
        raise refused("Megatron-LM", lines)
    args = kernel_arguments(options) + fp8_arguments(options) + gradient_arguments(options)
    if model.uses_dsa:  # planner.export_model.dsa_arguments states it, whatever the options say
        args = [a for a in args if a != "--no-rope-fusion"]
    args += optimizer_precision_arguments(options) + optimizer_offload_arguments(options)
    args += cross_entropy_arguments(options) + moe_option_arguments(options)
    args += cuda_graph_arguments(options.cuda_graph_scopes)
    args += userbuffers_arguments(options, plan)
    if "full_iteration" in options.cuda_graph_scopes and options.grad_nan_check:
        args.append("--no-check-for-nan-in-loss-and-grad")  # arguments.py asserts it
    return args


def megatron_option_environment(options: ExecutionOptions) -> dict[str, str]:
    """Environment of the launch: PyTorch's expandable segments, Transformer Engine's switch
    of the fused grouped MLP (read when TE is imported) and its cuDNN norm backend, forward
    and backward (`ExecutionOptions.cudnn_norm`; TE ``common/normalization/common.cpp``
    reads ``NVTE_NORM_FWD_USE_CUDNN`` and ``NVTE_NORM_BWD_USE_CUDNN`` once per process)."""
    env = {}
    if options.expandable_segments:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if options.moe_fused_grouped_mlp:
        env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1"
    if options.cudnn_norm:
        env["NVTE_NORM_FWD_USE_CUDNN"] = "1"
        env["NVTE_NORM_BWD_USE_CUDNN"] = "1"
    return env


def megatron_option_notes(options: ExecutionOptions) -> list[str]:
    """Comment lines of the launch snippet for what the estimate assumed beyond the
    arguments: a FlashAttention generation other than 3, the NaN check that full-iteration
    graphs turn off."""
    notes = []
    if options.flash_attention_version != DEFAULT_OPTIONS.flash_attention_version:
        notes.append(
            f"priced with FlashAttention-{options.flash_attention_version}-class attention "
            "kernels: run a stack that has them"
        )
    if "full_iteration" in options.cuda_graph_scopes and options.grad_nan_check:
        notes.append(
            "--cuda-graph-impl full_iteration needs --no-check-for-nan-in-loss-and-grad; the "
            "estimate priced the check"
        )
    return notes
