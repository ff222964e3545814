"""The forms a training step issues its collectives in, against the plain call the
collective sweep (`profiles.profiler.comm`) times.

- functional collectives (``torch.distributed._functional_collectives``: DTensor's
  redistributions, the executor's context- and expert-parallel exchanges): for each op of
  `FUNCTIONAL_OPS`, over every rank at once (wall time) at `FUNCTIONAL_PROBE_BYTES`, the
  functional call and its ``wait_tensor`` against the plain ``torch.distributed`` call the
  collective sweep times, call by call: ``functional_<op>`` is what the functional form
  costs beyond the plain call, the median over pairs of adjacent calls (`compute.Runner.paired`).
- DTensor redistributions (tensor and sequence parallelism, `REDISTRIBUTIONS`): a
  ``(1, S, D)`` fp32 DTensor of `FUNCTIONAL_PROBE_BYTES` on a mesh over every rank,
  redistributed and its local result waited for, paired the same way with the same op's
  functional call: ``redistribute_<op>`` is what DTensor adds on top (its planning in
  Python, the layout copies a gather or scatter along the sequence dim needs, the result's
  ``to_local``).

- the autograd all-to-all (``all_to_all_single_autograd``, the executor's MoE token
  exchange): ``autograd_all_to_all`` is what one exchange costs, forward call and
  ``wait_tensor`` and the backward through it (the gradient's all-to-all inside the
  autograd engine), beyond two plain calls and the ``backward()`` of a one-node graph,
  paired the same way at `FUNCTIONAL_PROBE_BYTES`. The autograd form wraps its result in
  a tensor subclass and its backward waits through the engine, so one exchange costs
  several plain calls.

- pipelining's P2P posts (``torch.distributed.pipelining`` posts each send and each
  receive as its own ``batch_isend_irecv`` of one operation, and waits for it later):
  ``p2p_post`` is the mean time of posting one, every rank receiving a
  `FUNCTIONAL_PROBE_BYTES` message from the previous rank, computing, then sending one to
  the next, as a middle pipeline stage does; the waits are not timed. The mean, not a
  median: most posts take tens of microseconds and some take milliseconds, when the
  library's own thread holds the connection while the peer's message arrives, and a
  pipeline pays every one of them.

- the ranks' arrival skew after host work (``sync_wait``): every rank runs the same
  stretch of small products (`SYNC_WORK_GEMMS`, about 1 ms on a CPU core, as between two
  of a layer's collectives), then a plain all-to-all of 64 bytes (the MoE count exchange),
  and times the call; a sample is the mean of `SYNC_CALLS_PER_SAMPLE` calls less the
  fastest call of the probe. Back to back the calls' mean exceeds their minimum by what
  ``collective_excess`` reads from the sweep; after host work the ranks drift apart by
  the host's noise and the first to arrive waits for the other, by more the longer the
  host work. The figure follows the host's spells of other load, so the profiler times it
  again before the compute sweep and after the collective sweep (`time_sync_moment`) and
  pools the three moments' samples (`profiles.profiler.framework.with_moment_samples`), as
  it does the host probe.

Why pairs and medians: the extra is host work of a few hundred microseconds beside calls
whose time moves by more than that with the host's load (spells of other tenants last
seconds, single preemptions take milliseconds). A mean over alternating rounds of each
form carries the load of every round into the difference, which can then come out
negative; a pair sees one host state, and the median over pairs leaves the preemptions,
which hit either form, to the collective calls' excess
(`costmodel.runtimes.torch.host_rates`).

Left out on one rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from profiles.profiler.comm import collective_call, message_elements
from profiles.profiler.compute import Runner
from profiles.profiler.timing import WALL_CLOCK, OverheadTiming, steal_watched, unstolen

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

FUNCTIONAL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collectives timed in functional and plain form (`costmodel.runtimes.torch.host_rates` reads
them)."""
FUNCTIONAL_PROBE_BYTES = 1 << 16
"""Size of the functional-collective probe (nccl-tests convention): small enough that the
call's host cost, not the wire, dominates, as for the executor's per-layer exchanges."""
PAIRED_CALLS = 128
"""Calls of each form per op (`compute.Runner.paired`)."""
PAIRS_PER_SAMPLE = 16
"""Consecutive pairs whose median difference makes one sample."""
PAIRING = {"pairs": PAIRED_CALLS, "per_sample": PAIRS_PER_SAMPLE}
P2P_EXCHANGES = 64
"""Send-and-receive rounds of the P2P posting probe (two timed posts each)."""
P2P_WORK_GEMMS = 20
"""Products of two `P2P_WORK_WIDTH` squares between a stage's receive and its send (about
1 ms on a CPU core); rank r runs r more, so the ranks drift as pipeline stages do."""
P2P_WORK_WIDTH = 128
"""Side of the squares multiplied between the two posts."""
P2P_POSTS_PER_SAMPLE = 16
"""Posts whose mean makes one sample of ``p2p_post``."""
SYNC_WORK_GEMMS = 40
"""Products of a (32, 128) and a (128, 128) fp32 matrix before each timed ``sync_wait``
call (about 1 ms on a CPU core; each from the same operands, so no value drifts toward
denormals)."""
SYNC_CALLS = 64
"""Timed calls of the ``sync_wait`` probe."""
SYNC_CALLS_PER_SAMPLE = 16
"""Calls whose mean makes one sample of ``sync_wait``."""
SYNC_MESSAGE_BYTES = 64
"""The probe's all-to-all: eight int64 expert counts."""
REDISTRIBUTIONS = ("all_reduce", "all_gather", "reduce_scatter")
"""Collectives timed as DTensor redistributions: Partial -> Replicate (a row-parallel
output), Shard(1) -> Replicate (a sequence-parallel block input) and Partial -> Shard(1)
(a sequence-parallel row-parallel output)."""
PROBE_WIDTH = 128
"""Hidden size D of the redistributed tensor; its sequence S fills `FUNCTIONAL_PROBE_BYTES`."""


def _functional_call(op: str, elements: int, group: dist.ProcessGroup, run: Runner):
    """One functional ``op`` over ``elements`` fp32 values (nccl-tests sizes), waited for."""
    from torch.distributed import _functional_collectives as funcol

    x = torch.zeros(elements, dtype=torch.float32, device=run.device)
    part = torch.zeros(elements // dist.get_world_size(group), device=run.device)
    calls = {
        "all_reduce": lambda: funcol.all_reduce(x, "sum", group),
        "all_gather": lambda: funcol.all_gather_single(part, 0, group),
        "reduce_scatter": lambda: funcol.reduce_scatter_single(x, "sum", 0, group),
        "all_to_all": lambda: funcol.all_to_all_single(x, None, None, group),
    }
    call = calls[op]
    return lambda: funcol.wait_tensor(call())


def _autograd_exchange(elements: int, group: dist.ProcessGroup, run: Runner):
    """One autograd all-to-all over ``elements`` fp32 values, waited for, and the backward
    through it; and its base: two plain all-to-alls and the backward of a one-node graph."""
    from torch.distributed import _functional_collectives as funcol

    x = torch.zeros(elements, dtype=torch.float32, device=run.device, requires_grad=True)
    seed = torch.ones(elements, dtype=torch.float32, device=run.device)
    src, dst = torch.zeros_like(seed), torch.zeros_like(seed)

    def exchange() -> None:
        funcol.wait_tensor(funcol.all_to_all_single_autograd(x, None, None, group)).backward(seed)

    def base() -> None:
        dist.all_to_all_single(dst, src, group=group)
        dist.all_to_all_single(dst, src, group=group)
        (x * 1.0).backward(seed)

    return exchange, base


def _redistribution(
    op: str, elements: int, mesh: DeviceMesh, run: Runner
) -> Callable[[], torch.Tensor]:
    """One DTensor redistribution that issues ``op`` (`REDISTRIBUTIONS`) over ``elements``
    fp32 values on ``mesh`` (every rank), its local result waited for."""
    from torch.distributed import _functional_collectives as funcol
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    world = mesh.size()
    seq = max(elements // PROBE_WIDTH, world)
    source, target = {
        "all_reduce": ([Partial()], [Replicate()]),
        "all_gather": ([Shard(1)], [Replicate()]),
        "reduce_scatter": ([Partial()], [Shard(1)]),
    }[op]
    local_seq = seq // world if op == "all_gather" else seq
    local = torch.zeros(1, local_seq, PROBE_WIDTH, device=run.device)
    dt = DTensor.from_local(local, mesh, source, run_check=False)

    def call() -> torch.Tensor:
        out = dt.redistribute(mesh, target).to_local()
        return out.wait() if isinstance(out, funcol.AsyncCollectiveTensor) else out

    return call


def time_p2p_post(run: Runner) -> OverheadTiming:
    """``p2p_post``: seconds to post one P2P operation as pipelining does (module doc)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    after, before = (rank + 1) % world, (rank - 1) % world
    message = torch.zeros(FUNCTIONAL_PROBE_BYTES // 4, device=run.device)
    inbox = torch.empty_like(message)
    a, b = run.randn(P2P_WORK_WIDTH, P2P_WORK_WIDTH), run.randn(P2P_WORK_WIDTH, P2P_WORK_WIDTH)
    posts: list[float] = []

    def post(op: Callable, tensor: torch.Tensor, peer: int) -> list:
        start = run.clock()
        works = dist.batch_isend_irecv([dist.P2POp(op, tensor, peer)])
        posts.append(run.clock() - start)
        return works

    receive, send = (dist.irecv, inbox, before), (dist.isend, message, after)
    # NCCL runs a communicator's P2P operations in order on one stream: there the even
    # ranks send first, so that every send meets a posted receive.
    first, second = (send, receive) if run.cuda and rank % 2 == 0 else (receive, send)
    dist.barrier()
    for _ in range(run.budget.warmup_calls + P2P_EXCHANGES):
        works = post(*first)
        for _ in range(P2P_WORK_GEMMS + rank):  # the stage's compute, a little unequal
            a @ b
        works += post(*second)
        for work in works:
            work.wait()
    posts = posts[2 * run.budget.warmup_calls :]
    step = P2P_POSTS_PER_SAMPLE
    return OverheadTiming(
        op="p2p_post",
        times_s=tuple(sum(posts[i : i + step]) / step for i in range(0, len(posts), step)),
    )


def time_sync_wait(run: Runner) -> OverheadTiming:
    """``sync_wait``: the mean excess of a collective reached after host work (module doc).
    A sample during which the hypervisor took the machine's CPU is left out
    (`timing.unstolen`)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    call = collective_call(
        "all_to_all", SYNC_MESSAGE_BYTES, dist.group.WORLD, tuple(range(world)), rank, run.device
    )
    a, b = run.randn(32, P2P_WORK_WIDTH), run.randn(P2P_WORK_WIDTH, P2P_WORK_WIDTH)

    def timed_call() -> float:
        for _ in range(SYNC_WORK_GEMMS):
            torch.tanh(a @ b)
        if run.cuda:  # the work done, as a rank's host reaches the call
            torch.cuda.synchronize()
        start = run.clock()
        call()
        if run.cuda:
            torch.cuda.synchronize()
        return run.clock() - start

    dist.barrier()
    for _ in range(run.budget.warmup_calls):
        timed_call()
    samples = unstolen(
        [
            steal_watched(lambda: [timed_call() for _ in range(SYNC_CALLS_PER_SAMPLE)], run.steal)
            for _ in range(SYNC_CALLS // SYNC_CALLS_PER_SAMPLE)
        ]
    )
    fastest = min(t for calls in samples for t in calls)
    return OverheadTiming(
        op="sync_wait", times_s=tuple(sum(calls) / len(calls) - fastest for calls in samples)
    )


def _distributed() -> bool:
    """True with an initialized process group of several ranks."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() >= 2


def time_sync_moment(run: Runner) -> tuple[OverheadTiming, ...]:
    """``sync_wait`` alone, wall time, for the moments of the profile it is pooled over
    (`profiles.profiler.framework.with_moment_samples`); empty without a process group of
    several ranks."""
    if not _distributed():
        return ()
    return (time_sync_wait(dataclasses.replace(run, clock=WALL_CLOCK)),)


def time_collective_forms(run: Runner) -> tuple[OverheadTiming, ...]:
    """``functional_<op>``, ``redistribute_<op>``, ``autograd_all_to_all``, ``p2p_post``
    and ``sync_wait`` (module doc); empty
    without a process group of several ranks."""
    if not _distributed():
        return ()
    from torch.distributed.device_mesh import init_device_mesh

    group, world = dist.group.WORLD, dist.get_world_size()
    members, rank = tuple(range(world)), dist.get_rank()
    run = dataclasses.replace(run, clock=WALL_CLOCK)
    elements = message_elements(FUNCTIONAL_PROBE_BYTES, world)
    mesh = init_device_mesh(run.device.type, (world,))

    timings = []
    for op in FUNCTIONAL_OPS:
        plain = collective_call(op, FUNCTIONAL_PROBE_BYTES, group, members, rank, run.device)
        functional = _functional_call(op, elements, group, run)
        timings.append(
            OverheadTiming(
                op=f"functional_{op}",
                times_s=run.paired(functional, plain, dist.barrier, **PAIRING),
            )
        )
        if op in REDISTRIBUTIONS:
            redistribution = _redistribution(op, elements, mesh, run)
            timings.append(
                OverheadTiming(
                    op=f"redistribute_{op}",
                    times_s=run.paired(redistribution, functional, dist.barrier, **PAIRING),
                )
            )
    exchange, base = _autograd_exchange(elements, group, run)
    timings.append(
        OverheadTiming(
            op="autograd_all_to_all",
            times_s=run.paired(exchange, base, dist.barrier, **PAIRING),
        )
    )
    timings.append(time_p2p_post(run))
    timings.append(time_sync_wait(run))
    return tuple(timings)
