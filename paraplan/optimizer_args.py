"""Megatron-core's optimizer CPU offload flags, named as Megatron-LM's
(`megatron/training/arguments.py`): ``--optimizer-cpu-offload``,
``--optimizer-offload-fraction`` and ``--overlap-cpu-optimizer-d2h-h2d``
(`costmodel.execution.ExecutionOptions.optimizer_cpu_offload_fraction`,
``overlap_cpu_optimizer_d2h_h2d``; `costmodel.optimizer_offload`). A user option: the
planner never searches it.
"""

from __future__ import annotations

import argparse
from typing import Any

from specs.errors import SpecError

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
