"""A mechanism priced in its chain: the (host work per layer, extra per unit) points an
in-context probe measured (`profiles.profiler.in_context`), read by the MoE exchange
(`costmodel.runtimes.torch.moe_exchange_rates`) and FSDP2's gathers
(`costmodel.runtimes.torch.fsdp_rates`).

A probe times a chain of layers with the mechanism against the same chain without it, at
levels of host work between the layers; per pass:

    extra(H) = the probe's difference interpolated linearly in H between its levels,
               held at the nearer level outside them, never below 0,

where H is the plan's host work per layer of the pass and the levels' own H is the base
chain's pass per layer. The levels' host work is read relative to the dispatch like every
host cost (`costmodel.runtimes.torch.host_rates`), so a calibration that rescales the op overhead
moves them with the plan's host work; the differences are read as measured, like the collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

PASSES = ("forward", "backward")


@dataclass(frozen=True, kw_only=True, slots=True)
class InContext:
    """The probe's (host work per layer, extra per unit) points of each pass, seconds, in
    increasing host work."""

    forward: tuple[tuple[float, float], ...]
    backward: tuple[tuple[float, float], ...]

    def extra_s(self, *, backward: bool, host_s: float) -> float:
        """What one unit of the mechanism costs in a pass after ``host_s`` of host work per
        layer (module doc)."""
        points = self.backward if backward else self.forward
        (h0, e0), (h1, e1) = points[0], points[-1]
        if host_s <= h0:
            return max(e0, 0.0)
        if host_s >= h1:
            return max(e1, 0.0)
        return max(e0 + (e1 - e0) * (host_s - h0) / (h1 - h0), 0.0)


def in_context_rates(
    means: dict[str, float], scale: float, *, extra: str, layer: str, levels: int
) -> InContext | None:
    """The `InContext` of a profile's host timings (``<extra>_<pass>_w<level>``
    and ``<layer>_<pass>_w<level>``); the host levels times ``scale`` (the
    profile's dispatch over its sweep's plain one). None when one is missing (a profile of
    one rank, or of an earlier version)."""
    found: dict[str, list[tuple[float, float]]] = {}
    for p in PASSES:
        points = []
        for level in range(levels):
            host = means.get(f"{layer}_{p}_w{level}")
            value = means.get(f"{extra}_{p}_w{level}")
            if host is None or value is None:
                return None
            points.append((host * scale, value))
        found[p] = sorted(points)
    return InContext(forward=tuple(found["forward"]), backward=tuple(found["backward"]))
