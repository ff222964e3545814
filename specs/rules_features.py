"""Plan rules for features the plan switches on: context and sequence parallelism (a hybrid
model's Mamba-2 split under cp is `specs.rules_hybrid`'s), the overlap switches, activation
recomputation, and the position table against the sequence length.

Each rule follows `specs.rules_base` conventions (a check returning a message, wrapped by
`rule` into a `Violation` whose id is the function name); `specs.rules.RULES` lists them.
"""

from __future__ import annotations

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.pipeline_split import pipeline_split
from specs.pipeline_split_checks import split_problem
from specs.plan import ParallelPlan
from specs.rules_base import degree_choices, multiples_around, ratio, rule

# ---- sequence: context and sequence parallelism ------------------------------------------


@rule
def seq_divisible_by_2cp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """cp > 1 needs seq_length % (2·cp) == 0: load-balanced CP cuts the sequence into 2·cp
    chunks (Megatron validate_args; megatron-facts.md §7.1, §8.3 rule 8)."""
    seq, cp = job.seq_length, plan.cp
    if cp == 1 or seq % (2 * cp) == 0:
        return None
    options = degree_choices(seq, cp, cluster.num_gpus, keep=lambda c: c == 1 or seq % (2 * c) == 0)
    return (
        f"seq_length ({seq}) must be divisible by 2 · cp ({cp}) = {2 * cp} "
        f"(zigzag CP gives each rank 2 of 2·cp chunks; here {ratio(seq, 2 * cp)} tokens per "
        f"chunk): try cp in {options} or seq_length in {multiples_around(seq, 2 * cp)}"
    )


@rule
def packed_document_divisible_by_2cp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """cp > 1 with packed sequences needs packed_document_tokens % (2·cp) == 0: Megatron-core
    cuts each document, not the packed sequence, into 2·cp chunks and gives each rank two
    (``_get_batch_on_this_cp_rank_per_document_balancing`` in ``megatron/core/utils.py``,
    Transformer Engine ``thd_get_partitioned_indices``: "each document length must be
    divisible by 2 * cp_size"), so the packer pads every document to a multiple of 2·cp and
    the document length states that padded length."""
    doc, cp = job.packed_document_tokens, plan.cp
    if doc is None or cp == 1 or doc % (2 * cp) == 0:
        return None
    return (
        f"packed_document_tokens ({doc}) must be divisible by 2 · cp ({cp}) = {2 * cp} "
        f"(per-document zigzag CP pads each document to a multiple of 2·cp): pass the padded "
        f"length, one of {multiples_around(doc, 2 * cp)}, or a smaller cp"
    )


@rule
def sequence_parallel_needs_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """sequence_parallel needs tp > 1 (`ModelParallelConfig` raises; Megatron's training
    arguments drop it silently at tp == 1; megatron-facts.md §6, §8.3 rule 10)."""
    if not plan.sequence_parallel or plan.tp > 1:
        return None
    return (
        f"sequence_parallel (True) shards activations over the tp group and needs tp > 1, "
        f"got tp ({plan.tp}): set sequence_parallel=False or tp > 1"
    )


@rule
def sequence_parallel_seq_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """With sequence parallelism the tokens of one CP rank, seq_length / cp, are split over
    tp ranks along the sequence (Megatron's `_split_along_first_dim` asserts the first
    dimension divides by the TP size; megatron-facts.md §6)."""
    seq, cp, tp = job.seq_length, plan.cp, plan.tp
    if not plan.sequence_parallel or tp == 1 or seq % cp or (seq // cp) % tp == 0:
        return None
    local = seq // cp
    return (
        f"with sequence_parallel, seq_length ({seq}) / cp ({cp}) = {local} tokens per CP rank "
        f"must be divisible by tp ({tp}) ({ratio(local, tp)} tokens per rank): try tp in "
        f"{degree_choices(local, tp, cluster.num_gpus)} or seq_length in "
        f"{multiples_around(seq, cp * tp)}"
    )


# ---- overlap switches ----------------------------------------------------------------


@rule
def tp_comm_overlap_needs_sequence_parallel(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """tp_comm_overlap needs sequence_parallel (assert in Megatron validate_args;
    megatron-facts.md §6, §8.3 rule 10)."""
    if not plan.tp_comm_overlap or plan.sequence_parallel:
        return None
    fix = "set sequence_parallel=True" if plan.tp > 1 else "set tp_comm_overlap=False (tp is 1)"
    return (
        f"tp_comm_overlap (True) pipelines the sequence-parallel all-gather/reduce-scatter "
        f"with GEMMs and needs sequence_parallel, got sequence_parallel (False): {fix}"
    )


@rule
def tp_comm_overlap_not_with_nvfp4(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """tp_comm_overlap does not run with nvfp4: Megatron-LM registers 16-bit userbuffers
    when ``--fp8-format`` is unset (``_initialize_tp_communicators``,
    `megatron/training/initialize.py`: ``UserBufferQuantizationMode.FP8 if args.fp8``),
    while Transformer Engine's modules under the NVFP4 recipe ask for FP8 ones
    (``get_ub(name, fp8)``), and TE's ``fill_userbuffers_buffer_for_all_gather``
    (`pytorch/module/base.py`, v2.5 to the 2026-08 HEAD) raises "Unsupported quantizer for
    Userbuffers" for an ``NVFP4Quantizer``."""
    if not plan.tp_comm_overlap or job.precision != "nvfp4":
        return None
    return (
        f"tp_comm_overlap (True) with precision ({job.precision}): Transformer Engine's "
        f"userbuffers have no NVFP4 all-gather; set tp_comm_overlap=False or precision='fp8'"
    )


@rule
def overlap_param_gather_needs_distributed_optimizer(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """overlap_param_gather needs distributed_optimizer or Megatron-FSDP: only a sharded
    optimizer all-gathers parameters (megatron-facts.md §5.3, §8.3 rule 9)."""
    if not plan.overlap_param_gather or plan.distributed_optimizer or plan.use_megatron_fsdp:
        return None
    if job.optimizer == "dist_muon":
        # Megatron-LM also takes it with dist_muon; the cost model prices dist_muon's
        # layer-wise gather after the step only (costmodel.optimizer_muon.layerwise_gather_s)
        return (
            "overlap_param_gather (True) with optimizer (dist_muon): paraplan prices "
            "dist_muon's layer-wise parameter all-gather after the step, not overlapped; set "
            "overlap_param_gather=False (Muon excludes the distributed optimizer and "
            "Megatron-FSDP)"
        )
    return (
        "overlap_param_gather (True) overlaps the parameter all-gather of the distributed "
        "optimizer, got distributed_optimizer (False): set distributed_optimizer=True, "
        "use_megatron_fsdp=True or overlap_param_gather=False"
    )


@rule
def overlap_param_gather_needs_overlap_grad_reduce(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """overlap_param_gather needs overlap_grad_reduce (megatron-facts.md §5.3, §8.3 rule 9)."""
    if not plan.overlap_param_gather or plan.overlap_grad_reduce:
        return None
    return (
        "overlap_param_gather (True) needs overlap_grad_reduce, got overlap_grad_reduce "
        "(False): set overlap_grad_reduce=True or overlap_param_gather=False"
    )


# ---- activation recomputation ----------------------------------------------------------


@rule
def recompute_num_layers_needs_full(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """recompute_num_layers only applies to full recompute (Megatron rejects
    `--recompute-num-layers` with selective granularity; megatron-facts.md §8.3 rules 11, 15)."""
    if plan.recompute_num_layers is None or plan.recompute == "full":
        return None
    return (
        f"recompute_num_layers ({plan.recompute_num_layers}) applies only to full recompute, "
        f"got recompute ('{plan.recompute}'): set recompute='full' or recompute_num_layers=None"
    )


@rule
def recompute_num_layers_within_chunk(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """recompute_num_layers <= the layers of the largest pipeline chunk (num_layers / (pp·vpp)
    for the even split; `specs.pipeline_split` otherwise): Megatron counts recomputed
    layers inside each model chunk (`--recompute-num-layers`)."""
    count = plan.recompute_num_layers
    if plan.recompute != "full" or count is None or split_problem(model, plan) is not None:
        return None
    split = pipeline_split(model, plan)
    per_chunk = max(c.num_layers for rank in split.chunks for c in rank)
    if count <= per_chunk:
        return None
    where = (
        f"num_layers ({model.num_layers}) / (pp ({plan.pp}) · vpp ({plan.vpp})) = {per_chunk}"
        if not plan.has_uneven_split
        else f"the largest chunk of the uneven split ({plan.split_label()}) holds {per_chunk}"
    )
    return (
        f"recompute_num_layers ({count}) must not exceed the layers per pipeline chunk, "
        f"{where}: set recompute_num_layers <= {per_chunk} (or None for every layer)"
    )


@rule
def mtp_uniform_recompute_one_layer(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """A model with MTP depths under full ``uniform`` recompute needs recompute_num_layers
    1 (None exports as 1): ``MultiTokenPredictionLayer._checkpointed_forward``
    (``megatron/core/transformer/multi_token_prediction.py``) asserts
    ``recompute_num_layers == 1`` ("recompute_num_layers must be 1 for MTP recompute");
    ``block`` runs the depths without a checkpoint (`ParallelPlan.checkpoints_mtp_depths`)."""
    count = plan.recompute_num_layers
    if not model.mtp_num_layers or not plan.checkpoints_mtp_depths or count in (None, 1):
        return None
    return (
        f"recompute_num_layers ({count}) with recompute_method ('uniform') and mtp_num_layers "
        f"({model.mtp_num_layers}) of model {model.name!r}: Megatron-core checkpoints each MTP "
        "depth alone and asserts recompute_num_layers == 1: set recompute_num_layers=1, or "
        f"recompute_method='block' with recompute_num_layers={count} (the MTP depths are then "
        "not recomputed)"
    )


# ---- position embedding ----------------------------------------------------------------


@rule
def max_position_covers_seq_length(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Learned position embeddings need max_position_embeddings >= seq_length: the table
    has one row per position (Megatron validate_args asserts the relation; for rope it has
    no parameters, so an export may raise `--max-position-embeddings` to seq_length)."""
    seq, limit = job.seq_length, model.max_position_embeddings
    if model.position_embedding != "learned" or limit >= seq:
        return None
    return (
        f"seq_length ({seq}) exceeds max_position_embeddings ({limit}) of the learned position "
        f"table of model {model.name!r}: set seq_length <= {limit}"
    )


FEATURE_RULES = (
    seq_divisible_by_2cp,
    packed_document_divisible_by_2cp,
    sequence_parallel_needs_tp,
    sequence_parallel_seq_divisible_by_tp,
    tp_comm_overlap_needs_sequence_parallel,
    tp_comm_overlap_not_with_nvfp4,
    overlap_param_gather_needs_distributed_optimizer,
    overlap_param_gather_needs_overlap_grad_reduce,
    recompute_num_layers_needs_full,
    recompute_num_layers_within_chunk,
    mtp_uniform_recompute_one_layer,
    max_position_covers_seq_length,
)
"""The feature rules in check order."""
