"""Host cost of a mixture-of-experts layer's token-routing bookkeeping, per operator.

The executor's MoE layer (`executor.moe.MoE.forward`) routes its tokens with a run of small
index and sort operators: top-k and softmax of the router logits, the keep mask, the token
index (``arange``, ``repeat_interleave``), boolean and order indexings, ``argsort``,
``bincount``, the token gather, the weighted combine with ``index_add`` and the
load-balancing statistics. Each runs once per layer between very different work
(attention, the experts' GEMMs, other layers), so it pays several times the profile's
``x + y`` dispatch per operator, and more than the same operators in a tight loop.

``routing_op`` is the time of `ROUTING_OPS` such operators in the executor's order over
`ROUTING_TOKENS` tokens of width `ROUTING_WIDTH` (small, so their bytes, which the cost
model counts apart, stay negligible), recorded by autograd, each round after a sweep over
the profiler's cold pool and a few unrelated operators, divided by the operator count; a
sample is the median of `ROUNDS_PER_SAMPLE` rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

from profiles.profiler.compute import COLD_POOL_BYTES, Runner
from profiles.profiler.timing import OverheadTiming

ROUTING_TOKENS = 128
"""Tokens routed per round (T)."""
ROUTING_EXPERTS = 8
"""Experts (E)."""
ROUTING_TOP_K = 2
"""Experts per token (k)."""
ROUTING_WIDTH = 16
"""Hidden width of the routed rows: small, so the rounds time operators, not bytes."""
ROUTING_OPS = 25
"""Operators of one round (numbered in `_route`)."""
ROUTING_ROUNDS = 96
"""Timed rounds."""
ROUNDS_PER_SAMPLE = 16
"""Rounds whose median makes one sample."""
SWEEP_WIDTH = 256
"""Side of the square operands of the unrelated operators between rounds."""


def _route(x: torch.Tensor, router: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One round of the executor's routing bookkeeping (`ROUTING_OPS` operators)."""
    k, experts = ROUTING_TOP_K, ROUTING_EXPERTS
    logits = x @ router.t()  # 1
    top, chosen = logits.topk(k, dim=-1)  # 2
    weights = top.softmax(dim=-1)  # 3
    keep = torch.ones_like(chosen, dtype=torch.bool).reshape(-1)  # 4
    tokens = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)  # 5, 6
    tokens, flat, weights = tokens[keep], chosen.reshape(-1)[keep], weights.reshape(-1)[keep]
    order = torch.argsort(flat, stable=True)  # 7-9 above, 10
    tokens, flat, weights = tokens[order], flat[order], weights[order]  # 11-13
    counts = torch.bincount(flat, minlength=experts)  # 14
    combined = (x[tokens] * weights[:, None]).to(x.dtype)  # 15-17
    out = torch.zeros_like(x).index_add(0, tokens, combined)  # 18, 19
    probs = logits.softmax(dim=-1)  # 20
    load = torch.bincount(chosen.reshape(-1), minlength=experts)  # 21
    aux = (load.to(probs.dtype) * probs.sum(dim=0)).sum()  # 22-25
    return out, aux, counts


def cold_sweep(run: Runner) -> Callable[[], None]:
    """Work that evicts a probe's operators from the caches between rounds, as a training
    step's other work does: a pass over the profiler's cold pool and three unrelated
    operators (a GEMM, ``layer_norm``, ``softmax``) on `SWEEP_WIDTH`-square operands."""
    pool = torch.zeros(COLD_POOL_BYTES // 4, device=run.device)
    square = run.randn(SWEEP_WIDTH, SWEEP_WIDTH)

    def sweep() -> None:
        pool.mul_(1.0)
        F.layer_norm(square @ square, (SWEEP_WIDTH,)).softmax(dim=-1)
        if run.cuda:
            torch.cuda.synchronize()

    return sweep


def per_sample(rounds: list[float]) -> tuple[float, ...]:
    """Medians of consecutive blocks of `ROUNDS_PER_SAMPLE` rounds."""
    step = ROUNDS_PER_SAMPLE
    return tuple(statistics.median(rounds[i : i + step]) for i in range(0, len(rounds), step))


def time_routing(run: Runner) -> tuple[OverheadTiming, ...]:
    """``routing_op``: seconds per operator of a routing round reached cold (module doc)."""
    x = run.randn(ROUTING_TOKENS, ROUTING_WIDTH)
    router = run.randn(ROUTING_EXPERTS, ROUTING_WIDTH, grad=True)
    sweep = cold_sweep(run)
    rounds = []
    for i in range(run.budget.warmup_calls + ROUTING_ROUNDS):
        sweep()
        start = run.clock()
        _route(x, router)
        if run.cuda:
            torch.cuda.synchronize()
        if i >= run.budget.warmup_calls:
            rounds.append((run.clock() - start) / ROUTING_OPS)
    return (OverheadTiming(op="routing_op", times_s=per_sample(rounds)),)
