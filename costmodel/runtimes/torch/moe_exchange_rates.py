"""A MoE layer's expert-parallel exchanges priced in context: the profile's probe of the
executor's exchange pattern (`profiles.profiler.moe_exchange`) rather than call by call.

Under ep > 1 each MoE layer of the executor exchanges its expert counts (a plain
all-to-all), sends its tokens and receives the results (two autograd all-to-alls) in the
forward, and runs the two exchanges' gradients in the backward. Each call waits for the
peer rank, which reaches it after its own host work; priced one by one (fit, waited excess,
autograd extra) the exchanges came to about half what making them local saved in the
executor (module doc of the probe). The probe times a chain of layers of that pattern
against the same chain with local copies, at two levels of host work between the layers'
exchanges; per layer and pass the extra is
`costmodel.runtimes.torch.in_context_rates.InContext.extra_s` at the pass's host work per exchanging
layer (the cost model's compute seconds of the pass over its exchanging layers). The probe's
difference holds its token exchanges at `PROBE_TOKEN_BYTES`; a plan's other size adds the difference
of the profile's all-to-all fit at the two sizes per token exchange
(`costmodel.runtimes.torch.passes`).
"""

from __future__ import annotations

from costmodel.runtimes.torch.in_context_rates import PASSES, InContext, in_context_rates

__all__ = ["LEVELS", "PASSES", "PROBE_TOKEN_BYTES", "moe_exchange_rates"]

PROBE_TOKEN_BYTES = 2 * 128 * 128 * 4
"""Bytes of one of the probe's token exchanges (`profiles.profiler.moe_exchange.TOKEN_BYTES`)."""
LEVELS = 2
"""Levels of host work the probe times (`profiles.profiler.moe_exchange.LEVELS`)."""


def moe_exchange_rates(means: dict[str, float], scale: float) -> InContext | None:
    """The exchange's `InContext` (timings ``moe_exchange_<pass>_w<level>`` and
    ``moe_layer_<pass>_w<level>``); None when one is missing."""
    return in_context_rates(means, scale, extra="moe_exchange", layer="moe_layer", levels=LEVELS)
