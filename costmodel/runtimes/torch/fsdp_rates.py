"""FSDP2's parameter gathers priced in their chain: the profile's probe of blocks of a
layer's size among layers of host work (`profiles.profiler.fsdp_context`) rather than from
a one-tensor 8x8 module alone.

Each gather of the executor's distributed optimizer copies a module's shards in, waits for
the peer in the all-gather, copies the gathered buffer out and runs FSDP2's hooks; the peer
reaches it after its own layer of host work. Priced from the figures of an idle 8x8 module
(`HostRates.fsdp_gather_s`, plus `fsdp_gather_tensor_s` per further tensor and the fit
beyond the probe's bytes) a gather of the tiny model's layer came to about half of what the
executor paid (probe's module doc). Per module and pass (`costmodel.runtimes.torch.sync`):

    gather = InContext.extra_s(H)                       the probe's block in its chain
           + (tensors - PROBE_TENSORS) · fsdp_gather_tensor_s
           + (copies of the module - copies of the probe's block) at the host bandwidth
           + (all-gather fit of the module - fit of `PROBE_GATHER_BYTES`),

never below 0, where H is the pass's host work per layer of the chunk; profiles without
the records keep the idle-module pricing.
"""

from __future__ import annotations

from costmodel.runtimes.torch.in_context_rates import InContext, in_context_rates

PROBE_TENSORS = 9
"""Weights of the probe's block (`profiles.profiler.fsdp_context.TENSORS`)."""
PROBE_GATHER_BYTES = PROBE_TENSORS * 128 * 128 * 4
"""Bytes one of the probe's blocks gathers (`profiles.profiler.fsdp_context.GATHER_BYTES`)."""
LEVELS = 2
"""Levels of host work the probe times (`profiles.profiler.fsdp_context.LEVELS`)."""


def fsdp_context_rates(means: dict[str, float], scale: float) -> InContext | None:
    """The gathers' `InContext` (timings ``fsdp_context_<pass>_w<level>`` and
    ``fsdp_layer_<pass>_w<level>``); None when one is missing."""
    return in_context_rates(means, scale, extra="fsdp_context", layer="fsdp_layer", levels=LEVELS)
