"""Host cost of a sequence-parallel RMSNorm: the norm on a sequence-sharded DTensor.

Under sequence parallelism the executor's norms run on the residual stream's shard as
DTensor modules (``SequenceParallel``): ``from_local`` of the shard, then every operator of
`executor.model.RMSNorm` (``float``, ``pow``, ``mean``, ``add``, ``rsqrt``, two ``mul``,
``type_as``) through DTensor's dispatch, and in backward each of their nodes' kernels
through it again. Counted as DTensor element-wise operators at the profile's chain rate
(``dtensor_forward``, a hot loop of one replicated multiplication) such a norm is priced
at a fraction of what it costs in a step, where it runs cold, with module hooks, after
other work; timed after a cold sweep (`routing.cold_sweep`) it comes close to that.

``dtensor_norm_forward`` and ``dtensor_norm_backward`` are those two passes per call,
each reached after a cold sweep, on a ``NORM_TOKENS`` x ``NORM_WIDTH`` shard (small: the
cost model counts the norm's bytes apart), on a one-dimensional mesh over every rank with
no communication involved; a sample is the median of `routing.ROUNDS_PER_SAMPLE` calls.
The operators are those of `executor.model.RMSNorm`, written out here (profiles cannot
import the executor). Needs an initialized process group; without one it is left out.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from profiles.profiler.compute import Runner
from profiles.profiler.routing import cold_sweep, per_sample
from profiles.profiler.timing import OverheadTiming

NORM_TOKENS = 32
"""Sequence positions of the local shard."""
NORM_WIDTH = 64
"""Hidden width of the shard."""
NORM_ROUNDS = 64
"""Timed calls of each pass."""
NORM_EPS = 1e-5
"""The norm's epsilon."""


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The operators of `executor.model.RMSNorm.forward`."""
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    return (y * weight.float()).type_as(x)


def time_dtensor_norm(run: Runner) -> tuple[OverheadTiming, ...]:
    """``dtensor_norm_forward`` and ``dtensor_norm_backward`` per call (module doc); empty
    without a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return ()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    mesh = init_device_mesh(run.device.type, (dist.get_world_size(),))
    weight = DTensor.from_local(
        torch.ones(NORM_WIDTH, device=run.device), mesh, [Replicate()], run_check=False
    ).requires_grad_(True)
    grad = torch.ones(1, NORM_TOKENS, NORM_WIDTH, device=run.device)
    sweep = cold_sweep(run)

    def timed(fn: Callable[[], torch.Tensor | None]) -> tuple[float, torch.Tensor | None]:
        sweep()
        start = run.clock()
        out = fn()
        if run.cuda:
            torch.cuda.synchronize()
        return run.clock() - start, out

    forward, backward = [], []
    for i in range(run.budget.warmup_calls + NORM_ROUNDS):
        local = run.randn(1, NORM_TOKENS, NORM_WIDTH, grad=True)
        fwd_s, out = timed(
            lambda x=local: rms_norm(
                DTensor.from_local(x, mesh, [Shard(1)], run_check=False), weight
            ).to_local()
        )
        bwd_s, _ = timed(lambda y=out: y.backward(grad))  # type: ignore[union-attr]
        if i >= run.budget.warmup_calls:
            forward.append(fwd_s)
            backward.append(bwd_s)
    return (
        OverheadTiming(op="dtensor_norm_forward", times_s=per_sample(forward)),
        OverheadTiming(op="dtensor_norm_backward", times_s=per_sample(backward)),
    )
