"""The runtime flag (`add_runtime_arg`) and the recipe settings of a Megatron launch that are
not plan degrees (`add_recipe_args`), and their conversion into `ExecutionOptions`
(`options_from_args`).

The recipe groups of one subject are their own modules (`paraplan.fp8_args`,
`optimizer_args`, `time_args`); this one adds them and merges their fields. The conversion
only parses: `ExecutionOptions` checks the values (`SpecError`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import runtime_options
from costmodel.execution_rules import RUNTIMES
from costmodel.memory_allowances import FP8_RECIPES
from paraplan.fp8_args import (
    add_bf16_layer_args,
    add_fp8_attention_arg,
    bf16_layer_fields,
    fp8_attention_fields,
)
from paraplan.optimizer_args import (
    add_optimizer_offload_args,
    add_optimizer_precision_args,
    optimizer_offload_fields,
    optimizer_precision_fields,
)
from paraplan.time_args import add_time_recipe_args, time_option_fields
from specs.errors import SpecError

CROSS_ENTROPY_IMPLS = ("native", "te", "te_fp32_grad")
"""Choices of ``--cross-entropy-fusion-impl``: Megatron-core's ``cross_entropy_fusion_impl``
(``native``, ``te``) with ``te`` split by the Transformer Engine release
(`costmodel.vocab_activations.logits_element_bytes`)."""


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
    add_bf16_layer_args(group)
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
    changes.update(bf16_layer_fields(args))
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
