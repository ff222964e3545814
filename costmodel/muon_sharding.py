"""How ``dist_muon`` deals a stage's whole parameters out over the data-parallel ranks, and
the share of the rank that holds the most optimizer state.

Source: ``LayerWiseDistributedOptimizer.shard_params`` (NVIDIA/Megatron-LM d7288711, the
Megatron-LM of Megatron-Bridge tag v0.4.0, ``megatron/core/optimizer/
layer_wise_optimizer.py``): the parameters of every optimizer of the stage (Muon's matrices
and Adam's embedding, output layer, norms and biases, over all model chunks) are sorted by
``numel`` and dealt out in a ping-pong loop ``0, 1, ..., n-1, n-1, ..., 0, 0, 1, ...``
over the dp·cp ranks (routed-expert parameters over the expert-dp ranks, with their own
loop). Each rank keeps the optimizer state of, and steps, only the whole parameters dealt to
it, so one rank holds the whole embedding's Adam state. ``muon`` (not layer-wise) steps
every parameter on every rank.

This module deals the stage's matrices (`costmodel.optimizer_muon.layer_matrices`, the MTP
weight sets' included, `rank_matrices`) and its vocabulary matrices (embedding, output
layer, the MTP stage's embedding copy: `vocab_tensors`) exactly, spreads the small
parameters (norms, biases) evenly,
and returns the share of the rank with the most optimizer state, the dense and the expert
groups each taken at their worst (an upper bound where the two worst ranks differ); the
smallest share of each group, which sets the time of the uneven all-gather after the step;
and the step's working bytes, taken as the largest of the stage's on every rank (an upper
bound where the rank with the largest matrix is not the one with the most state).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from costmodel.compute import element_bytes
from costmodel.optimizer_muon import (
    MuonMatrix,
    layerwise_gather_buffer_bytes,
    mtp_matrices,
    muon_shards,
    muon_state_bytes,
    newton_schulz_dtype,
    newton_schulz_working_bytes,
    stage_matrices,
)
from costmodel.rank_params import (
    outside_tensors,
    stage_layer_indices,
    stage_outside_tensors,
    stage_params,
    stage_weight_layers,
)
from costmodel.schedules import plan_stage_chunks
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class RankShare:
    """What one rank's optimizer holds and steps."""

    matrices: tuple[MuonMatrix, ...]
    """Muon's matrices dealt to the rank (``count`` of each)."""
    adam_params: float
    """Parameters the rank steps with Adam: whole embedding or output layers dealt to it,
    plus its even share of the small parameters."""

    @property
    def muon_params(self) -> float:
        """Parameters of `matrices`."""
        return sum(m.params for m in self.matrices)

    def state_bytes(self, precision: str, adam_bytes: float) -> float:
        """Optimizer-state bytes: `costmodel.optimizer_muon.muon_state_bytes` per Muon
        parameter, ``adam_bytes`` per Adam parameter."""
        return muon_state_bytes(precision) * self.muon_params + adam_bytes * self.adam_params


def deal(sizes: list[float], ranks: int) -> list[list[int]]:
    """Indices of ``sizes`` each of ``ranks`` ranks gets: sorted by size (stable), dealt
    ping-pong ``0 .. ranks-1, ranks-1 .. 0`` (``shard_params``)."""
    loop = list(range(ranks)) + list(range(ranks))[::-1]
    dealt: list[list[int]] = [[] for _ in range(ranks)]
    for position, index in enumerate(sorted(range(len(sizes)), key=lambda i: sizes[i])):
        dealt[loop[position % len(loop)]].append(index)
    return dealt


VOCAB_TENSORS = ("embedding.word_embeddings.weight", "output_layer.weight")
"""The vocabulary matrices among `costmodel.rank_params.outside_tensors`: whole Adam
tensors the deal hands out like the matrices."""


def rank_matrices(model: ModelSpec, plan: ParallelPlan, stage: int) -> tuple[MuonMatrix, ...]:
    """The matrices Muon steps on one rank of ``stage``: its decoder layers'
    (`costmodel.optimizer_muon.stage_matrices`) and its MTP weight sets'
    (`costmodel.optimizer_muon.mtp_matrices`)."""
    chunks = plan_stage_chunks(model, plan, stage)
    mtp = tuple(m for at in chunks for m in mtp_matrices(model, plan, at.mtp_layers))
    return stage_matrices(model, plan, stage_layer_indices(model, plan, stage)) + mtp


def vocab_tensors(model: ModelSpec, plan: ParallelPlan, stage: int) -> int:
    """Vocabulary matrices one rank of ``stage`` holds: the word embedding on virtual stage
    0, the output layer on the last, the MTP stage's embedding copy
    (`costmodel.rank_params.outside_tensors`, `VOCAB_TENSORS`)."""
    return sum(
        name in VOCAB_TENSORS
        for at in plan_stage_chunks(model, plan, stage)
        for name in outside_tensors(
            model, plan, first=at.first, last=at.last, mtp_layers=at.mtp_layers
        )
    )


def adam_tensors(model: ModelSpec, plan: ParallelPlan, stage: int) -> int:
    """Parameter tensors a Muon rank of ``stage`` steps with Adam (the optimizer step's
    ``num_tensors``): about 2 per layer whose weights it holds (norms, biases;
    `costmodel.rank_params.stage_weight_layers`) and its tensors outside the layers but
    each MTP weight set's ``eh_proj``, a Muon matrix
    (`costmodel.rank_params.stage_outside_tensors`)."""
    eh_proj = sum(
        len(count_params(model).mtp_weights(at.mtp_layers))
        for at in plan_stage_chunks(model, plan, stage)
    )
    outside = stage_outside_tensors(model, plan, stage)
    return 2 * stage_weight_layers(model, plan, stage) + outside - eh_proj


def _tensors(
    model: ModelSpec, plan: ParallelPlan, stage: int
) -> tuple[list[MuonMatrix | float], list[MuonMatrix]]:
    """(dense, expert) whole parameters of one rank of ``stage``: a matrix per tensor, a
    float (parameter count) for each vocabulary matrix (`vocab_tensors`)."""
    dense: list[MuonMatrix | float] = []
    expert: list[MuonMatrix] = []
    for matrix in rank_matrices(model, plan, stage):
        one = MuonMatrix(rows=matrix.rows, cols=matrix.cols, count=1, expert=matrix.expert)
        copies = max(round(matrix.count), 1)
        (expert if matrix.expert else dense).extend([one] * copies)
    vocab = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
    dense.extend([vocab] * vocab_tensors(model, plan, stage))
    return dense, expert


def _size(tensor: MuonMatrix | float) -> float:
    return tensor.params if isinstance(tensor, MuonMatrix) else tensor


def _worst(
    tensors: list[MuonMatrix | float], ranks: int, precision: str, adam_bytes: float
) -> RankShare:
    """The share with the most state among ``ranks`` ranks dealt ``tensors``."""
    shares = [
        RankShare(
            matrices=tuple(t for i in dealt if isinstance(t := tensors[i], MuonMatrix)),
            adam_params=sum(t for i in dealt if not isinstance(t := tensors[i], MuonMatrix)),
        )
        for dealt in deal([_size(t) for t in tensors], ranks)
    ]
    return max(shares, key=lambda s: s.state_bytes(precision, adam_bytes))


@functools.lru_cache(maxsize=4096)
def worst_rank_share(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    stage: int,
    *,
    dense: float,
    expert: float,
    adam_bytes: float,
) -> RankShare:
    """The optimizer share of the rank of ``stage`` (holding ``dense`` and ``expert``
    parameters in all) with the most optimizer state (module docstring):
    everything for ``muon``; for ``dist_muon`` the worst dense and the worst expert deal,
    plus the small parameters over `costmodel.optimizer_muon.muon_shards`. Cached: the
    closed-form screen asks for the same layouts once per micro-batch size."""
    dense_shards, expert_shards = muon_shards(job, plan)
    dense_tensors, expert_tensors = _tensors(model, plan, stage)
    small_dense = max(dense - sum(_size(t) for t in dense_tensors), 0.0)
    small_expert = max(expert - sum(t.params for t in expert_tensors), 0.0)
    worst_dense = _worst(dense_tensors, dense_shards, job.precision, adam_bytes)
    worst_expert = _worst(list(expert_tensors), expert_shards, job.precision, adam_bytes)
    return RankShare(
        matrices=worst_dense.matrices + worst_expert.matrices,
        adam_params=worst_dense.adam_params
        + worst_expert.adam_params
        + small_dense / dense_shards
        + small_expert / expert_shards,
    )


def worst_rank_state_bytes(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, stage: int, *, adam_bytes: float
) -> float:
    """Optimizer-state bytes of the rank of ``stage`` with the most
    (`worst_rank_share` of the stage's layers and parameters, `costmodel.rank_params`;
    `RankShare.state_bytes` with ``adam_bytes`` per Adam parameter). The memory model and
    the closed-form screen both count Muon's state through here."""
    params = stage_params(model, plan, stage)
    share = worst_rank_share(
        model,
        job,
        plan,
        stage,
        dense=params.dense,
        expert=params.expert,
        adam_bytes=adam_bytes,
    )
    return share.state_bytes(job.precision, adam_bytes)


def _smallest_fraction(tensors: list[MuonMatrix | float], total: float, ranks: int) -> float:
    """Fraction of ``total`` parameters held by the rank dealt the fewest of ``tensors``
    (`deal`), with the rest (norms, biases) spread evenly."""
    if total <= 0.0:
        return 1.0 / ranks
    sizes = [_size(t) for t in tensors]
    small = max(total - sum(sizes), 0.0) / ranks
    return min(sum(sizes[i] for i in dealt) + small for dealt in deal(sizes, ranks)) / total


@functools.lru_cache(maxsize=4096)
def smallest_share_fractions(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, stage: int
) -> tuple[float, float]:
    """Fractions of the dense and the routed-expert parameters of a rank of ``stage`` that
    ``dist_muon`` deals to the rank with the fewest, over
    `costmodel.optimizer_muon.muon_shards` (1/ranks where the deal is even; (1, 1) for
    ``muon``): what `costmodel.optimizer_muon.layerwise_gather_s` prices the uneven
    all-gather with. Cached: the closed-form screen asks once per layout and stage."""
    dense_shards, expert_shards = muon_shards(job, plan)
    if (dense_shards, expert_shards) == (1, 1):
        return 1.0, 1.0
    params = stage_params(model, plan, stage)
    dense, expert = _tensors(model, plan, stage)
    return (
        _smallest_fraction(dense, params.dense, dense_shards),
        _smallest_fraction(list(expert), params.expert, expert_shards),
    )


def step_working_bytes(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, stage: int, *, weight_bytes: float
) -> float:
    """Bytes a Muon step of a rank of ``stage`` allocates at once beyond its resident state
    (module docstring): the larger of the Newton-Schulz working set of the stage's matrix with
    the largest (`costmodel.optimizer_muon.newton_schulz_working_bytes`, at
    `costmodel.optimizer_muon.newton_schulz_dtype`'s element size) and, after the step,
    ``dist_muon``'s all-gather buffers (`costmodel.optimizer_muon.
    layerwise_gather_buffer_bytes`, ``weight_bytes`` per parameter). The memory model adds
    them to the step's peak (`costmodel.model_state.step_peak_bytes`)."""
    ns_bytes = element_bytes(newton_schulz_dtype(job.precision))
    shapes = {(m.rows, m.cols) for m in rank_matrices(model, plan, stage)}
    ns = max((newton_schulz_working_bytes(r, c, ns_bytes) for r, c in shapes), default=0.0)
    params = stage_params(model, plan, stage)
    gather = layerwise_gather_buffer_bytes(job, plan, params.dense, params.expert, weight_bytes)
    return max(ns, gather)
