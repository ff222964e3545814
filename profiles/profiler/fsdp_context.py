"""FSDP2's parameter gathers in their chain: what the executor's distributed optimizer
(`executor.data_parallel.apply_fsdp`, ``reshard_after_forward``) pays per module and pass,
timed among layers of host work rather than alone.

Why in context: each gather waits for the peer rank, which reaches it after its own layer
of host work, and its buffers are the size of a layer's weights. The figures of
`profiles.profiler.framework` (blocks of one 8x8 weight without work between them, plus a
figure per further tensor and the collective's fit beyond the probe's bytes) time an idle
gather; in a chain of layers a gather also pays the peer's drift and buffers of a layer's
size, and grows with the host work between the gathers.

Probe: every rank runs a chain of `CHAIN_LAYERS` blocks, each of `TENSORS` weights of
`WIDTH` x `WIDTH` fp32 (`GATHER_BYTES` per block: the tiny model's layer), doing ``work``
products of its (`TOKENS`, `WIDTH`) input with its weights in turn, each with a tanh, plus
the residual (at least one product per weight: every weight gets a gradient, as in
training); each block ``fully_shard``-ed over every rank and the chain too (its root,
without weights of its own: the blocks' gathers are what is measured), gradient
synchronization off (the reduce-scatter of the last microbatch is the ``fsdp_reduce``
figure). The base is the same chain unsharded. Timed in pairs
(`profiles.profiler.in_context`) at two levels of host work: `TENSORS` and `WORK_GEMMS`
products per block.

Records (`OverheadTiming`, seconds per block):
- ``fsdp_context_<pass>_w<level>``: the sharded chain's pass less the base's (a forward
  gather, or the backward's gather again);
- ``fsdp_layer_<pass>_w<level>``: the base's pass: the host work per block at that level.

Left out on one rank (no collective: `framework`'s figures are the host cost alone).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from profiles.profiler.compute import Runner
from profiles.profiler.in_context import (
    BLOCK_LEVELS,
    CHAIN_LAYERS,
    TENSORS,
    TOKENS,
    WIDTH,
    WorkBlock,
    time_in_context,
    timed_passes,
)
from profiles.profiler.timing import OverheadTiming

GATHER_BYTES = TENSORS * WIDTH * WIDTH * 4
"""Bytes of one block's gathered parameters (fp32)."""
LEVELS = BLOCK_LEVELS


def _chains(run: Runner, work: int, mesh) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(unsharded, sharded) chains of the same weights' shapes."""
    from torch.distributed.fsdp import fully_shard

    plain, sharded = (
        torch.nn.Sequential(*(WorkBlock(work, run.device) for _ in range(CHAIN_LAYERS)))
        for _ in range(2)
    )
    for block in sharded:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(sharded, mesh=mesh, reshard_after_forward=True)
    sharded.set_requires_gradient_sync(False)
    return plain, sharded


def time_fsdp_context(run: Runner) -> tuple[OverheadTiming, ...]:
    """The ``fsdp_context_*`` and ``fsdp_layer_*`` records of the module doc; empty without a
    process group of several ranks."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return ()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(run.device.type, (dist.get_world_size(),))
    x = run.randn(TOKENS, WIDTH, grad=True)
    chains = {work: _chains(run, work, mesh) for work in LEVELS}
    return time_in_context(
        run,
        lambda work, variant: timed_passes(run, lambda: chains[work][variant](x)),
        levels=LEVELS,
        extras=("fsdp_context",),
        layer="fsdp_layer",
        per=(CHAIN_LAYERS, CHAIN_LAYERS),
    )
