"""A MoE layer's expert-parallel exchanges priced in context: the profile's probe of the
executor's exchange pattern (`profiles.profiler.moe_exchange`) rather than call by call.

Under ep > 1 each MoE layer of the executor exchanges its expert counts (a plain
all-to-all), sends its tokens and receives the results (two autograd all-to-alls) in the
forward, and runs the two exchanges' gradients in the backward. Each call waits for the
peer rank, which reaches it after its own host work; priced one by one (fit, waited excess,
autograd extra) the exchanges came to about half what making them local saved in the
executor (module doc of the probe). The probe times a chain of layers of that pattern
against the same chain with local copies, at two levels of host work between the layers'
exchanges; per layer and pass:

    extra(H) = the probe's difference interpolated linearly in H between its two levels,
               held at the nearer level outside them,

where H is the pass's host work per exchanging layer (the cost model's compute seconds of
the pass over its exchanging layers) and the levels' own H is the probe's local chain per
layer. The probe's difference holds its token exchanges at `PROBE_TOKEN_BYTES`; a plan's
other size adds the difference of the profile's all-to-all fit at the two sizes per token
exchange (`costmodel.native_runtime`).

The levels' host work is read relative to the dispatch like every host cost
(`costmodel.host_rates`), so a calibration that rescales the op overhead moves them with
the plan's host work; the differences are read as measured, like the collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_TOKEN_BYTES = 2 * 128 * 128 * 4
"""Bytes of one of the probe's token exchanges (`profiles.profiler.moe_exchange.TOKEN_BYTES`)."""
PASSES = ("forward", "backward")
LEVELS = 2
"""Levels of host work the probe times (`profiles.profiler.moe_exchange.LEVELS`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeExchange:
    """The probe's (host work per layer, exchange extra per layer) points of each pass,
    seconds, in increasing host work."""

    forward: tuple[tuple[float, float], ...]
    backward: tuple[tuple[float, float], ...]

    def extra_s(self, *, backward: bool, host_s: float) -> float:
        """What one layer's exchanges of a pass cost after ``host_s`` of host work per layer
        (module doc), never below 0."""
        points = self.backward if backward else self.forward
        (h0, e0), (h1, e1) = points[0], points[-1]
        if host_s <= h0:
            return max(e0, 0.0)
        if host_s >= h1:
            return max(e1, 0.0)
        return max(e0 + (e1 - e0) * (host_s - h0) / (h1 - h0), 0.0)


def moe_exchange_rates(means: dict[str, float], scale: float) -> MoeExchange | None:
    """The `MoeExchange` of a profile's spread means (``op_overhead.moe_exchange_<pass>_w<level>``
    and ``op_overhead.moe_layer_<pass>_w<level>``); the host levels times ``scale`` (the
    profile's dispatch over its sweep's plain one). None when one is missing (a profile
    of one rank, or of an earlier version)."""
    found: dict[str, list[tuple[float, float]]] = {}
    for p in PASSES:
        points = []
        for level in range(LEVELS):
            host = means.get(f"op_overhead.moe_layer_{p}_w{level}")
            extra = means.get(f"op_overhead.moe_exchange_{p}_w{level}")
            if host is None or extra is None:
                return None
            points.append((host * scale, extra))
        found[p] = sorted(points)
    return MoeExchange(forward=tuple(found["forward"]), backward=tuple(found["backward"]))
