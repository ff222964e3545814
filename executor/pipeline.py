"""Pipeline parallelism: Megatron's layer split and ``torch.distributed.pipelining`` schedules.

Layer split: `specs.pipeline_split.pipeline_split`, Megatron's assignment of layers to
(pipeline rank, chunk) (megatron-facts.md §3.3, §8.2-8.3): the even split, the account-for
flags, first/last layer counts and layouts. Chunk j of pipeline rank r is pipeline stage
j·pp + r, the loop placement ``ScheduleInterleaved1F1B`` expects. The embedding lives on
stage 0, the final norm and output layer with the loss on the last stage, as the split
places them (Megatron's pre_process / post_process).

Schedules (`schedule_name`): ``Schedule1F1B`` when vpp = 1 and there are at least pp
micro-batches, ``ScheduleGPipe`` when vpp = 1 and there are fewer (torch's 1F1B refuses
them; Megatron's 1F1B then runs every forward before every backward, which is GPipe's
order, so the gradients are the same), ``ScheduleInterleaved1F1B`` when vpp > 1. Stage
shapes are given up front (static metadata), so the stages never run the extra forward and
backward that torch's dynamic shape inference performs on the first step. Gradients are
divided by the number of micro-batches (``scale_grads``), so each rank ends with the
gradient of the mean loss over its micro-batches.

Named ranges: `NamedPipelineStage` wraps each stage's forward and backward of one
micro-batch in ``paraplan/forward mb{m} c{c}`` and ``paraplan/backward mb{m} c{c}``, where
c is the rank's chunk index j. Captured inside: the chunk's compute and the collectives it
issues (TP, CP, EP; DDP's or FSDP's gradient reduction on the last backward). Not captured:
the loss of the last stage (computed by the schedule between the two), and the
pipeline send/recv, which the schedule issues between actions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)
from torch.profiler import record_function

from executor.context import ParallelContext
from specs.errors import SpecError
from specs.model import ModelSpec
from specs.pipeline_split import ChunkSplit, pipeline_split
from specs.plan import ParallelPlan

SCHEDULES = ("1F1B", "GPipe", "Interleaved1F1B")
"""Pipeline schedules the executor runs (`schedule_name`)."""


def rank_chunks(model: ModelSpec, plan: ParallelPlan, pp_rank: int) -> tuple[ChunkSplit, ...]:
    """The chunks of pipeline rank ``pp_rank`` under the plan's split, in chunk order
    (`specs.pipeline_split.pipeline_split`; SpecError naming the rule it breaks)."""
    return pipeline_split(model, plan).chunks[pp_rank]


def schedule_name(plan: ParallelPlan, num_microbatches: int) -> str | None:
    """The schedule that runs the plan: None without pipelining (pp = 1), else one of
    `SCHEDULES` (module docstring)."""
    if plan.pp == 1:
        return None
    if plan.vpp > 1:
        return "Interleaved1F1B"
    return "1F1B" if num_microbatches >= plan.pp else "GPipe"


def schedule_note(plan: ParallelPlan, num_microbatches: int) -> str | None:
    """One line saying the executor runs GPipe where Megatron runs 1F1B, else None."""
    if schedule_name(plan, num_microbatches) != "GPipe":
        return None
    return (
        f"{num_microbatches} micro-batch(es) < pp ({plan.pp}): torch's 1F1B needs at least pp, "
        "so the pipeline runs GPipe (all forwards, then all backwards: Megatron's 1F1B order "
        "for this count; same gradients, activations of every micro-batch held)"
    )


def stage_index(pp: int, pp_rank: int, chunk: int) -> int:
    """Pipeline stage of chunk ``chunk`` on pipeline rank ``pp_rank``."""
    return chunk * pp + pp_rank


def lm_loss(logits_BSV: torch.Tensor, targets_BS: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy over the micro-batch's tokens."""
    return F.cross_entropy(logits_BSV.flatten(0, 1), targets_BS.flatten())


class NamedPipelineStage(PipelineStage):
    """A `PipelineStage` whose per-micro-batch forward and backward are named ranges."""

    def __init__(self, *args: Any, chunk: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chunk = chunk
        """Index j of this chunk on its pipeline rank (the ``c`` of the range names)."""

    def forward_one_chunk(
        self,
        fwd_chunk_id: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
        save_forward_output: bool = True,
    ) -> Any:
        with record_function(f"paraplan/forward mb{fwd_chunk_id} c{self.chunk}"):
            return super().forward_one_chunk(fwd_chunk_id, args, kwargs, save_forward_output)

    def backward_one_chunk(
        self,
        bwd_chunk_id: int,
        loss: torch.Tensor | None = None,
        full_backward: bool = True,
        last_backward: bool = False,
    ) -> None:
        with record_function(f"paraplan/backward mb{bwd_chunk_id} c{self.chunk}"):
            super().backward_one_chunk(bwd_chunk_id, loss, full_backward, last_backward)


def build_schedule(
    parts: list[nn.Module],
    ctx: ParallelContext,
    *,
    num_microbatches: int,
    stage_input_shape: tuple[int, ...],
    logits_shape: tuple[int, ...],
):
    """Stages for this rank's chunks (``parts``, already TP/DP-wrapped) and their schedule.

    ``stage_input_shape`` is the (B, S', D) hidden-state micro-batch passed between stages,
    ``logits_shape`` the last stage's (B, S, V) output; the first stage reads (B, S) tokens.
    """
    plan = ctx.plan
    num_stages = plan.pp * plan.vpp
    pp_rank = ctx.coords["pp"]
    hidden = torch.empty(stage_input_shape, device="meta", requires_grad=True)
    tokens = torch.empty(logits_shape[:2], dtype=torch.long, device="meta")
    logits = torch.empty(logits_shape, device="meta", requires_grad=True)
    stages = []
    for j, part in enumerate(parts):
        index = stage_index(plan.pp, pp_rank, j)
        stages.append(
            NamedPipelineStage(
                part,
                index,
                num_stages,
                ctx.device,
                input_args=tokens if index == 0 else hidden,
                output_args=logits if index == num_stages - 1 else hidden,
                group=ctx.group("pp"),
                chunk=j,
            )
        )
    name = schedule_name(plan, num_microbatches)
    try:
        if name == "GPipe":
            schedule = ScheduleGPipe(stages[0], num_microbatches, loss_fn=lm_loss)
        elif name == "1F1B":
            schedule = Schedule1F1B(stages[0], num_microbatches, loss_fn=lm_loss)
        else:
            schedule = ScheduleInterleaved1F1B(stages, num_microbatches, loss_fn=lm_loss)
    except ValueError as error:
        raise SpecError(
            f"pipeline schedule rejects {num_microbatches} micro-batches for pp={plan.pp}, "
            f"vpp={plan.vpp}: {error}; raise global_batch_size or lower micro_batch_size so "
            "there are at least pp micro-batches (a multiple of pp when interleaving)"
        ) from error
    return schedule, stages
