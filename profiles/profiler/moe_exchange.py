"""The expert-parallel token exchange in its layer: what the executor's MoE layer
(`executor.moe.MoE._dispatch_compute_combine` under ep > 1) pays for its exchanges, timed
in the pattern the layer issues them rather than call by call.

Why in context: in the executor's MoE layer every exchange waits for the peer, which
reaches it after its own stretch of host work, and a pass's backward waits inside the
autograd engine. Priced call by call from the collective sweep, the functional and autograd
forms and the drift after host work (`collective_forms`), the exchanges miss the waits
that the layer's pattern adds, which grow with the host work between the exchanges.

Probe: every rank runs a chain of `CHAIN_LAYERS` layers, each: ``work`` products of a
(T, D) by (D, D) fp32 matrix with a tanh (the layer's attention and routing: host work
between the exchanges), the count exchange (a plain ``all_to_all_single`` of int64
counts) and two ``tolist``, the token exchange (``all_to_all_single_autograd``, waited
for) of A = 2T rows (top-2 routing), an expert product on the received rows in a shuffled
order, the return exchange and the combine; then the backward through the chain (two
autograd exchanges per layer). The base is the same chain with each exchange a local copy
of the same shape, timed in pairs (`profiles.profiler.in_context`) at two levels of host
work: none and `WORK_GEMMS` products per layer.

Records (`OverheadTiming`, seconds per layer):
- ``moe_exchange_<pass>_w<level>``: the exchanged chain's pass less the base's, per layer
  (``pass``: forward, backward; ``level``: 0 without work, 1 with `WORK_GEMMS`);
- ``moe_layer_<pass>_w<level>``: the base's pass per layer: the host work between two
  layers' exchanges at that level, which `costmodel.runtimes.torch.in_context_rates.InContext`
  interpolates on.

The token exchanges carry `TOKEN_BYTES` each (T = `TOKENS` tokens of D = `WIDTH` fp32 values,
two choices each: the tiny MoE model at one sequence of 128). Left out on one rank.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from profiles.profiler.compute import Runner
from profiles.profiler.in_context import CHAIN_LAYERS, WORK_GEMMS, time_in_context, timed_passes
from profiles.profiler.timing import OverheadTiming

TOKENS = 128
"""Tokens T of a rank's microbatch in the probe."""
WIDTH = 128
"""Hidden size D of the probe."""
TOP_K = 2
"""Routing choices per token: the exchange carries A = TOP_K·T rows."""
TOKEN_BYTES = TOP_K * TOKENS * WIDTH * 4
"""Bytes of one token exchange of the probe (fp32)."""
LEVELS = (0, WORK_GEMMS)


def _local(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    """The base's exchange: a copy of the same shape (the probe's splits are even)."""
    return x * 1.0


def _exchange(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group):
    """The executor's token exchange (`executor.moe._all_to_all`)."""
    from torch.distributed import _functional_collectives as funcol

    out = funcol.all_to_all_single_autograd(x.contiguous(), out_splits, in_splits, group)
    return funcol.wait_tensor(out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Weights:
    work: torch.Tensor
    expert: torch.Tensor


def _layer(x: torch.Tensor, w: _Weights, work: int, exchanged: bool, group) -> torch.Tensor:
    """One probe layer (module doc); ``exchanged`` False for the base."""
    world = dist.get_world_size(group)
    h = x
    for _ in range(work):
        h = torch.tanh(h @ w.work)
    rows = TOP_K * TOKENS
    send = torch.full((world,), rows // world, dtype=torch.int64, device=x.device)
    recv = torch.empty_like(send)
    if exchanged:
        dist.all_to_all_single(recv, send, group=group)
    else:
        recv.copy_(send)
    out_splits, in_splits = recv.tolist(), send.tolist()
    move = _exchange if exchanged else _local
    routed = move(h.repeat(TOP_K, 1), out_splits, in_splits, group)
    order = torch.randperm(routed.shape[0], device=x.device)
    y = torch.nn.functional.silu(routed[order] @ w.expert)[torch.argsort(order)]
    back = move(y, in_splits, out_splits, group)
    return back.view(TOP_K, TOKENS, WIDTH).sum(0) + x


def _chain(run: Runner, w: _Weights, work: int, exchanged: bool, group) -> tuple[float, float]:
    """(forward s, backward s) of one chain of `CHAIN_LAYERS` layers."""
    x = run.randn(TOKENS, WIDTH, grad=True)

    def forward() -> torch.Tensor:
        h = x
        for _ in range(CHAIN_LAYERS):
            h = _layer(h, w, work, exchanged, group)
        return h

    return timed_passes(run, forward)


def time_moe_exchange(run: Runner) -> tuple[OverheadTiming, ...]:
    """The ``moe_exchange_*`` and ``moe_layer_*`` records of the module doc; empty without a
    process group of several ranks."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return ()
    group = dist.group.WORLD
    w = _Weights(
        work=run.randn(WIDTH, WIDTH).mul_(0.05).requires_grad_(),
        expert=run.randn(WIDTH, WIDTH).mul_(0.05).requires_grad_(),
    )
    return time_in_context(
        run,
        lambda work, variant: _chain(run, w, work, variant == 1, group),
        levels=LEVELS,
        extras=("moe_exchange",),
        layer="moe_layer",
        per=(CHAIN_LAYERS, CHAIN_LAYERS),
    )
