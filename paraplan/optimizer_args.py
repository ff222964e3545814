"""Megatron-core's optimizer flags beyond the optimizer's name, named as Megatron-LM's
(`megatron/training/arguments.py`):

- CPU offload: ``--optimizer-cpu-offload``, ``--optimizer-offload-fraction`` and
  ``--overlap-cpu-optimizer-d2h-h2d``
  (`costmodel.execution.ExecutionOptions.optimizer_cpu_offload_fraction`,
  ``overlap_cpu_optimizer_d2h_h2d``; `costmodel.optimizer_offload`). A user option: the
  planner never searches it.
- The precision-aware optimizer: ``--use-precision-aware-optimizer`` and the state dtypes
  (`costmodel.optimizer_state`), and what Megatron-core refuses of them.
"""

from __future__ import annotations

import argparse
from typing import Any

from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import optimizer_precision
from costmodel.optimizer_state import (
    MAIN_GRADS_DTYPES,
    MAIN_PARAMS_DTYPES,
    PRECISION_AWARE_RULE,
    STATE_DTYPES,
    precision_aware_unmet,
)
from specs import ParallelPlan
from specs.errors import SpecError
from specs.rules_base import Violation

MEGATRON_OFFLOAD_FRACTION = 1.0
"""Megatron-LM's default ``--optimizer-offload-fraction``: the whole shard on the host."""


def add_optimizer_offload_args(group: argparse._ArgumentGroup) -> None:
    """The optimizer CPU offload flags, added to the recipe settings ``group``."""
    group.add_argument(
        "--optimizer-cpu-offload",
        action="store_true",
        help="fp32 master weights and Adam states of each rank's optimizer shard in host "
        "memory, their Adam step on the CPU (Megatron --optimizer-cpu-offload, with "
        "--use-precision-aware-optimizer; needs --dist-opt)",
    )
    group.add_argument(
        "--optimizer-offload-fraction",
        type=float,
        default=None,
        metavar="F",
        help="with --optimizer-cpu-offload: share of the shard offloaded, in [0, 1] "
        f"(Megatron --optimizer-offload-fraction; default {MEGATRON_OFFLOAD_FRACTION})",
    )
    group.add_argument(
        "--overlap-cpu-optimizer-d2h-h2d",
        action="store_true",
        help="with --optimizer-cpu-offload: gradient and parameter copies overlap the CPU "
        "Adam step parameter by parameter (Megatron --overlap-cpu-optimizer-d2h-h2d); "
        "default: copy, step, copy in series",
    )


def optimizer_offload_fields(args: argparse.Namespace) -> dict[str, Any]:
    """`ExecutionOptions.optimizer_cpu_offload_fraction` and
    ``overlap_cpu_optimizer_d2h_h2d`` of the flags; empty where none is given. `SpecError`
    for a fraction or the overlap without ``--optimizer-cpu-offload`` (Megatron-LM ignores
    them there)."""
    fraction = getattr(args, "optimizer_offload_fraction", None)
    overlap = getattr(args, "overlap_cpu_optimizer_d2h_h2d", False)
    if not getattr(args, "optimizer_cpu_offload", False):
        given = [
            flag
            for flag, on in (
                ("--optimizer-offload-fraction", fraction is not None),
                ("--overlap-cpu-optimizer-d2h-h2d", overlap),
            )
            if on
        ]
        if given:
            raise SpecError(
                f"{' and '.join(given)} set how the optimizer CPU offload runs; add "
                "--optimizer-cpu-offload (without it Megatron-core steps every parameter on "
                "the device)"
            )
        return {}
    return {
        "optimizer_cpu_offload_fraction": (
            MEGATRON_OFFLOAD_FRACTION if fraction is None else fraction
        ),
        "overlap_cpu_optimizer_d2h_h2d": overlap,
    }


def add_optimizer_precision_args(group: argparse._ArgumentGroup) -> None:
    """Megatron-LM's precision-aware optimizer flags, with its names and choices
    (`costmodel.optimizer_state`)."""
    group.add_argument(
        "--use-precision-aware-optimizer",
        action="store_true",
        help="Adam's state in the dtypes below, kept by Transformer Engine's FusedAdam "
        "(Megatron --use-precision-aware-optimizer; needs --dist-opt or --use-megatron-fsdp)",
    )
    for flag, choices, what in (
        ("--exp-avg-dtype", STATE_DTYPES, "Adam's first moment"),
        ("--exp-avg-sq-dtype", STATE_DTYPES, "Adam's second moment"),
        ("--main-params-dtype", MAIN_PARAMS_DTYPES, "the master weights"),
        ("--main-grads-dtype", MAIN_GRADS_DTYPES, "the main gradients (bf16: 2-byte buffer)"),
    ):
        group.add_argument(
            flag,
            choices=choices,
            default=None,
            help=f"with --use-precision-aware-optimizer: storage of {what} (Megatron {flag}; "
            "default fp32)",
        )


def optimizer_precision_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The `ExecutionOptions` fields of the precision-aware optimizer flags; ``--main-grads-dtype
    bf16`` is ``main_grad_bytes`` 2. `SpecError` for a dtype other than fp32 without
    ``--use-precision-aware-optimizer`` (Megatron-core asserts the same)."""
    fields: dict[str, Any] = {}
    if getattr(args, "use_precision_aware_optimizer", False):
        fields["precision_aware_optimizer"] = True
    for name in ("exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    grads = getattr(args, "main_grads_dtype", None)
    if grads is not None and grads != "fp32":
        if "precision_aware_optimizer" not in fields:
            raise SpecError(
                f"--main-grads-dtype {grads} needs --use-precision-aware-optimizer (Megatron-core: "
                "'main_grads_dtype can only be fp32 when not using precision-aware optimizer'); "
                "add it, or use --grad-reduce-in-bf16 for bf16 gradient reduction alone"
            )
        fields["main_grad_bytes"] = 2
    return fields


def precision_aware_violations(plan: ParallelPlan, options: ExecutionOptions) -> list[Violation]:
    """What Megatron-core refuses when ``--use-precision-aware-optimizer`` meets ``plan``
    (`costmodel.optimizer_state.precision_aware_unmet`), as plan violations that `paraplan
    estimate` reports before pricing."""
    unmet = precision_aware_unmet(
        optimizer_precision(options),
        distributed_optimizer=plan.distributed_optimizer,
        megatron_fsdp=plan.use_megatron_fsdp,
    )
    return [] if unmet is None else [Violation(rule=PRECISION_AWARE_RULE, message=unmet)]
