"""DTensor's bookkeeping priced in its chain: the profile's probe of a DTensor linear among
layers of host work (`profiles.profiler.dtensor_context`) against the loop figures behind
`HostRates.dtensor_from_local_s`, ``dtensor_linear_<pass>_s`` and ``dtensor_to_local_s``.

The probe times, per block and pass, a chain whose blocks end in one wrap, DTensor linear
and unwrap against the same chain ending in the plain product, at two levels of host work;
the difference is that pattern's cost in context, E(H)
(`costmodel.runtimes.torch.in_context_rates.InContext`, interpolated on H, the plan's host work per
layer of the pass). The loop figures price the same pattern at

    forward:  from_local + linear_forward + to_local
    backward: from_local + linear_backward + to_local   (to_local's backward wraps the
              gradient, from_local's unwraps it)

and a pass's DTensor operators (`HostOps.dt_ops`, ``dt_wraps``, ``dt_unwraps``,
``dt_linears``; the sequence-parallel norm has its own cold figure) cost their loop price
times k(H) = E(H) / that price. `dtensor_context_s` is the difference, added to the pass.
Host work: every figure is read relative to the dispatch (times the calibration's
``scale``). Without the records (a profile of one rank without a process group, or of an
earlier version) k = 1.
"""

from __future__ import annotations

from costmodel.runtimes.torch.host_rates import HostRates
from costmodel.runtimes.torch.in_context_rates import PASSES, InContext, in_context_rates
from costmodel.runtimes.torch.ops import HostOps, host_seconds

EXTRA = "dtensor_context"
"""The probe's difference records (`profiles.profiler.dtensor_context.EXTRA`)."""
LAYER = "dtensor_layer"
"""Its base records (`profiles.profiler.dtensor_context.LAYER`)."""
LEVELS = 2
"""Levels of host work the probe records."""


def dtensor_context_rates(means: dict[str, float], scale: float) -> InContext | None:
    """The pattern's in-context cost from a profile's host timings, host levels and
    differences both times ``scale``; None when a record is missing."""
    found = in_context_rates(means, scale, extra=EXTRA, layer=LAYER, levels=LEVELS)
    if found is None:
        return None
    points = {p: tuple((h, e * scale) for h, e in getattr(found, p)) for p in PASSES}
    return InContext(**points)


def pattern_s(rates: HostRates, *, backward: bool) -> float:
    """The loop figures' price of the probe's pattern in one pass (module doc)."""
    linear = rates.dtensor_linear_backward_s if backward else rates.dtensor_linear_forward_s
    return rates.dtensor_from_local_s + linear + rates.dtensor_to_local_s


def dtensor_factor(rates: HostRates, *, backward: bool, host_s: float) -> float:
    """k(H) of the module doc after ``host_s`` of host work per layer; 1 without the
    probe or a positive loop price."""
    context = rates.dtensor_context
    priced = pattern_s(rates, backward=backward)
    if context is None or priced <= 0:
        return 1.0
    return context.extra_s(backward=backward, host_s=host_s) / priced


def dtensor_context_s(rates: HostRates, work: HostOps, *, backward: bool, layers: int) -> float:
    """What ``work``'s DTensor operators (one pass of a chunk of ``layers`` layers) cost in
    context beyond their loop price: (k(H) - 1) x that price, H being the pass's host work
    per layer (at least one layer)."""
    dtensor = HostOps(
        dt_ops=work.dt_ops,
        dt_wraps=work.dt_wraps,
        dt_unwraps=work.dt_unwraps,
        dt_linears=work.dt_linears,
    )
    loop_s = host_seconds(dtensor, rates, backward=backward)
    if loop_s <= 0:
        return 0.0
    host_s = host_seconds(work, rates, backward=backward) / max(layers, 1)
    return (dtensor_factor(rates, backward=backward, host_s=host_s) - 1.0) * loop_s
