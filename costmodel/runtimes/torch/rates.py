"""`host_rates`: every host cost of the ``torch`` runtime that a profile gives.

The profile's per-operator rates (`costmodel.runtimes.torch.host_rates.base_host_rates`)
plus the two fits priced with the operator lists themselves: the DTensor context
(`costmodel.runtimes.torch.dtensor_rates`) and the operator mix
(`costmodel.runtimes.torch.op_mix_rates`), both from the host section's in-context probes.
A profile without a host section (a GPU's) is priced kernel-bound
(`costmodel.runtimes.torch.host_rates.kernel_bound_rates`): no host cost, no fit.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.runtimes.torch.dtensor_rates import dtensor_context_rates
from costmodel.runtimes.torch.host_rate_fits import host_figures
from costmodel.runtimes.torch.host_rates import HostRates, base_host_rates
from costmodel.runtimes.torch.op_mix_rates import with_op_mix
from profiles.schema import HardwareProfile


def host_rates(profile: HardwareProfile) -> HostRates:
    """The complete `HostRates` of ``profile`` (module docstring)."""
    rates = base_host_rates(profile)
    if profile.host is None:
        return rates
    means, scale = host_figures(profile.host, profile.compute.op_overhead_s)
    rates = replace(rates, dtensor_context=dtensor_context_rates(means, scale))
    return with_op_mix(rates, means, scale)
