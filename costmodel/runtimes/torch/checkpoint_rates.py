"""Activation checkpointing priced in its chain: the profile's probe of checkpointed blocks
among layers of host work (`profiles.profiler.checkpoint_context`) rather than the loop of
checkpoints alone behind `HostRates.checkpoint_call_s` and ``checkpoint_tensor_s``.

The probe times, per block and pass, a chain whose blocks are each checkpointed whole
(``ckpt_full``: ``work`` · `SAVED_PER_PRODUCT` tensors saved per call) and one where only
each block's last product is (``ckpt_part``: `SAVED_PER_PRODUCT` tensors), against the
plain chain, at two levels of host work (`PROBE_WORK` products per block). Net of the
backward's rerun (the plain block's forward for ``full``, one of its ``work`` products for
``part``), the two variants give at each level a cost per call and one per saved tensor:

    tensor = (full - part) / ((work - 1) · SAVED_PER_PRODUCT)
    call   = part - SAVED_PER_PRODUCT · tensor

and a checkpointed call of the executor that saves ``n`` tensors costs, in each pass,

    call(H) + n · tensor(H)

with both interpolated on H, the pass's host work per layer
(`costmodel.runtimes.torch.in_context_rates`: the plain chain's pass per block is each level's H;
held at the nearer level outside them, never below 0). The forward pass pays its part as the
checkpoint runs, the backward its part with the rerun
(`costmodel.runtimes.torch.passes.recompute_ops`). Host costs like the others: every figure is read
relative to the dispatch (times the calibration's ``scale``).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.runtimes.torch.in_context_rates import PASSES, InContext

PROBE_WORK = (9, 40)
"""Products per block at the probe's levels (`profiles.profiler.checkpoint_context.LEVELS`)."""
SAVED_PER_PRODUCT = 3
"""Tensors saved per product and tanh of the probe
(`profiles.profiler.checkpoint_context.SAVED_PER_PRODUCT`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointContext:
    """Per checkpointed call and per saved tensor, each pass's (host work per layer, cost)
    points."""

    call: InContext
    tensor: InContext

    def hooks_s(self, *, backward: bool, host_s: float, saved: float) -> float:
        """What one checkpointed call saving ``saved`` tensors costs in a pass after
        ``host_s`` of host work per layer (module doc), the rerun apart."""
        call = self.call.extra_s(backward=backward, host_s=host_s)
        return call + saved * self.tensor.extra_s(backward=backward, host_s=host_s)


def _level_point(
    means: dict[str, float], scale: float, p: str, level: int
) -> tuple[float, float, float] | None:
    """(host, call, tensor) of one level and pass; None when a record is missing."""
    names = ("ckpt_layer_forward", f"ckpt_layer_{p}", f"ckpt_full_{p}", f"ckpt_part_{p}")
    found = [means.get(f"{name}_w{level}") for name in names]
    if any(v is None for v in found):
        return None
    forward, host, full, part = (v * scale for v in found)  # type: ignore[operator]
    work = PROBE_WORK[level]
    if p == "backward":
        full, part = full - forward, part - forward / work
    tensor = (full - part) / ((work - 1) * SAVED_PER_PRODUCT)
    return host, part - SAVED_PER_PRODUCT * tensor, tensor


def checkpoint_context_rates(means: dict[str, float], scale: float) -> CheckpointContext | None:
    """The `CheckpointContext` of a profile's host timings (``ckpt_full_*``,
    ``ckpt_part_*`` and ``ckpt_layer_*`` at each level); ``scale``: the profile's dispatch
    over its sweep's plain one. None when a record is missing (a profile of an earlier
    version)."""
    calls: dict[str, tuple[tuple[float, float], ...]] = {}
    tensors: dict[str, tuple[tuple[float, float], ...]] = {}
    for p in PASSES:
        points = []
        for level in range(len(PROBE_WORK)):
            point = _level_point(means, scale, p, level)
            if point is None:
                return None
            points.append(point)
        points.sort()
        calls[p] = tuple((host, call) for host, call, _ in points)
        tensors[p] = tuple((host, tensor) for host, _, tensor in points)
    return CheckpointContext(call=InContext(**calls), tensor=InContext(**tensors))
