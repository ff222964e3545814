"""Host cost of the executor's own operator mix, against the single-operator chains the
per-operator figures come from.

The profile's per-operator figures (``add``: a plain dispatch; ``autograd_forward`` and
``autograd_backward_node``: the slope of a chain of one multiplication repeated) time the
cheapest operator hot. A training step runs a mix of operators (norms, residual adds,
activations, their backward nodes with several kernels each), each reached after different
work, and a chain of different element-wise operators costs several times the per-operator
figures of the profile's single-operator chains.

``op_mix_forward`` and ``op_mix_backward`` time `MIX_BLOCKS` blocks of the executor's
element-wise operators, ``h = h + rope(RMSNorm(h))`` (`dtensor_norm.rms_norm` and
`apply_rope`: the operators of `executor.model.RMSNorm` and `executor.model.apply_rope`;
two views split and merge the heads), on a `MIX_TOKENS` x `MIX_WIDTH` fp32 activation, forward and
backward (one ``backward()`` call), each pass reached after a cold sweep
(`routing.cold_sweep`); a sample is the median of `routing.ROUNDS_PER_SAMPLE` rounds.
`costmodel.runtimes.torch.op_mix_rates` prices the same blocks with the profile's per-operator
figures and scales those figures by the ratio. On CUDA the executor model is not used: left out.
"""

from __future__ import annotations

import torch

from profiles.profiler.compute import Runner
from profiles.profiler.dtensor_norm import rms_norm
from profiles.profiler.routing import cold_sweep, per_sample
from profiles.profiler.timing import OverheadTiming

MIX_BLOCKS = 8
"""Residual norm blocks per chain."""
MIX_TOKENS = 32
"""Rows of the activation (small: the cost model counts the bytes apart)."""
MIX_WIDTH = 64
"""Hidden width of the activation."""
MIX_HEADS = 2
"""Heads the rotary embedding rotates (head dim `MIX_WIDTH` / `MIX_HEADS`)."""
MIX_ROUNDS = 64
"""Timed chains."""


def apply_rope(x_BSHK: torch.Tensor, cos_SK: torch.Tensor, sin_SK: torch.Tensor):
    """The operators of `executor.model.apply_rope` (rotate-half)."""
    x1, x2 = x_BSHK.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x_BSHK * cos_SK[None, :, None, :] + rotated * sin_SK[None, :, None, :]


def _chain(x: torch.Tensor, weights: list[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor):
    """`MIX_BLOCKS` blocks of ``h + rope(norm(h))`` (module doc)."""
    b, s, d = x.shape
    h = x
    for w in weights:
        heads = rms_norm(h, w).view(b, s, MIX_HEADS, d // MIX_HEADS)
        h = h + apply_rope(heads, cos, sin).view(b, s, d)
    return h


def time_op_mix(run: Runner) -> tuple[OverheadTiming, ...]:
    """``op_mix_forward`` and ``op_mix_backward``: seconds per chain (module doc)."""
    if run.cuda:
        return ()
    weights = [
        torch.ones(MIX_WIDTH, device=run.device, requires_grad=True) for _ in range(MIX_BLOCKS)
    ]
    grad = torch.ones(1, MIX_TOKENS, MIX_WIDTH, device=run.device)
    cos = run.randn(MIX_TOKENS, MIX_WIDTH // MIX_HEADS)
    sin = run.randn(MIX_TOKENS, MIX_WIDTH // MIX_HEADS)
    sweep = cold_sweep(run)
    forward, backward = [], []
    for i in range(run.budget.warmup_calls + MIX_ROUNDS):
        x = run.randn(1, MIX_TOKENS, MIX_WIDTH, grad=True)
        sweep()
        start = run.clock()
        out = _chain(x, weights, cos, sin)
        middle = run.clock()
        sweep()
        resumed = run.clock()
        out.backward(grad)
        end = run.clock()
        if i >= run.budget.warmup_calls:
            forward.append(middle - start)
            backward.append(end - resumed)
    return (
        OverheadTiming(op="op_mix_forward", times_s=per_sample(forward)),
        OverheadTiming(op="op_mix_backward", times_s=per_sample(backward)),
    )
