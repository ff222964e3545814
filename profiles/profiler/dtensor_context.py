"""DTensor's linear in its chain: what a tensor-parallel linear's DTensor bookkeeping costs
among layers of host work, rather than in the loops of `profiles.profiler.framework`
(``dtensor_from_local``, ``dtensor_linear_<pass>``, ``dtensor_to_local``).

Why in context: in a training step a column-parallel linear, with the wraps and unwraps
around it, runs DTensor's Python (placement checks, sharding propagation, pytree walks)
cold after a layer of other work, as the checkpoint's hooks do
(`profiles.profiler.checkpoint_context`), and costs several times what the hot loop
figures price beyond the plain product.

Probe: every rank runs a chain of `CHAIN_LAYERS` work blocks (`in_context.WorkBlock`) whose
last product is either plain (the base) or DTensor's (``dtensor``): the block's activation
wrapped with ``DTensor.from_local`` (replicated), multiplied by a replicated DTensor weight
with ``F.linear``, unwrapped with ``to_local``, then the tanh. Every placement is replicated,
so neither pass communicates on any number of ranks: the difference is the bookkeeping
alone, the same operators as the loop figures. Two levels of host work (`BLOCK_LEVELS`),
in rounds (`profiles.profiler.in_context`).

Records (`OverheadTiming`, seconds per block): ``dtensor_context_<pass>_w<level>`` (the
variant's pass less the base's: one wrap, linear and unwrap in context) and
``dtensor_layer_<pass>_w<level>`` (the base's pass per block).
`costmodel.runtimes.torch.dtensor_rates` turns them into a factor on the loop figures. Nothing
without a process group (DTensor needs a mesh), like the loop figures.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from profiles.profiler import in_context
from profiles.profiler.compute import Runner
from profiles.profiler.timing import OverheadTiming

LEVELS = in_context.BLOCK_LEVELS
EXTRA = "dtensor_context"
LAYER = "dtensor_layer"


class DTensorLast:
    """A block's last product through DTensor: wrap the activation, ``F.linear`` with a
    replicated DTensor weight (its own parameter, as a tensor-parallel module holds), unwrap,
    tanh. The plain weight the block passes is left unused (its gradient stays None)."""

    def __init__(self, mesh, device: torch.device) -> None:
        from torch.distributed.tensor import DTensor, Replicate

        self.mesh = mesh
        local = torch.randn(in_context.WIDTH, in_context.WIDTH, device=device) * 0.05
        self.weight = torch.nn.Parameter(
            DTensor.from_local(local, mesh, [Replicate()], run_check=False)
        )

    def __call__(self, h: torch.Tensor, _weight: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Replicate

        x = DTensor.from_local(h, self.mesh, [Replicate()], run_check=False)
        # the weight is (out, in) as nn.Linear's; F.linear computes x @ weight.T
        return torch.tanh(F.linear(x, self.weight).to_local())


def _chain(work: int, mesh, device: torch.device, dtensor: bool) -> torch.nn.Module:
    return torch.nn.Sequential(
        *(
            in_context.WorkBlock(
                work, device, DTensorLast(mesh, device) if dtensor else in_context.product
            )
            for _ in range(in_context.CHAIN_LAYERS)
        )
    )


def time_dtensor_context(run: Runner) -> tuple[OverheadTiming, ...]:
    """The ``dtensor_context_*`` and ``dtensor_layer_*`` records of the module doc; empty
    without a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return ()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(run.device.type, (dist.get_world_size(),))
    x = run.randn(in_context.TOKENS, in_context.WIDTH, grad=True)
    chains = {work: [_chain(work, mesh, run.device, d) for d in (False, True)] for work in LEVELS}
    return in_context.time_in_context(
        run,
        lambda work, variant: in_context.timed_passes(run, lambda: chains[work][variant](x)),
        levels=LEVELS,
        extras=(EXTRA,),
        layer=LAYER,
        per=(in_context.CHAIN_LAYERS, in_context.CHAIN_LAYERS),
    )
