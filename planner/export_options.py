"""The execution options a plan was priced with, as Megatron-LM arguments and torchtitan
keys (`planner.export` adds them to the plan's own).

A plan file records the `costmodel.execution.ExecutionOptions` fields that differ from
Megatron-LM's defaults (`costmodel.execution_record`); a field at its default needs no
argument. Which fields are exported, pricing only or not expressible:
`planner.export_fields`.

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
from planner.export_fields import (
    BF16_LAYER_FIELDS,
    FP4_FIELDS,
    FP8_FIELDS,
    MEGATRON_EXPORTED,
    MEGATRON_UNEXPRESSIBLE,
    MOE_FIELDS,
    PRICING_FIELDS,
)
from planner.export_userbuffers import userbuffers_arguments
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

RULE = "export_execution_options"
"""Rule name in the refusal messages of this module."""


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
