"""Whole nodes: torchrun starts ``--nnodes`` x ``--nproc-per-node`` ranks, so a launch line
starts another world size than a plan's when its GPUs do not fill whole nodes. `export`
refuses such a plan; `plan` says so before it searches one.

Imports nothing beyond the standard library.
"""

from __future__ import annotations


def partial_nodes_problem(num_gpus: int, gpus_per_node: int) -> str | None:
    """Why ``num_gpus`` ranks on nodes of ``gpus_per_node`` make no torchrun launch line,
    with the fix (the ``--gpus-per-node`` values that divide them, or a multiple of the
    node); None when they fill whole nodes (one node holding fewer GPUs is whole)."""
    if num_gpus <= gpus_per_node or num_gpus % gpus_per_node == 0:
        return None
    fits = [d for d in range(1, gpus_per_node + 1) if num_gpus % d == 0]
    nodes = -(-num_gpus // gpus_per_node)
    return (
        f"the plan's {num_gpus} GPUs do not fill whole nodes of {gpus_per_node} GPUs: torchrun "
        f"would start {nodes} x {gpus_per_node} = {nodes * gpus_per_node} ranks; give "
        f"--gpus-per-node {fits[-1]} (GPUs per node that divide {num_gpus}: "
        f"{', '.join(map(str, fits))}), or re-plan on a multiple of {gpus_per_node} GPUs"
    )
