"""Prices of the executor's transcendental element-wise kernels on a CPU, from their probe.

`costmodel.runtimes.torch.ops` prices an element-wise kernel by its dispatch and output
allocation (`HostRates.elementwise_op_s`) plus its counted bytes at
`HostRates.elementwise_Bps`, the executor's RMSNorm rate. The activation (``silu``; ``gelu``)
and the loss's ``log_softmax`` evaluate an exponential (``erf`` for GELU) per element, which
that price does not see. The profile times four such kernels cold at a few sizes
(`profiles.profiler.transcendental`, rows `profiles.schema_host.HostTranscendental`); per kernel a
line t = a + b·n through (elements, mean seconds), fitted by relative least squares (each
point's error relative to its time, as `profiles.profiler.fit.fit_memory` fits the memory
curves, so the line holds at the small sizes as well as the large), prices one call: a for
the call (dispatch, allocation, the kernel's fixed work), b per element. The kernels are
priced by that line instead of per byte: each pays, on top of what the operator counts
already charge for it,

    kernel_s  = a · scale - elementwise_op_s          per kernel,
    element_s = b · scale - bytes_per_element / elementwise_Bps   per element,

either of which may be negative (the call, not each term, is what the line prices), where
``bytes_per_element`` is what the cost model counts for that kernel
(`COUNTED_BYTES_PER_ELEMENT`) and ``scale`` brings the sweep's dispatch to the profile's
``op_overhead_s`` (`costmodel.runtimes.torch.host_rate_fits.host_figures`), so a calibrated host
speed rescales the line like every host timing. A line without a positive slope, or fitted
through fewer than two sizes, prices nothing; a negative intercept counts as 0.

Kinds: ``activation`` (SiLU from ``silu`` and ``silu_backward``; GELU at the same prices)
and ``log_softmax`` (``log_softmax`` and ``log_softmax_backward``). The MoE router's
softmaxes run inside the routing bookkeeping, which the profile times whole
(`HostRates.routing_op_s`), and are not counted here. A profile without the rows (measured
before the probe existed, or a GPU's) prices nothing extra: its transcendental kernels
cost their bytes like every element-wise kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.schema_host import HostOverheads

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
class KernelPrice:
    """What one kind of transcendental kernel costs beyond its operator counts' price."""

    kernel_s: float = 0.0
    """Seconds per kernel call (may be negative, module doc)."""
    element_s: float = 0.0
    """Seconds per element (may be negative, module doc)."""

    def extra_s(self, kernels: float, elements: float) -> float:
        """Seconds of ``kernels`` calls over ``elements`` elements in all."""
        return kernels * self.kernel_s + elements * self.element_s


NO_PRICE = KernelPrice()
"""Nothing beyond the per-byte price."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscendentalRates:
    """Prices of the transcendental kernels by kind and pass (module doc)."""

    activation_forward: KernelPrice = NO_PRICE
    """SiLU or GELU forward."""
    activation_backward: KernelPrice = NO_PRICE
    """Their backward kernel."""
    log_softmax_forward: KernelPrice = NO_PRICE
    """``log_softmax`` forward."""
    log_softmax_backward: KernelPrice = NO_PRICE
    """Its backward kernel."""


NO_TRANSCENDENTAL = TranscendentalRates()
"""Per-byte pricing only (a profile without the probe's rows)."""


def kernel_line(host: HostOverheads, op: str) -> tuple[float, float] | None:
    """(a seconds per call, b seconds per element) of kernel ``op``: the relative
    least-squares line through its rows (module doc), the intercept not below 0; None with
    fewer than two sizes or without a positive slope."""
    points = [(float(r.elements), r.mean_s) for r in host.transcendental if r.op == op]
    if len({x for x, _ in points}) < 2 or any(t <= 0 for _, t in points):
        return None
    # minimise sum((a + b·x - t) / t)^2: normal equations in u = 1/t, v = x/t
    suu = sum(1 / t**2 for _, t in points)
    suv = sum(x / t**2 for x, t in points)
    svv = sum((x / t) ** 2 for x, t in points)
    su = sum(1 / t for _, t in points)
    sv = sum(x / t for x, t in points)
    det = suu * svv - suv**2
    if det <= 0:
        return None
    a = (su * svv - sv * suv) / det
    b = (suu * sv - suv * su) / det
    return (max(a, 0.0), b) if b > 0 else None


def transcendental_rates(
    host: HostOverheads, *, scale: float, elementwise_op_s: float, elementwise_Bps: float
) -> TranscendentalRates:
    """The `TranscendentalRates` of ``host`` (module doc), against the per-kernel and
    per-byte prices of `HostRates` the operator counts already charge."""

    def price(op: str) -> KernelPrice:
        line = kernel_line(host, op)
        if line is None:
            return NO_PRICE
        a, b = line
        return KernelPrice(
            kernel_s=a * scale - elementwise_op_s,
            element_s=b * scale - COUNTED_BYTES_PER_ELEMENT[op] / elementwise_Bps,
        )

    return TranscendentalRates(
        activation_forward=price("silu"),
        activation_backward=price("silu_backward"),
        log_softmax_forward=price("log_softmax"),
        log_softmax_backward=price("log_softmax_backward"),
    )
