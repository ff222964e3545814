"""`RankShape`: what one rank of the executor holds for one microbatch, the shape every
operator list of the ``torch`` runtime is priced on (`costmodel.runtimes.torch.layers`,
`costmodel.runtimes.torch.moe`)."""

from __future__ import annotations

from dataclasses import dataclass

from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class RankShape:
    """What one rank of the executor holds for one microbatch."""

    tokens: float
    """T: micro_batch · seq / cp."""
    norm_tokens: float
    """Tokens of the residual stream: T / tp under sequence parallelism, else T."""
    micro_batch: int
    """Sequences per microbatch."""
    seq: int
    """Full sequence length."""
    tp: int
    """Tensor-parallel size."""
    cp: int
    """Context-parallel size."""
    sp: bool
    """Sequence parallelism on (tp > 1)."""
    accumulate: float
    """Share of microbatches whose weight gradients add into existing ones, (m - 1) / m."""

    @property
    def dtensor(self) -> bool:
        """Parameters are DTensors (tp > 1)."""
        return self.tp > 1


def rank_shape(plan: ParallelPlan, seq: int, microbatches: int) -> RankShape:
    """The `RankShape` of ``plan`` for sequences of ``seq`` tokens."""
    tokens = plan.micro_batch_size * seq / plan.cp
    sp = plan.sequence_parallel and plan.tp > 1
    return RankShape(
        tokens=tokens,
        norm_tokens=tokens / plan.tp if sp else tokens,
        micro_batch=plan.micro_batch_size,
        seq=seq,
        tp=plan.tp,
        cp=plan.cp,
        sp=sp,
        accumulate=(microbatches - 1) / microbatches if microbatches > 0 else 0.0,
    )
