"""Host rates of a CPU profile's collectives, for the ``torch`` runtime
(`costmodel.runtimes.torch`): what a collective call costs on the host beyond the α-β fit of
the profile's sweep. `CollectiveHostRates` holds them and looks them up by op and group
size; `costmodel.runtimes.torch.host_rates.HostRates` carries them beside the per-operator
figures, and `costmodel.runtimes.torch.host_rates.base_host_rates` reads them from the
profile's host section (the fits in `costmodel.runtimes.torch.host_rate_fits`):

- collectives: the profile's α-β fits describe the fast edge of each point's samples
  (the wire time, `profiles.profiler.timing.typical_s`); a training step waits for every
  call, so on average it pays the mean. ``collective_excess`` is, per (op, group size), the
  median over the message sizes of the collective call's mean less the fit at that size (the two
  ranks' scheduling on a shared host: one reaches the call later or is woken later),
  added to every call the executor waits for; the call's minimum where the profile has
  no intra-node fit of that op and size. Fallback: none.
- collectives reached after host work: ``sync_excess_s`` is the mean of the timing
  ``sync_wait`` (each sample the mean time of a plain all-to-all that every
  rank calls after the same ~1 ms of products, less the probe's fastest call,
  `profiles.profiler.collective_forms`): what the ranks' drift between two collectives
  adds, read as measured. A layer's collective pays the larger of it and its op's
  ``collective_excess`` (`CollectiveHostRates.waited_excess_s`). Fallback: 0 (the excess
  alone).
- functional collectives: DTensor's redistributions and the executor's ``funcol`` calls
  (TP, SP, CP, MoE tokens) go through ``torch.distributed._functional_collectives``, whose
  call and ``wait_tensor`` cost more than the plain call the α-β fits time.
  ``functional_extra`` is,
  per op, the median of the timing ``functional_<op>`` (each sample the median
  difference of a few adjacent functional and plain calls, over every rank at once in wall
  time, `profiles.profiler.collective_forms`), 0 when not positive;
  a collective's time, it is read as measured, like the fits and the excess, not relative
  to the dispatch. Fallback: none (0).
- the autograd all-to-all (the executor's MoE token exchange, forward and backward):
  ``autograd_exchange_s`` is the median of the timing ``autograd_all_to_all``
  (each sample the median difference of adjacent exchanges, a forward call and the
  backward through it, and two plain calls, `profiles.profiler.collective_forms`), 0 when
  not positive, read as measured like the functional extra. Fallback: twice the functional
  all-to-all's extra.
- DTensor redistributions (the executor's tensor and sequence parallelism issue every
  ``tp`` collective through one): ``redistribute_extra`` is, per op of
  `REDISTRIBUTION_COLLECTIVES`, the median of the timing ``redistribute_<op>``
  (the median differences of adjacent redistributions and functional calls)
  less the DTensor operator and the ``to_local`` the layer counts already charge for it,
  0 when not positive. It is host work (DTensor's Python, layout copies), so it is read
  relative to the dispatch like DTensor's other figures, not as measured like the
  functional extra. Fallback: none (0).

A profile without a host section (a GPU's) has none of them: every field at its default.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveHostRates:
    """What collective calls cost one CPU rank on the host beyond the α-β fit (seconds)."""

    collective_excess: tuple[tuple[str, int, float], ...] = ()
    """(op, group size, seconds) a waited-for call costs beyond the α-β fit."""
    functional_extra: tuple[tuple[str, float], ...] = ()
    """(op, seconds) a functional collective call costs beyond the plain one."""
    sync_excess_s: float = 0.0
    """What a collective reached after ~1 ms of host work costs beyond its fastest call."""
    autograd_exchange_s: float = 0.0
    """What one autograd all-to-all, forward and backward, costs beyond two plain calls."""
    redistribute_extra: tuple[tuple[str, float], ...] = ()
    """(op, seconds) a DTensor redistribution costs beyond its functional call, net of the
    DTensor operator and ``to_local`` counted with the layer."""

    def redistribute_s(self, op: str) -> float:
        """`redistribute_extra` of ``op`` (0 when the profile did not measure it)."""
        return next((s for o, s in self.redistribute_extra if o == op), 0.0)

    def functional_s(self, op: str) -> float:
        """`functional_extra` of ``op`` (0 when the profile did not measure it)."""
        return next((s for o, s in self.functional_extra if o == op), 0.0)

    def waited_excess_s(self, op: str, group_size: int) -> float:
        """A layer collective's excess: the larger of ``op``'s `excess_s` and the arrival
        skew after host work, `sync_excess_s` (0 for a single rank)."""
        if group_size < 2:
            return 0.0
        return max(self.excess_s(op, group_size), self.sync_excess_s)

    def excess_s(self, op: str, group_size: int) -> float:
        """`collective_excess` of ``op`` at the nearest measured group size (0 without
        one, or for a single rank)."""
        if group_size < 2:
            return 0.0
        known = [(abs(n - group_size), s) for o, n, s in self.collective_excess if o == op]
        return min(known)[1] if known else 0.0
