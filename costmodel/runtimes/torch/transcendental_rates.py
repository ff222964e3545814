"""Per-element prices of the executor's transcendental element-wise kernels on a CPU.

`costmodel.runtimes.torch.ops` prices an element-wise kernel by its dispatch and output
allocation plus its counted bytes at `HostRates.elementwise_Bps`, the executor's RMSNorm
rate. The activation (``silu``, ``gelu``) and the softmaxes (the loss's ``log_softmax``,
the MoE router's ``softmax``) evaluate an exponential per element, and their kernels cost
more than that price. The profile times four such kernels cold at a few sizes
(`profiles.profiler.transcendental`, rows `profiles.schema.HostTranscendental`); per
kernel a least-squares line t = a + b·n through (elements, mean seconds) gives b, the
seconds per element, and the price per element on top of the bytes is

    b - bytes_per_element · raw_byte_price_s,

(0 when not positive), where ``bytes_per_element`` is what the cost model counts for that
kernel (`COUNTED_BYTES_PER_ELEMENT`) and ``raw_byte_price_s`` the element-wise price of one
byte in the sweep's own units (before a calibrated bandwidth rescales it): the line's
intercept, the dispatch and allocation, is already priced per operator. Like the other host
timings the result is multiplied by the factor that brings the sweep's dispatch to the
profile's ``op_overhead_s`` (`costmodel.runtimes.torch.host_rates.host_figures`), so a
calibrated host speed rescales it.

Kinds: ``activation`` (SiLU, priced from ``silu`` forward and ``silu_backward``; GELU,
which evaluates ``erf`` per element, at the same rates) and ``softmax`` (``log_softmax``
forward and ``log_softmax_backward``; a plain softmax, one exponential per element as
well, at the same rates). A profile without the rows (measured before the probe existed,
or a GPU's) has all four prices 0: its transcendental kernels are priced per byte only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from profiles.schema import HostOverheads

COUNTED_BYTES_PER_ELEMENT = {
    "silu": 2 * 4,
    "silu_backward": 3 * 4,
    "log_softmax": 3 * 4,
    "log_softmax_backward": 3 * 4,
}
"""fp32 bytes per element that `costmodel.runtimes.torch.layers` counts for each probed
kernel: SiLU reads x and writes y (``mlp``: 2·T·F·e), its backward reads dy and x and
writes dx (3·T·F·e); ``log_softmax`` reads the logits twice and writes once (``head_ops``:
3·T·V·e), its backward reads dy and y and writes dx (3·T·V·e)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscendentalRates:
    """Seconds per element of a transcendental kernel beyond its counted bytes (module doc)."""

    activation_forward_s: float = 0.0
    """SiLU or GELU forward, per output element."""
    activation_backward_s: float = 0.0
    """Their backward kernel, per element."""
    softmax_forward_s: float = 0.0
    """``log_softmax`` or ``softmax`` forward, per element."""
    softmax_backward_s: float = 0.0
    """Their backward kernel, per element."""


NO_TRANSCENDENTAL = TranscendentalRates()
"""Per-byte pricing only (a profile without the probe's rows)."""


def per_element_s(host: HostOverheads, op: str) -> float | None:
    """Seconds per element of kernel ``op``: the slope of the least-squares line through
    its rows' (elements, mean seconds); None with fewer than two sizes."""
    points = [(float(r.elements), r.mean_s) for r in host.transcendental if r.op == op]
    if len({x for x, _ in points}) < 2:
        return None
    xs, ys = zip(*points, strict=True)
    return statistics.linear_regression(xs, ys).slope


def transcendental_rates(
    host: HostOverheads, *, raw_byte_price_s: float, scale: float
) -> TranscendentalRates:
    """The `TranscendentalRates` of ``host`` (module doc): per kernel, its per-element slope
    less ``raw_byte_price_s`` times its counted bytes, not below 0, times ``scale``; 0 for a
    kernel without two sizes."""

    def extra(op: str) -> float:
        slope = per_element_s(host, op)
        if slope is None:
            return 0.0
        return max(slope - COUNTED_BYTES_PER_ELEMENT[op] * raw_byte_price_s, 0.0) * scale

    return TranscendentalRates(
        activation_forward_s=extra("silu"),
        activation_backward_s=extra("silu_backward"),
        softmax_forward_s=extra("log_softmax"),
        softmax_backward_s=extra("log_softmax_backward"),
    )
