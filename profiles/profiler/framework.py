"""Host costs of the training framework's machinery, beyond one operator's dispatch.

A CPU training step spends much of its time in autograd and DTensor bookkeeping rather
than in kernels; these timings let the cost model count that time instead of guessing it.
Every quantity is per operator (or per call) of a tiny tensor, so the work is negligible:

- ``autograd_backward_node`` and ``autograd_backward_call``: the backward of recorded
  chains of `SHORT_CHAIN` and `LONG_CHAIN` multiplications; the per-node cost is the
  slope between the two lengths (each long-chain backward against the short one timed
  right before it) and the per-call cost (engine start, graph walk setup) the intercept.
  The chain of `compute.time_overheads` mixes the two (one call over `compute.CHAIN_LENGTH` nodes).
- DTensor (torch.distributed.tensor, what tensor parallelism runs on), on a one-dimensional
  mesh over every rank with no communication involved: ``dtensor_forward`` and
  ``dtensor_backward`` per element-wise operator of a recorded chain of replicated
  DTensors (slope between the two chain lengths, as above); ``dtensor_from_local`` and
  ``dtensor_to_local`` per call; ``dtensor_linear_forward`` and ``dtensor_linear_backward``
  per ``F.linear`` of a replicated 3-D input and a row-sharded weight (the column-parallel
  layout), the backward computing both the input and the weight gradient, net of
  ``autograd_backward_call``. A wrap, linear and unwrap among layers of host work:
  `profiles.profiler.dtensor_context`.

- a sequence-parallel RMSNorm (`profiles.profiler.dtensor_norm`): ``dtensor_norm_forward``
  and ``dtensor_norm_backward``, per call of the norm on a sequence-sharded DTensor reached
  cold.

- FSDP2 (``fully_shard``, the executor's distributed optimizer), on a mesh over every
  rank, as training shards: a root holding `FSDP_BLOCKS` fully-sharded blocks of one
  `FSDP_BLOCK_WIDTH`-square weight each, timed forward and backward (wall clock, every
  rank at once) against the same blocks unsharded, step by step in adjacent pairs from a
  barrier (`compute.Runner.paired`: separate runs of each form, a median apart, leave the
  difference to the host's changing load). ``fsdp_gather`` is the cost of one
  module's parameter all-gather (copy-in, the collective of `FSDP_PROBE_BYTES` and its
  wait across the ranks, copy-out, hooks; every module gathers in forward and again in
  backward), measured with gradient synchronization off; ``fsdp_reduce`` the extra cost
  per module when the backward also reduce-scatters the gradients. ``fsdp_gather_tensor``
  and ``fsdp_reduce_tensor`` are the extra cost per further parameter tensor of a module:
  blocks of `FSDP_TENSORS` weights against blocks of one (copy-in and copy-out, views and
  hooks per tensor). On one rank no collective runs and the figures are host cost alone.
  ``dtensor_adamw`` is `torch.optim.AdamW.step` per parameter tensor of those sharded
  (DTensor) parameters. The gathers among layers of host work, at a layer's size:
  `profiles.profiler.fsdp_context`.

- activation checkpointing (``torch.utils.checkpoint``, non-reentrant: the executor's
  recompute): recorded chains run under a checkpoint against the same chains without, net
  of the forward the checkpoint reruns; ``checkpoint_tensor`` is the cost per saved tensor
  (a pack hook in forward, another in the rerun, an unpack hook in backward; one tensor per
  multiplication of the chain), the slope between the two chain lengths, and
  ``checkpoint_call`` the cost per checkpointed call, the intercept. The checkpoint among
  layers of host work, whole blocks and a block's last product:
  `profiles.profiler.checkpoint_context`.

- a mixture-of-experts layer's token routing (`profiles.profiler.routing`): ``routing_op``,
  per operator of the routing bookkeeping reached cold.

- the functional and DTensor forms of the collectives (`profiles.profiler.collective_forms`):
  ``functional_<op>`` and ``redistribute_<op>``.

- the host probe (`profiles.host_probe`): ``host_probe`` is one call of the probe, every
  rank at once, the reference the executor's per-run probe is read against. The profiler
  times it before the compute sweep, here and after the collective sweep and pools the
  samples (`with_moment_samples`), so that it describes the host over the whole profile: a
  spell of other load over one window once put a 1-rank profile's probe at 1.65x the
  2-rank profile's, while its other figures were not slower. The ranks' arrival skew after
  host work (``sync_wait``, `profiles.profiler.collective_forms`) is pooled over the same
  three moments.

The DTensor, DTensor-norm, FSDP2 and collective-form points need an initialized process group
(every rank of a profiling world has one); without it they are left out.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from profiles.profiler.checkpoint_context import time_checkpoint_context
from profiles.profiler.collective_forms import time_collective_forms
from profiles.profiler.compute import Runner
from profiles.profiler.dtensor_context import time_dtensor_context
from profiles.profiler.dtensor_norm import time_dtensor_norm
from profiles.profiler.fsdp_context import time_fsdp_context
from profiles.profiler.moe_exchange import time_moe_exchange
from profiles.profiler.op_mix import time_op_mix
from profiles.profiler.routing import time_routing
from profiles.profiler.timing import WALL_CLOCK, OverheadTiming, time_calls

SHORT_CHAIN = 16
"""Operators in the shorter recorded chain."""
LONG_CHAIN = 96
"""Operators in the longer recorded chain."""
FSDP_BLOCKS = 4
"""Fully-sharded blocks under the FSDP2 root of the timing."""
FSDP_BLOCK_WIDTH = 8
"""Rows and columns of each block's one weight."""
FSDP_TENSORS = 9
"""Weights per block of the many-tensor FSDP2 timing (a Llama layer's count: four
attention and three MLP matrices, two norms)."""
FSDP_PAIRS = 48
"""Adjacent (simpler, sharded) step pairs per FSDP2 figure and block count."""
FSDP_PAIRS_PER_SAMPLE = 8
"""Pairs whose median difference makes one sample."""
FSDP_PROBE_BYTES = FSDP_BLOCK_WIDTH * FSDP_BLOCK_WIDTH * 4
"""Bytes one probe module gathers or reduces (fp32): the collective the ``fsdp_gather``
and ``fsdp_reduce`` figures already hold."""


def _chain(leaf: torch.Tensor, factor: torch.Tensor, length: int) -> torch.Tensor:
    z = leaf
    for _ in range(length):
        z = z * factor
    return z


def _backward_slope(
    run: Runner, leaf: torch.Tensor, factor: torch.Tensor
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per-sample (forward per op, backward per node, backward per call) of chains built
    from ``leaf`` and ``factor``. Each forward sample of the long chain is set against the
    median of the short one (a median is steadier than a pairing of noisy samples). The
    backwards of the two lengths alternate, one call each, so that each long one is set
    against a short one of the same state of the host: timed apart, a slow spell over the
    long chain's samples would go into the slope and leave the intercept near 0. Backward
    samples are net of the median forward of their length."""
    forward: dict[int, float] = {}
    per_op: tuple[float, ...] = ()
    steps: dict[int, Callable[[], None]] = {}
    for length in (SHORT_CHAIN, LONG_CHAIN):
        samples = run.time(lambda n=length: _chain(leaf, factor, n))
        forward[length] = statistics.median(samples)
        per_op = samples  # the long chain's, once the loop ends
        grad = torch.ones_like(_chain(leaf, factor, length))

        def step(n: int = length, g: torch.Tensor = grad) -> None:
            torch.autograd.backward(_chain(leaf, factor, n), g)

        steps[length] = step
    span = LONG_CHAIN - SHORT_CHAIN
    per_op = tuple(max(t - forward[SHORT_CHAIN], 0.0) / span for t in per_op)
    for _ in range(run.budget.warmup_calls):
        steps[SHORT_CHAIN]()
        steps[LONG_CHAIN]()
    short, long = [], []
    for _ in range(len(per_op)):  # as many samples as the ranks agreed on for the forward
        for length, out in ((SHORT_CHAIN, short), (LONG_CHAIN, long)):
            (t,) = time_calls(steps[length], inner=1, repeats=1, cuda=run.cuda, clock=run.clock)
            out.append(t - forward[length])
    nodes = tuple(max(b - a, 0.0) / span for a, b in zip(short, long, strict=True))
    node = statistics.median(nodes)
    calls = tuple(max(t - SHORT_CHAIN * node, 0.0) for t in short)
    return per_op, nodes, calls


def time_autograd(run: Runner) -> tuple[OverheadTiming, ...]:
    """Per-node and per-call cost of the autograd engine (see the module doc)."""
    leaf, factor = run.randn(1, grad=True), run.randn(1)
    _, nodes, calls = _backward_slope(run, leaf, factor)
    return (
        OverheadTiming(op="autograd_backward_node", times_s=nodes),
        OverheadTiming(op="autograd_backward_call", times_s=calls),
    )


def time_dtensor(run: Runner, call_s: float) -> tuple[OverheadTiming, ...]:
    """DTensor dispatch costs on a mesh over every rank (see the module doc); empty
    without a process group. ``call_s`` is the autograd per-call cost to take out of the
    linear backward."""
    if not (dist.is_available() and dist.is_initialized()):
        return ()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    mesh = init_device_mesh(run.device.type, (dist.get_world_size(),))

    def replicated(*shape: int, grad: bool = False) -> DTensor:
        local = run.randn(*shape)
        return DTensor.from_local(local, mesh, [Replicate()], run_check=False).requires_grad_(grad)

    forward, nodes, _ = _backward_slope(run, replicated(8, 8, grad=True), replicated(8, 8))
    local = run.randn(2, 4, 8)
    x = replicated(2, 4, 8, grad=True)
    weight = DTensor.from_local(run.randn(8, 8), mesh, [Shard(0)], run_check=False)
    weight.requires_grad_(True)
    out = F.linear(x, weight)
    grad = torch.ones_like(out)
    linear_forward = run.time(lambda: F.linear(x, weight))
    median_forward = statistics.median(linear_forward)
    linear_both = run.time(lambda: torch.autograd.backward(F.linear(x, weight), grad))
    linear_backward = tuple(max(t - median_forward - call_s, 0.0) for t in linear_both)
    return (
        OverheadTiming(op="dtensor_forward", times_s=forward),
        OverheadTiming(op="dtensor_backward", times_s=nodes),
        OverheadTiming(
            op="dtensor_from_local",
            times_s=run.time(
                lambda: DTensor.from_local(local, mesh, [Replicate()], run_check=False)
            ),
        ),
        OverheadTiming(op="dtensor_to_local", times_s=run.time(lambda: out.to_local())),
        OverheadTiming(op="dtensor_linear_forward", times_s=linear_forward),
        OverheadTiming(op="dtensor_linear_backward", times_s=linear_backward),
    )


def _blocks(run: Runner, tensors: int) -> torch.nn.Sequential:
    """`FSDP_BLOCKS` blocks, each a chain of ``tensors`` square weights."""
    width = FSDP_BLOCK_WIDTH
    with torch.device(run.device):
        return torch.nn.Sequential(
            *(
                torch.nn.Sequential(
                    *(torch.nn.Linear(width, width, bias=False) for _ in range(tensors))
                )
                for _ in range(FSDP_BLOCKS)
            )
        )


def _fsdp_per_module(
    run: Runner, mesh, tensors: int
) -> tuple[tuple[float, ...], tuple[float, ...], torch.nn.Module]:
    """(gather, reduce) per module per sample for blocks of ``tensors`` weights, and the
    sharded root."""
    from torch.distributed.fsdp import fully_shard

    plain, sharded = _blocks(run, tensors), _blocks(run, tensors)
    for block in sharded:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(sharded, mesh=mesh, reshard_after_forward=True)
    x = run.randn(2, FSDP_BLOCK_WIDTH)
    modules = FSDP_BLOCKS + 1

    def step(model: torch.nn.Module) -> None:
        model(x).sum().backward()

    def gather_step() -> None:
        sharded.set_requires_gradient_sync(False)
        step(sharded)

    def reduce_step() -> None:
        sharded.set_requires_gradient_sync(True)
        step(sharded)

    pairing = {"pairs": FSDP_PAIRS, "per_sample": FSDP_PAIRS_PER_SAMPLE}
    gather_extra = run.paired(gather_step, lambda: step(plain), dist.barrier, **pairing)
    reduce_extra = run.paired(reduce_step, gather_step, dist.barrier, **pairing)
    gather = tuple(max(t, 0.0) / (2 * modules) for t in gather_extra)
    reduce = tuple(max(t, 0.0) / modules for t in reduce_extra)
    return gather, reduce, sharded


def _per_tensor(one: tuple[float, ...], many: tuple[float, ...]) -> tuple[float, ...]:
    """Per further tensor: each sample of the many-tensor figure against the one-tensor
    median, over `FSDP_TENSORS` - 1 tensors."""
    base = statistics.median(one)
    return tuple(max(t - base, 0.0) / (FSDP_TENSORS - 1) for t in many)


def time_fsdp(run: Runner) -> tuple[OverheadTiming, ...]:
    """FSDP2 gather, reduce and sharded AdamW costs (see the module doc); empty without a
    process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return ()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(run.device.type, (dist.get_world_size(),))
    # A rank waits for the others inside every gather: wall time, as a training step pays.
    run = dataclasses.replace(run, clock=WALL_CLOCK)
    gather, reduce, sharded = _fsdp_per_module(run, mesh, 1)
    gather_many, reduce_many, _ = _fsdp_per_module(run, mesh, FSDP_TENSORS)
    optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-6, weight_decay=0.0)
    sharded(run.randn(2, FSDP_BLOCK_WIDTH)).sum().backward()
    adamw = tuple(t / FSDP_BLOCKS for t in run.time(optimizer.step))
    return (
        OverheadTiming(op="fsdp_gather", times_s=gather),
        OverheadTiming(op="fsdp_reduce", times_s=reduce),
        OverheadTiming(op="fsdp_gather_tensor", times_s=_per_tensor(gather, gather_many)),
        OverheadTiming(op="fsdp_reduce_tensor", times_s=_per_tensor(reduce, reduce_many)),
        OverheadTiming(op="dtensor_adamw", times_s=adamw),
    )


def time_checkpoint(run: Runner) -> tuple[OverheadTiming, ...]:
    """Non-reentrant activation checkpointing costs (see the module doc)."""
    from torch.utils.checkpoint import checkpoint

    leaf, factor = run.randn(1, grad=True), run.randn(1)
    extra: dict[int, tuple[float, ...]] = {}
    for length in (SHORT_CHAIN, LONG_CHAIN):

        def plain(n: int = length) -> None:
            _chain(leaf, factor, n).backward()

        def checkpointed(n: int = length) -> None:
            checkpoint(_chain, leaf, factor, n, use_reentrant=False).backward()

        rerun = statistics.median(run.time(lambda n=length: _chain(leaf, factor, n)))
        base = statistics.median(run.time(plain))
        extra[length] = tuple(t - base - rerun for t in run.time(checkpointed))
    span = LONG_CHAIN - SHORT_CHAIN
    short = statistics.median(extra[SHORT_CHAIN])
    per_tensor = tuple(max(t - short, 0.0) / span for t in extra[LONG_CHAIN])
    tensor = statistics.median(per_tensor)
    calls = tuple(max(t - SHORT_CHAIN * tensor, 0.0) for t in extra[SHORT_CHAIN])
    return (
        OverheadTiming(op="checkpoint_tensor", times_s=per_tensor),
        OverheadTiming(op="checkpoint_call", times_s=calls),
    )


def time_host_probe(run: Runner) -> tuple[OverheadTiming, ...]:
    """The host probe, wall time (module doc)."""
    from profiles.host_probe import host_probe

    timed = dataclasses.replace(run, clock=WALL_CLOCK)
    return (OverheadTiming(op="host_probe", times_s=timed.time(host_probe())),)


def with_moment_samples(
    records: list[OverheadTiming], more: tuple[OverheadTiming, ...]
) -> list[OverheadTiming]:
    """``records`` with the samples of ``more`` (points timed again at other moments of the
    profile: the host probe, the arrival skew) added to the record of the same point; a
    point of ``more`` without a record is left out."""
    extra: dict[str, tuple[float, ...]] = {}
    for r in more:
        extra[r.op] = extra.get(r.op, ()) + r.times_s
    return [dataclasses.replace(r, times_s=r.times_s + extra.get(r.op, ())) for r in records]


def time_framework_overheads(run: Runner) -> tuple[OverheadTiming, ...]:
    """The autograd, checkpoint (alone, then in context: `checkpoint_context`), routing,
    DTensor (alone, then its linear in context: `dtensor_context`), DTensor-norm,
    operator-mix (`op_mix`), FSDP2 (alone, then in context: `fsdp_context`),
    collective-form, MoE-exchange (`moe_exchange`) and host-probe points of the module
    doc, in that order."""
    autograd = time_autograd(run)
    call_s = statistics.median(autograd[1].times_s)
    return (
        *autograd,
        *time_checkpoint(run),
        *time_checkpoint_context(run),
        *time_routing(run),
        *time_dtensor(run, call_s),
        *time_dtensor_context(run),
        *time_dtensor_norm(run),
        *time_op_mix(run),
        *time_fsdp(run),
        *time_fsdp_context(run),
        *time_collective_forms(run),
        *time_moe_exchange(run),
        *time_host_probe(run),
    )
