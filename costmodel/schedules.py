"""Pipeline schedules as pure action lists, one ordered list per pipeline stage.

A schedule says *what* each pipeline rank computes and in *which order*; it says nothing
about time. `costmodel.pipeline_sim` times the lists. Keeping the two apart lets the
generator be checked against Megatron-LM's rules without any cost model, and lets the
simulator time any order (including hand-written or broken ones).

Conventions (Megatron-LM `megatron/core/pipeline_parallel/schedules.py`):
- ``pp`` pipeline stages (ranks), ``vpp`` model chunks per stage, ``m`` microbatches.
- Chunk ``c`` of stage ``r`` is virtual stage ``c·pp + r``; virtual stages run the model's
  layers in order, so a forward flows 0, 1, ..., pp·vpp - 1 and a backward the reverse.
- An `Action` is one forward (``F``) or backward (``B``) of one microbatch through one chunk.
- A `PipelineSchedule` is ``tuple[tuple[Action, ...], ...]`` indexed by stage.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from specs.errors import SpecError
from specs.model import ModelSpec
from specs.pipeline_split import PipelineSplit, pipeline_split
from specs.plan import ParallelPlan

Phase = Literal["F", "B"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Action:
    """One forward or backward pass of one microbatch through one model chunk."""

    stage: int
    """Pipeline stage (pipeline-parallel rank) that runs the action, 0-based."""
    chunk: int
    """Model chunk on that stage, 0-based; always 0 without interleaving."""
    microbatch: int
    """Microbatch index within the iteration, 0-based."""
    phase: Phase
    """``F`` for the forward pass, ``B`` for the backward pass."""

    def __str__(self) -> str:
        return f"{self.phase}(s{self.stage} c{self.chunk} mb{self.microbatch})"


PipelineSchedule = tuple[tuple[Action, ...], ...]
"""One ordered action list per pipeline stage, indexed by stage."""


def _require_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise SpecError(f"{name} must be >= 1, got {name}={value}; pass a positive count")


def virtual_stage(stage: int, chunk: int, pp: int) -> int:
    """Virtual pipeline stage of chunk ``chunk`` on stage ``stage``: ``chunk·pp + stage``.

    Source: Megatron-LM `initialize_model_parallel` docstring (chunk j of rank r holds the
    (j·p + r)-th slice of layers).
    """
    return chunk * pp + stage


def stage_and_chunk(virtual: int, pp: int) -> tuple[int, int]:
    """Inverse of `virtual_stage`: ``(stage, chunk) = (virtual % pp, virtual // pp)``."""
    return virtual % pp, virtual // pp


def layer_range(stage: int, chunk: int, *, pp: int, vpp: int, num_layers: int) -> range:
    """Layers held by chunk ``chunk`` of stage ``stage`` (0-based, half-open).

    Chunk j of rank r holds ``[(j·p + r)·Lc, (j·p + r + 1)·Lc)`` with ``Lc = L/(p·v)``
    (Megatron-LM `initialize_model_parallel` docstring). Raises `SpecError` when
    ``num_layers`` is not divisible by ``pp·vpp``.
    """
    _require_positive(pp=pp, vpp=vpp, num_layers=num_layers)
    if num_layers % (pp * vpp) != 0:
        raise SpecError(
            f"layers_divisible_by_pp_vpp: num_layers ({num_layers}) must be divisible by "
            f"pp ({pp}) * vpp ({vpp}) = {pp * vpp}; choose pp·vpp among the divisors of "
            f"{num_layers}"
        )
    per_chunk = num_layers // (pp * vpp)
    first = virtual_stage(stage, chunk, pp) * per_chunk
    return range(first, first + per_chunk)


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkPosition:
    """Where one model chunk sits in the pipeline."""

    stage: int
    """Pipeline stage (rank along pp)."""
    chunk: int
    """Chunk of that stage (0 .. vpp - 1)."""
    layers: range
    """Its layers (`layer_range`)."""
    first: bool
    """True for virtual stage 0 (it holds the embedding)."""
    last: bool
    """True for the last virtual stage (it holds the output layer and the loss)."""
    mtp_layers: int = 0
    """Multi-token-prediction layers it holds (`specs.pipeline_split`)."""


def stage_chunks(stage: int, *, pp: int, vpp: int, num_layers: int) -> tuple[ChunkPosition, ...]:
    """The chunks of ``stage`` in chunk order (`layer_range`, `virtual_stage`)."""
    out = []
    for chunk in range(vpp):
        v = virtual_stage(stage, chunk, pp)
        out.append(
            ChunkPosition(
                stage=stage,
                chunk=chunk,
                layers=layer_range(stage, chunk, pp=pp, vpp=vpp, num_layers=num_layers),
                first=v == 0,
                last=v == pp * vpp - 1,
            )
        )
    return tuple(out)


def pipeline_chunks(*, pp: int, vpp: int, num_layers: int) -> tuple[tuple[ChunkPosition, ...], ...]:
    """`stage_chunks` of every stage, in stage order."""
    return tuple(stage_chunks(s, pp=pp, vpp=vpp, num_layers=num_layers) for s in range(pp))


@functools.lru_cache(maxsize=512)
def plan_split(model: ModelSpec, plan: ParallelPlan) -> PipelineSplit:
    """`specs.pipeline_split.pipeline_split`, memoized: the cost model asks for the same
    split once per chunk and layer."""
    return pipeline_split(model, plan)


def chunk_layers(model: ModelSpec, plan: ParallelPlan, stage: int, chunk: int) -> range:
    """Layers of chunk ``chunk`` of stage ``stage`` under the plan's pipeline split (even or
    uneven; `specs.pipeline_split`). Raises `SpecError` naming the rule the split breaks."""
    return plan_split(model, plan).chunk(stage, chunk).layers


def plan_stage_chunks(
    model: ModelSpec, plan: ParallelPlan, stage: int
) -> tuple[ChunkPosition, ...]:
    """The chunks of ``stage`` under the plan's pipeline split, in chunk order."""
    split = plan_split(model, plan)
    return tuple(
        ChunkPosition(
            stage=stage,
            chunk=c.chunk,
            layers=c.layers,
            first=c.embedding,
            last=c.loss,
            mtp_layers=c.mtp_layers,
        )
        for c in split.chunks[stage]
    )


def plan_pipeline_chunks(
    model: ModelSpec, plan: ParallelPlan
) -> tuple[tuple[ChunkPosition, ...], ...]:
    """`plan_stage_chunks` of every stage, in stage order."""
    return tuple(plan_stage_chunks(model, plan, s) for s in range(plan.pp))


def warmup_microbatches_1f1b(pp: int, stage: int, m: int) -> int:
    """Forwards run before the first backward on ``stage`` in 1F1B: ``min(pp - stage - 1, m)``.

    Source: Megatron-LM `forward_backward_pipelining_without_interleaving`.
    """
    return min(pp - stage - 1, m)


def _one_f_one_b_order(warmup: int, total: int) -> list[tuple[Phase, int]]:
    """Order of (phase, index) pairs: ``warmup`` forwards, steady F/B pairs, cooldown B.

    Both Megatron schedules share this shape; only the warmup count and the mapping from
    an index to (microbatch, chunk) differ.
    """
    steady = total - warmup
    order: list[tuple[Phase, int]] = [("F", k) for k in range(warmup)]
    for k in range(steady):
        order += [("F", k + warmup), ("B", k)]
    order += [("B", k) for k in range(steady, total)]
    return order


def one_f_one_b(pp: int, m: int) -> PipelineSchedule:
    """Non-interleaved 1F1B (PipeDream-Flush) for ``pp`` stages and ``m`` microbatches.

    Stage r runs `warmup_microbatches_1f1b` forwards, then ``m - warmup`` forward/backward
    pairs, then the remaining backwards (Megatron-LM
    `forward_backward_pipelining_without_interleaving`). Any ``m >= 1`` is valid.
    """
    _require_positive(pp=pp, m=m)
    schedule = []
    for stage in range(pp):
        order = _one_f_one_b_order(warmup_microbatches_1f1b(pp, stage, m), m)
        schedule.append(
            tuple(Action(stage=stage, chunk=0, microbatch=k, phase=phase) for phase, k in order)
        )
    return tuple(schedule)


def warmup_microbatches_interleaved(pp: int, vpp: int, stage: int, m: int) -> int:
    """Forwards before the first backward on ``stage`` in interleaved 1F1B.

    ``min(2·(pp - stage - 1) + (vpp - 1)·N, m·vpp)`` with microbatch group size N = pp
    (Megatron-LM `get_pp_rank_microbatches`, default
    ``microbatch_group_size_per_vp_stage``).
    """
    return min(2 * (pp - stage - 1) + (vpp - 1) * pp, m * vpp)


def check_interleaved_microbatches(pp: int, m: int) -> None:
    """Raise `SpecError` unless ``m >= pp`` and ``m % pp == 0``.

    Megatron-LM checks ``p <= N <= m`` and ``m % N in {0} ∪ [p, N)`` at the first step; with
    the default group size N = p this is exactly ``m >= p and m % p == 0``.
    """
    if m < pp or m % pp != 0:
        lower = max(pp, m - m % pp)
        raise SpecError(
            "interleaved_needs_microbatches_multiple_of_pp: the interleaved schedule needs "
            f"microbatches m ({m}) >= pp ({pp}) and m % pp == 0 (got {m % pp}); use "
            f"m in {{{lower}, {lower + pp}}} (change global_batch_size or micro_batch_size), "
            "or vpp=1"
        )


def _interleaved_table(pp: int, vpp: int, m: int) -> list[tuple[int, int]]:
    """Forward (microbatch, chunk) for each virtual-microbatch index on every stage.

    Groups of N = pp microbatches go through chunk 0, then the same group through chunk 1,
    and so on (Megatron-LM `get_schedule_table`); ``m % pp == 0`` is checked by the caller,
    so no group is short.
    """
    return [
        (first + offset, chunk)
        for first in range(0, m, pp)
        for chunk in range(vpp)
        for offset in range(pp)
    ]


def interleaved(pp: int, vpp: int, m: int) -> PipelineSchedule:
    """Interleaved 1F1B with ``vpp`` chunks per stage (Megatron-LM schedule table).

    Each stage runs ``m·vpp`` forwards and backwards. Virtual-microbatch index k maps to
    (microbatch, chunk) through the schedule table for forwards; backwards use the same
    microbatch with chunk ``vpp - 1 - chunk`` (Megatron `get_model_chunk_id(forward=False)`).
    Stage r runs `warmup_microbatches_interleaved` forwards, then F(k + warmup) B(k) pairs,
    then the remaining backwards. Raises `SpecError` when m < pp or m % pp != 0.
    """
    _require_positive(pp=pp, vpp=vpp, m=m)
    check_interleaved_microbatches(pp, m)
    table = _interleaved_table(pp, vpp, m)
    schedule = []
    for stage in range(pp):
        warmup = warmup_microbatches_interleaved(pp, vpp, stage, m)
        actions = []
        for phase, k in _one_f_one_b_order(warmup, m * vpp):
            microbatch, chunk = table[k]
            if phase == "B":
                chunk = vpp - 1 - chunk
            actions.append(Action(stage=stage, chunk=chunk, microbatch=microbatch, phase=phase))
        schedule.append(tuple(actions))
    return tuple(schedule)


def flush_actions(schedule: PipelineSchedule, pp: int, vpp: int, m: int) -> tuple[Action, ...]:
    """The warmup forwards and the cooldown backwards of every stage of `interleaved` (pp,
    vpp, m): the first and the last `warmup_microbatches_interleaved` actions of each
    stage's list, stage by stage. Megatron-core runs them in its warmup and cooldown loops
    (`forward_backward_pipelining_with_interleaving`), whose pipeline sends block."""
    out: list[Action] = []
    for stage, actions in enumerate(schedule):
        warmup = warmup_microbatches_interleaved(pp, vpp, stage, m)
        out += actions[:warmup]
        out += actions[len(actions) - warmup :]
    return tuple(out)


def no_pipelining(vpp: int, m: int) -> PipelineSchedule:
    """One stage: each microbatch runs forward through every chunk, then backward.

    Megatron-LM `forward_backward_no_pipelining` (pp == 1) runs F0 B0 F1 B1 ...; with
    ``vpp > 1`` the chunks of one microbatch run back to back (0..v-1 forward, v-1..0
    backward), which is what a single rank holding the whole model does.
    """
    _require_positive(vpp=vpp, m=m)
    actions = []
    for microbatch in range(m):
        actions += [Action(stage=0, chunk=c, microbatch=microbatch, phase="F") for c in range(vpp)]
        actions += [
            Action(stage=0, chunk=c, microbatch=microbatch, phase="B") for c in reversed(range(vpp))
        ]
    return (tuple(actions),)


def schedule_actions(pp: int, vpp: int, m: int) -> PipelineSchedule:
    """The schedule Megatron-LM runs for (pp, vpp, m) (`get_forward_backward_func`).

    pp == 1: `no_pipelining`; vpp == 1: `one_f_one_b`; otherwise `interleaved`.
    """
    _require_positive(pp=pp, vpp=vpp, m=m)
    if pp == 1:
        return no_pipelining(vpp, m)
    if vpp == 1:
        return one_f_one_b(pp, m)
    return interleaved(pp, vpp, m)


def max_in_flight(actions: tuple[Action, ...]) -> int:
    """Most forwards on one stage whose backward has not run yet, at any point in the list.

    This is the number of microbatch-chunk activations the stage holds at its peak.
    """
    open_forwards: set[tuple[int, int]] = set()
    peak = 0
    for action in actions:
        key = (action.chunk, action.microbatch)
        if action.phase == "F":
            open_forwards.add(key)
            peak = max(peak, len(open_forwards))
        else:
            open_forwards.discard(key)
    return peak
