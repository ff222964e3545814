"""Activation checkpointing in its chain: what the executor's recompute
(`torch.utils.checkpoint`, non-reentrant) pays per checkpointed call and per saved tensor,
timed among layers of host work rather than in a loop of checkpoints alone.

Why in context: the figures of `profiles.profiler.framework` (``checkpoint_call``,
``checkpoint_tensor``: chains of multiplications checkpointed back to back) time the hooks
with their data hot in the caches and the allocator warm; between layers of host work a
checkpointed call finds neither, and costs several times its loop figure per call beyond
the rerun.

Probe: every rank runs a chain of `CHAIN_LAYERS` blocks, each of `TENSORS` weights of
`WIDTH` x `WIDTH` fp32 doing ``work`` products of its (`TOKENS`, `WIDTH`) input with its
weights in turn, each with a tanh, plus the residual (`SAVED_PER_PRODUCT` tensors saved per
product: the product's two operands and the tanh's output). Two variants against the
plain chain, in rounds (`profiles.profiler.in_context`) at two levels of host work
(`TENSORS` and `WORK_GEMMS` products per block):

- ``ckpt_full``: every block under its own checkpoint (``work`` · `SAVED_PER_PRODUCT`
  tensors saved per call; the backward reruns the block's forward);
- ``ckpt_part``: each block's last product and tanh under a checkpoint
  (`SAVED_PER_PRODUCT` tensors per call; the backward reruns that product).

Records (`OverheadTiming`, seconds per block): ``ckpt_full_<pass>_w<level>`` and
``ckpt_part_<pass>_w<level>`` (the variant's pass less the plain chain's, the rerun
included), ``ckpt_layer_<pass>_w<level>`` (the plain chain's pass per block).
`costmodel.runtimes.torch.checkpoint_rates` turns them into a cost per call and per saved tensor.
"""

from __future__ import annotations

import torch

from profiles.profiler.compute import Runner
from profiles.profiler.in_context import (
    BLOCK_LEVELS,
    CHAIN_LAYERS,
    TOKENS,
    WIDTH,
    WorkBlock,
    product,
    time_in_context,
    timed_passes,
)
from profiles.profiler.timing import OverheadTiming

SAVED_PER_PRODUCT = 3
"""Tensors autograd saves per product and tanh (both operands of the product, the tanh's
output)."""
LEVELS = BLOCK_LEVELS
VARIANTS = ("plain", "full", "part")
"""Chains of one round: the base, then the variants recorded as ``ckpt_<variant>``."""


def _checkpointed(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    from torch.utils.checkpoint import checkpoint

    return checkpoint(product, h, weight, use_reentrant=False)


class _Chain(torch.nn.Module):
    def __init__(self, work: int, variant: str, device: torch.device) -> None:
        super().__init__()
        self.full = variant == "full"
        self.blocks = torch.nn.ModuleList(
            WorkBlock(work, device, _checkpointed if variant == "part" else product)
            for _ in range(CHAIN_LAYERS)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.full else block(x)
        return x


def time_checkpoint_context(run: Runner) -> tuple[OverheadTiming, ...]:
    """The ``ckpt_full_*``, ``ckpt_part_*`` and ``ckpt_layer_*`` records of the module doc
    (on any number of ranks: on several, every rank runs its chains between barriers)."""
    x = run.randn(TOKENS, WIDTH, grad=True)
    chains = {work: [_Chain(work, v, run.device) for v in VARIANTS] for work in LEVELS}
    return time_in_context(
        run,
        lambda work, variant: timed_passes(run, lambda: chains[work][variant](x)),
        levels=LEVELS,
        extras=tuple(f"ckpt_{v}" for v in VARIANTS[1:]),
        layer="ckpt_layer",
        per=(CHAIN_LAYERS, CHAIN_LAYERS),
    )
