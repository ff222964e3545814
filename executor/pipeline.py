"""Pipeline parallelism: Megatron's layer split and ``torch.distributed.pipelining`` schedules.

Layer split (megatron-facts.md §3.3): with L layers, pp ranks and vpp chunks per rank, each
chunk holds Lc = L / (pp·vpp) consecutive layers, and chunk j of pipeline rank r holds layers
[(j·pp + r)·Lc, (j·pp + r + 1)·Lc). That chunk is pipeline stage j·pp + r, the loop placement
``ScheduleInterleaved1F1B`` expects. The embedding lives on stage 0, the final norm and
output layer on the last stage.

Schedules: ``Schedule1F1B`` when vpp = 1, ``ScheduleInterleaved1F1B`` when vpp > 1. Stage
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
    ScheduleInterleaved1F1B,
)
from torch.profiler import record_function

from executor.context import ParallelContext
from specs.errors import SpecError


def chunk_layer_ids(num_layers: int, pp: int, vpp: int, pp_rank: int) -> list[list[int]]:
    """Global layer indices of each chunk of pipeline rank ``pp_rank``."""
    if num_layers % (pp * vpp):
        raise SpecError(
            f"num_layers ({num_layers}) must be divisible by pp ({pp}) * vpp ({vpp}) = "
            f"{pp * vpp}; choose pp·vpp among the divisors of {num_layers}"
        )
    per_chunk = num_layers // (pp * vpp)
    return [
        list(range((j * pp + pp_rank) * per_chunk, (j * pp + pp_rank + 1) * per_chunk))
        for j in range(vpp)
    ]


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
    try:
        if plan.vpp == 1:
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
