"""Pipeline split: which transformer layers (and the embedding, the loss and the MTP layers)
every (pipeline rank, virtual chunk) holds, as one pure function of the model and the plan.

Megatron-LM's semantics (`get_num_layers_to_build` and `get_transformer_layer_offset` in
megatron/core/transformer, `PipelineParallelLayerLayout`, the checks of
`TransformerConfig.__post_init__` and `validate_args`; megatron-facts.md §8.2-8.3):

- Chunk ``c`` of rank ``r`` is virtual stage ``c·pp + r``. Layers are numbered in virtual
  stage order: virtual stage 0 holds the first layers, then virtual stage 1, and so on.
- Even split: every rank holds ``L / pp`` layers and every chunk ``L / (pp·vpp)``.
- ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``:
  the embedding (the loss) counts as one layer, so ``L + 1`` (or ``L + 2``) is split evenly
  and the first chunk of rank 0 (the last chunk of rank pp-1) builds one transformer layer
  fewer.
- ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``: rank 0
  (rank pp-1) holds that many layers over its chunks; the remaining layers split evenly over
  the other ranks; every rank's count is split evenly over its vpp chunks.
- ``pipeline_model_parallel_layout``: one string per virtual stage, in virtual stage order
  (``Et|(tt|)*30mL``: stage 0 holds the embedding and one layer, the 30 following stages two
  layers each, the last one MTP layer and the loss); vpp = stages / pp.

The embedding is always built on chunk 0 of rank 0 and the output layer with the loss on
the last chunk of rank pp-1 (Megatron's pre_process / post_process); MTP layers sit on
the last chunk of rank pp-1 unless a layout places them. `pipeline_split` checks the
plan with the checks of `specs.pipeline_split_checks` (each named by the rule id that
reports it, see `specs.rules_pipeline`) and raises `SpecError` on the first one broken.
"""

from __future__ import annotations

from dataclasses import dataclass

from specs.errors import SpecError
from specs.model import ModelSpec
from specs.pipeline_layout_checks import layout_stages
from specs.pipeline_split_checks import (
    accounted_layers,
    given_first_last,
    middle_layers,
    split_problem,
    uses_first_last,
)
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkSplit:
    """What one model chunk (one virtual pipeline stage) holds."""

    pp_rank: int
    """Pipeline rank, 0-based."""
    chunk: int
    """Model chunk on that rank, 0 .. vpp-1."""
    virtual_stage: int
    """chunk·pp + pp_rank: the chunk's place in the forward order."""
    layers: range
    """Global indices of its transformer layers (possibly empty)."""
    embedding: bool
    """Holds the word (and position) embedding: chunk 0 of rank 0."""
    loss: bool
    """Holds the final norm, the output layer and the loss: the last chunk of rank pp-1."""
    mtp_layers: int
    """Multi-token-prediction layers it holds."""

    @property
    def num_layers(self) -> int:
        """Transformer layers it holds."""
        return len(self.layers)


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineSplit:
    """The chunks of every rank: ``chunks[pp_rank][chunk]``."""

    pp: int
    """Pipeline ranks."""
    vpp: int
    """Chunks per rank."""
    chunks: tuple[tuple[ChunkSplit, ...], ...]
    """Indexed by pipeline rank, then chunk."""

    def chunk(self, pp_rank: int, chunk: int) -> ChunkSplit:
        """The split of one chunk."""
        return self.chunks[pp_rank][chunk]

    def rank_layers(self, pp_rank: int) -> tuple[int, ...]:
        """Transformer layer indices of one rank, in chunk order."""
        return tuple(i for c in self.chunks[pp_rank] for i in c.layers)

    def rank_num_layers(self, pp_rank: int) -> int:
        """Transformer layers of one rank over its chunks."""
        return sum(c.num_layers for c in self.chunks[pp_rank])

    def rank_mtp_layers(self, pp_rank: int) -> int:
        """MTP layers of one rank."""
        return sum(c.mtp_layers for c in self.chunks[pp_rank])

    def in_forward_order(self) -> tuple[ChunkSplit, ...]:
        """Every chunk by virtual stage."""
        return tuple(
            sorted((c for rank in self.chunks for c in rank), key=lambda c: c.virtual_stage)
        )

    @property
    def is_even(self) -> bool:
        """True when every chunk holds the same number of transformer layers."""
        return len({c.num_layers for rank in self.chunks for c in rank}) == 1


def _chunk_counts(model: ModelSpec, plan: ParallelPlan) -> list[list[tuple[int, int]]]:
    """(transformer layers, MTP layers) per [rank][chunk], for a plan that passed the checks."""
    pp, vpp = plan.pp, plan.vpp
    stages = layout_stages(plan)
    if stages is not None:
        return [
            [(stages[c * pp + r].count("t"), stages[c * pp + r].count("m")) for c in range(vpp)]
            for r in range(pp)
        ]
    if uses_first_last(plan):
        first, last = given_first_last(plan)
        layers, ranks = middle_layers(model, plan)
        per_rank = [layers // ranks if ranks > 0 else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        counts = [[(n // vpp, 0) for _ in range(vpp)] for n in per_rank]
    else:
        per_chunk = accounted_layers(model, plan) // (pp * vpp)
        counts = [[(per_chunk, 0) for _ in range(vpp)] for _ in range(pp)]
        if plan.account_for_embedding_in_pipeline_split:
            counts[0][0] = (counts[0][0][0] - 1, 0)
        if plan.account_for_loss_in_pipeline_split:
            counts[-1][-1] = (counts[-1][-1][0] - 1, 0)
    counts[-1][-1] = (counts[-1][-1][0], model.mtp_num_layers)
    return counts


def pipeline_split(model: ModelSpec, plan: ParallelPlan) -> PipelineSplit:
    """The layers of every (pipeline rank, chunk) under the plan's split (module docstring).

    Raises `SpecError` naming the broken rule when the split is not one Megatron accepts.
    """
    problem = split_problem(model, plan)
    if problem is not None:
        raise SpecError(f"{problem[0]}: {problem[1]}")
    counts = _chunk_counts(model, plan)
    pp, vpp = plan.pp, plan.vpp
    starts: dict[tuple[int, int], int] = {}
    next_layer = 0
    for c in range(vpp):
        for r in range(pp):
            starts[r, c] = next_layer
            next_layer += counts[r][c][0]
    chunks = tuple(
        tuple(
            ChunkSplit(
                pp_rank=r,
                chunk=c,
                virtual_stage=c * pp + r,
                layers=range(starts[r, c], starts[r, c] + counts[r][c][0]),
                embedding=r == 0 and c == 0,
                loss=r == pp - 1 and c == vpp - 1,
                mtp_layers=counts[r][c][1],
            )
            for c in range(vpp)
        )
        for r in range(pp)
    )
    return PipelineSplit(pp=pp, vpp=vpp, chunks=chunks)
