"""Plan rules of DeepSeek sparse attention (``ModelSpec.dsa_indexer_*``, `specs.dsa_checks`).

Sources (Megatron-LM):

- ``megatron/core/transformer/transformer_config.py`` `TransformerConfig.__post_init__`:
  with ``experimental_attention_variant == "dsa"`` and cp > 1, every ``cp_comm_type`` must
  be ``allgather`` ("DSAttention context parallelism currently supports
  cp_comm_type=allgather only"): each cp rank gathers the whole sequence's keys for the
  indexer and the sparse core (`dsa_context_parallel_all_gather`).
- ``experimental_attention_variant/absorbed_mla.py`` `AbsorbedMLASelfAttention.__init__`
  asserts "AbsorbedMLA requires sequence_parallel when tensor_model_parallel_size > 1"
  (`dsa_tp_needs_sequence_parallel`).
- ``megatron/core/models/gpt/experimental_attention_variant_module_specs.py``
  `_validate_dsa_index_share_pipeline_split`: with index sharing, a layer that reuses
  another's top-k must find that layer earlier in its own pipeline chunk ("Cross-layer
  top-k sharing does not cross PP boundaries"; `dsa_index_share_within_chunk`).

Each rule follows `specs.rules_base` conventions; `specs.rules.RULES` lists them.
"""

from __future__ import annotations

from specs.cluster import ClusterSpec
from specs.dsa_checks import computes_topk, topk_source_layer
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.pipeline_split import pipeline_split
from specs.pipeline_split_checks import split_problem
from specs.plan import ParallelPlan
from specs.rules_base import rule


@rule
def dsa_context_parallel_all_gather(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """cp_comm_type 'all_gather' for DSA at cp > 1 (TransformerConfig asserts it)."""
    if not model.uses_dsa or plan.cp == 1 or plan.cp_comm_type == "all_gather":
        return None
    return (
        f"DeepSeek sparse attention at cp {plan.cp} runs only with cp_comm_type 'all_gather' "
        f"(got {plan.cp_comm_type!r}; Megatron's TransformerConfig asserts it): set "
        "cp_comm_type='all_gather', or cp=1"
    )


@rule
def dsa_tp_needs_sequence_parallel(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """sequence_parallel for DSA at tp > 1 (AbsorbedMLASelfAttention asserts it)."""
    if not model.uses_dsa or plan.tp == 1 or plan.sequence_parallel:
        return None
    return (
        f"DeepSeek sparse attention at tp {plan.tp} needs sequence_parallel "
        "(Megatron's AbsorbedMLASelfAttention asserts it): set sequence_parallel=True, or tp=1"
    )


@rule
def dsa_index_share_within_chunk(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Each layer that reuses a top-k (index sharing) sits in the pipeline chunk of the
    layer that computes it, after it (`_validate_dsa_index_share_pipeline_split`)."""
    if not model.uses_dsa or model.dsa_indexer_topk_freq == 1:
        return None
    if split_problem(model, plan) is not None:  # the split's own rules report it
        return None
    freq, offset = model.dsa_indexer_topk_freq, model.dsa_indexer_skip_topk_offset
    for chunk in pipeline_split(model, plan).in_forward_order():
        for index in chunk.layers:
            number = index + 1
            if computes_topk(number, freq, offset):
                continue
            source = topk_source_layer(number, freq, offset)
            if source - 1 not in chunk.layers:
                return (
                    f"layer {number} reuses the top-k of layer {source} "
                    f"(dsa_indexer_topk_freq {freq}, dsa_indexer_skip_topk_offset {offset}), "
                    f"which is not in its pipeline chunk (pp rank {chunk.pp_rank}, chunk "
                    f"{chunk.chunk}: layers {chunk.layers.start + 1}..{chunk.layers.stop}); "
                    "Megatron refuses top-k sharing across pipeline chunks: choose a split "
                    "(pipeline layout or first/last stage sizes) whose chunks start on a "
                    "layer that computes its top-k"
                )
    return None


DSA_RULES = (
    dsa_context_parallel_all_gather,
    dsa_tp_needs_sequence_parallel,
    dsa_index_share_within_chunk,
)
"""The DeepSeek-sparse-attention plan rules in check order."""
