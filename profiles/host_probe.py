"""A fixed piece of host work that tells how fast this host runs right now.

On a shared host the same step runs at different speeds from one moment to the next (other
tenants take time slices for seconds at a time, often with no steal time shown), so a run
measured in a slow spell and a profile measured in a fast one disagree by the spell, not by
the model. The probe is the same work everywhere it runs: the profiler times it with every
rank at once (the host section's timing ``host_probe``, `profiles.lookup.host_probe_s`), and
the executor, when handed this module's `host_probe` (`executor.run.RunConfig.host_probe`),
after each unprofiled step, every rank at once. A run's probe over a reference (in the
fidelity bench, the calibration runs' probe; for another world size scaled by the ratio of
the profiles' own probes) is the host's speed during that run relative to the reference
(`reports.host_speed.at_host_speed`).

The work mixes what a CPU training step spends its time on: `PROBE_OPS` dispatch-bound
element-wise operators on a small tensor and `PROBE_GEMMS` GEMMs of `PROBE_GEMM_SIZE`
(well under a millisecond per call on one thread of a server core).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

PROBE_OPS = 96
"""Element-wise operators per probe call (dispatch-bound: 256 fp32 values)."""
PROBE_GEMMS = 4
"""GEMMs per probe call."""
PROBE_GEMM_SIZE = 128
"""Side of the square fp32 GEMMs."""


def host_probe() -> Callable[[], None]:
    """One probe call (tensors made once, on the host's CPU whatever the ranks train on)."""
    small = torch.ones(256)
    a = torch.randn(PROBE_GEMM_SIZE, PROBE_GEMM_SIZE)

    def probe() -> None:
        x = small
        for _ in range(PROBE_OPS):
            x = x * 1.0001
        for _ in range(PROBE_GEMMS):
            torch.mm(a, a)

    return probe
