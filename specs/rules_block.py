"""Plan rules of a model with a parallel attention+MLP block (``ModelSpec.layer_block``,
`specs.block_checks`): the plan features whose cost paraplan does not price with that
block's single tensor-parallel reduction.

Each rule follows `specs.rules_base` conventions (a check returning a message, wrapped by
`rule` into a `Violation` whose id is the function name); `specs.rules.RULES` lists them.
"""

from __future__ import annotations

from specs.block_checks import is_parallel_block
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import rule


@rule
def parallel_block_not_with_tp_comm_overlap(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """A parallel block with tp_comm_overlap: Transformer Engine's userbuffers overlap
    each row-parallel GEMM with its own reduce-scatter, while the parallel block reduces
    the sum of two row-parallel GEMMs' outputs once, after both (GPT-NeoX
    ``ParallelTransformerLayer.forward``, ``self.reduce(output)``); no GEMM carries that
    reduction, and paraplan prices no overlap of it."""
    if not plan.tp_comm_overlap or not is_parallel_block(model.layer_block):
        return None
    return (
        f"layer_block ({model.layer_block!r}) with tp_comm_overlap (True): the block's one "
        "reduction of the attention and MLP outputs' sum rides on no GEMM for userbuffers "
        "to overlap; set tp_comm_overlap=False or layer_block='sequential'"
    )


@rule
def parallel_block_not_with_lora(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """A LoRA job on a parallel block: the adapters of the row-parallel layers reduce
    their outputs with their base (Megatron-Bridge ``ParallelLinearAdapter``), a reduction
    the parallel block defers; paraplan prices LoRA on the sequential block only."""
    if job.lora is None or not is_parallel_block(model.layer_block):
        return None
    return (
        f"layer_block ({model.layer_block!r}) with a LoRA job ({job.lora.label()}): LoRA "
        "is priced on the sequential block only; drop --lora-rank or set "
        "layer_block='sequential'"
    )


BLOCK_RULES = (parallel_block_not_with_tp_comm_overlap, parallel_block_not_with_lora)
"""The parallel-block rules in check order."""
