"""Data parallelism and gradient reduction: DDP with the plan's bucket size, or FSDP2
``fully_shard`` for the distributed optimizer, plus the reductions neither does.

Which parameters reduce over which group (megatron-facts.md §4.2, §5):
- dense parameters: averaged over the dp·cp group (context-parallel ranks see different
  tokens of the same sequences, so they reduce with data parallelism).
- expert parameters: summed over the expert-data-parallel group and divided by dp·cp.
  Each expert replica has seen the tokens of several ranks of its EP group, and the sum
  over its replicas counts every token of the stage exactly once; dividing by dp·cp turns
  it into the gradient of the mean loss (Megatron pre-scales expert gradients by
  edp / (dp·cp) before averaging over edp: the same thing).
- a tied embedding split over the first and last pipeline stage: the two copies' gradients
  are summed over the embedding group after the data-parallel reduction.

Mechanisms:
- ``distributed_optimizer``: FSDP2 ``fully_shard`` over the flattened dp·cp mesh, per block
  and then per chunk (parameters, gradients and AdamW state sharded; reduce-scatter of
  gradients, all-gather of parameters). Routed experts get their own ``fully_shard`` over
  the expert-dp mesh with divide factor dp·cp.
- otherwise, tp = 1: ``DistributedDataParallel`` over dp·cp with ``bucket_cap_mb`` =
  bucket_size_params() x 4 bytes (fp32 gradients), experts excluded and reduced by
  `BucketedAllReduce`. DDP always overlaps its bucket all-reduces with the last backward.
- otherwise, tp > 1: DDP rejects DTensor parameters in torch 2.13 (``c10d.broadcast_`` has
  no sharding strategy; with ``init_sync=False`` the reducer mixes Tensor and DTensor), so the
  local gradient shards are all-reduced by `BucketedAllReduce` with the same bucket size,
  after the backward (no overlap).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from executor.context import ParallelContext
from executor.model import DecoderChunk
from executor.moe import MoE

FP32_BYTES = 4


def is_expert_parameter(name: str) -> bool:
    """True for routed-expert weights (``...feed_forward.experts.w1``)."""
    return ".experts." in name


def matching_placements(grad: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``grad`` laid out as ``param`` is: the vocabulary-parallel embedding's backward
    yields a replicated gradient of a row-sharded weight, while the output layer's copy of a
    tied embedding is row-sharded; both ends of the tied sum must hold the same rows."""
    if (
        isinstance(grad, DTensor)
        and isinstance(param, DTensor)
        and grad.placements != param.placements
    ):
        return grad.redistribute(param.device_mesh, param.placements)
    return grad


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local storage of a tensor or DTensor."""
    return t.to_local() if isinstance(t, DTensor) else t


class BucketedAllReduce:
    """All-reduce the gradients of ``params`` in flat buckets: sum over ``group``, then
    divide by ``divide_by``. Buckets follow reverse registration order (about the order
    gradients become ready) and close once they reach ``bucket_numel`` elements, as
    Megatron's buffers do (megatron-facts.md §5.1)."""

    def __init__(
        self,
        params: list[nn.Parameter],
        group: dist.ProcessGroup | None,
        *,
        bucket_numel: int,
        divide_by: float,
    ) -> None:
        self.group = group
        self.divide_by = divide_by
        self.buckets: list[list[nn.Parameter]] = []
        current: list[nn.Parameter] = []
        size = 0
        for param in reversed(params):
            current.append(param)
            size += local_tensor(param).numel()
            if size >= bucket_numel:
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)

    @torch.no_grad()
    def sync(self) -> None:
        """Reduce every bucket in place (a missing gradient counts as zero)."""
        for bucket in self.buckets:
            grads = []
            for param in bucket:
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                grads.append(local_tensor(param.grad))
            flat = torch.cat([g.reshape(-1) for g in grads])
            if self.group is not None:
                dist.all_reduce(flat, group=self.group)
            if self.divide_by != 1:
                flat.div_(self.divide_by)
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()


def apply_fsdp(chunk: DecoderChunk, ctx: ParallelContext, *, reshard_after_forward: bool) -> None:
    """``fully_shard`` the blocks (experts on their own mesh), then the chunk, in place."""
    dense_mesh = ctx.submesh("dp_cp")
    divide = float(ctx.size("dp") * ctx.size("cp"))
    for block in chunk.layers.values():
        ffn = getattr(block, "feed_forward", None)
        if isinstance(ffn, MoE):
            experts = fully_shard(
                ffn.experts, mesh=ctx.submesh("edp"), reshard_after_forward=reshard_after_forward
            )
            experts.set_gradient_divide_factor(divide)
            if ctx.size("edp") > 1:
                # gloo has no PREMUL_SUM: reduce with SUM, then divide. (On one rank FSDP2
                # divides by the factor itself, and forcing SUM would divide twice.)
                experts.set_force_sum_reduction_for_comms(True)
        fully_shard(block, mesh=dense_mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(chunk, mesh=dense_mesh, reshard_after_forward=reshard_after_forward)


def apply_ddp(chunk: nn.Module, ctx: ParallelContext) -> nn.Module:
    """Wrap ``chunk`` in DDP over dp·cp (experts excluded); unchanged when dp·cp = 1."""
    group = ctx.group("dp_cp")
    if group is None:
        return chunk
    # Experts reduce over their own (expert-dp) group: keep them out of DDP's buckets.
    experts = [name for name, _ in chunk.named_parameters() if is_expert_parameter(name)]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(chunk, experts)
    bucket_mb = ctx.plan.bucket_size_params() * FP32_BYTES / 2**20
    # init_sync=False: every rank builds identical weights from the seed (no broadcast);
    # the model has no buffers to synchronize.
    return DistributedDataParallel(
        chunk,
        process_group=group,
        bucket_cap_mb=bucket_mb,
        init_sync=False,
    )


class GradientSync:
    """The gradient reductions that run after the last backward of a step.

    ``finish()`` runs, in Megatron's ``finalize_model_grads`` order: the dense bucketed
    all-reduce (tp > 1 without the distributed optimizer), the expert reduction (unless
    FSDP shards the experts), then the tied-embedding sum over the embedding group.
    """

    def __init__(self, chunks: list[DecoderChunk], ctx: ParallelContext, *, fsdp: bool) -> None:
        named = [(n, p) for chunk in chunks for n, p in chunk.named_parameters()]
        dense = [p for n, p in named if not is_expert_parameter(n)]
        experts = [p for n, p in named if is_expert_parameter(n)]
        bucket = ctx.plan.bucket_size_params()
        self.dense: BucketedAllReduce | None = None
        if not fsdp and ctx.size("tp") > 1 and ctx.size("dp_cp") > 1:
            self.dense = BucketedAllReduce(
                dense, ctx.group("dp_cp"), bucket_numel=bucket, divide_by=ctx.size("dp_cp")
            )
        self.experts: BucketedAllReduce | None = None
        if experts and not fsdp and ctx.world_size > 1:
            divide = ctx.size("dp") * ctx.size("cp")
            self.experts = BucketedAllReduce(
                experts, ctx.group("edp"), bucket_numel=bucket, divide_by=divide
            )
        self.tied = [
            p
            for chunk in chunks
            for p in (
                chunk.embedding.token.weight if chunk.embedding is not None else None,
                chunk.output.weight if chunk.output is not None else None,
            )
            if p is not None
        ]
        # Only the first and the last pipeline stage hold a copy of a tied embedding.
        tied = chunks[0].spec.tied_embeddings and bool(self.tied)
        self.embedding_group = ctx.group("embedding") if tied else None

    @torch.no_grad()
    def finish(self) -> None:
        """Run the reductions of this rank."""
        if self.dense is not None:
            self.dense.sync()
        if self.experts is not None:
            self.experts.sync()
        if self.embedding_group is not None:
            for param in self.tied:
                if param.grad is None:  # both ends must join the collective
                    param.grad = torch.zeros_like(param)
                param.grad = matching_placements(param.grad, param)
                dist.all_reduce(local_tensor(param.grad), group=self.embedding_group)


def set_gradient_sync(parts: list[nn.Module], enabled: bool) -> None:
    """Turn the data-parallel reduction of the next backward on or off (accumulation)."""
    for part in parts:
        if isinstance(part, FSDPModule):
            part.set_requires_gradient_sync(enabled)
