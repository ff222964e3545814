"""The executor's operator mix against the profile's single-operator chains: one factor on
the per-operator host figures (`profiles.profiler.op_mix`).

The profile times its per-operator figures on the cheapest operator, hot (a dispatch of
``x + y``; chains of one multiplication recorded by autograd). It also times `MIX_BLOCKS`
blocks of the executor's element-wise operators, ``h = h + rope(RMSNorm(h))``, on a `MIX_TOKENS` x
`MIX_WIDTH` activation, each pass reached cold (timings ``op_mix_forward`` and
``op_mix_backward``, one chain each, the backward with its ``backward()``
call). The cost model prices those blocks as it prices a layer (`costmodel.runtimes.torch.ops`:
`rms_norm`, `rope` and `residual_add`), and the per-operator figures `SCALED_FIELDS` are
multiplied by

    k = (measured - priced apart) / (priced with the figures - priced apart),

where "priced apart" is what the model charges for those blocks outside the per-operator
figures (their bytes) plus, in the measured backward, the ``backward()`` call
(`HostRates.backward_call_s`), so that the scaled figures price the blocks at what they
measured. Read relative to the dispatch like every host cost
(`costmodel.runtimes.torch.host_rates`). Without the two timings (an earlier profile, or
none on a GPU) k = 1.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.runtimes.torch.host_rates import HostRates
from costmodel.runtimes.torch.ops import (
    HostOps,
    ModuleOps,
    host_seconds,
    residual_add,
    rms_norm,
    rope,
)

MIX_BLOCKS = 8
"""Blocks of the probe's chain (`profiles.profiler.op_mix.MIX_BLOCKS`)."""
MIX_TOKENS = 32
"""Rows of its activation (`profiles.profiler.op_mix.MIX_TOKENS`)."""
MIX_WIDTH = 64
"""Width of its activation (`profiles.profiler.op_mix.MIX_WIDTH`)."""
SCALED_FIELDS = ("dispatch_s", "forward_op_s", "backward_node_s", "elementwise_op_s")
"""The per-operator figures timed on single-operator chains (routing, DTensor, FSDP2 and
checkpoint figures are timed on their own operators and keep theirs)."""


def mix_block() -> ModuleOps:
    """One block of the probe's chain as the cost model counts it: the norm, the two views
    around the rotary embedding, the rotary embedding and the residual add."""
    n = MIX_TOKENS * MIX_WIDTH
    views = ModuleOps(forward=HostOps(views=2))
    return (
        rms_norm(MIX_TOKENS, MIX_WIDTH)
        .plus(views)
        .plus(rope(n))
        .plus(residual_add(MIX_TOKENS, MIX_WIDTH))
    )


def _priced_s(rates: HostRates) -> float:
    block = mix_block()
    return MIX_BLOCKS * (
        host_seconds(block.forward, rates, backward=False)
        + host_seconds(block.backward, rates, backward=True)
    )


def op_mix_factor(rates: HostRates, forward_s: float, backward_s: float) -> float:
    """k of the module doc for a measured chain of ``forward_s`` and ``backward_s``; 1 when
    the figures leave nothing to compare."""
    apart = _priced_s(replace(rates, **{f: 0.0 for f in SCALED_FIELDS}))
    priced = _priced_s(rates) - apart
    measured = forward_s + backward_s - rates.backward_call_s - apart
    if priced <= 0 or measured <= 0:
        return 1.0
    return measured / priced


def with_op_mix(rates: HostRates, means: dict[str, float], scale: float) -> HostRates:
    """``rates`` with `SCALED_FIELDS` times `op_mix_factor` of the profile's host timings
    (times ``scale``, the profile's dispatch over its sweep's plain one); unchanged without
    them."""
    forward = means.get("op_mix_forward")
    backward = means.get("op_mix_backward")
    if forward is None or backward is None:
        return rates
    k = op_mix_factor(rates, forward * scale, backward * scale)
    return replace(rates, op_mix=k, **{f: getattr(rates, f) * k for f in SCALED_FIELDS})
